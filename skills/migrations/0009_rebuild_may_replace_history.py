"""A rebuild from the ledger may delete an agent's skills and their history.

Versions, transitions, cases and provenance are history, and finished runs
final (0003, 0006): only an erasure may delete them. The skills rebuild
(services/rebuild.py) drops an agent's rows and inserts them again as the
ledger's events make them, under the transaction-local setting `piper.rebuild`
(as intentions 0011): it may delete, nothing more (its inserts need no leave).
"""

import importlib

from django.db import migrations

_0006 = importlib.import_module("skills.migrations.0006_erasure_may_remove_history")

REBUILD = """BEGIN
    IF TG_OP = 'DELETE' AND current_setting('piper.rebuild', true) = 'on' THEN
        RETURN OLD;
    END IF;
"""
# Each of the three guard functions opens with BEGIN on its own line.
assert _0006.FORWARD.count("BEGIN\n") == 3
FORWARD = _0006.FORWARD.replace("BEGIN\n", REBUILD)


class Migration(migrations.Migration):
    dependencies = [("skills", "0008_drawn_replay")]
    operations = [migrations.RunSQL(FORWARD, _0006.FORWARD)]
