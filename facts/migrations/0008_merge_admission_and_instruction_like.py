"""Joins two migrations written side by side (no operation of its own)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('facts', '0007_admission_threshold'),
        ('facts', '0007_fact_instruction_like'),
    ]

    operations = [
    ]
