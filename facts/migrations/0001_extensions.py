# Facts need btree_gist (exclusion constraints over valid-time ranges) and
# pg_trgm (fuzzy entity lookup).
from django.contrib.postgres.operations import BtreeGistExtension, TrigramExtension
from django.db import migrations


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [BtreeGistExtension(), TrigramExtension()]
