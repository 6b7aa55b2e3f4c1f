"""Joins two migrations written side by side (no operation of its own)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('episodes', '0008_instruction_like'),
        ('episodes', '0008_related_ids_index'),
    ]

    operations = [
    ]
