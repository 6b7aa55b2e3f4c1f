"""Joins two migrations written side by side (no operation of its own)."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('episodes', '0009_episode_canonical'),
        ('episodes', '0009_merge_instruction_like_and_related_ids_index'),
    ]

    operations = [
    ]
