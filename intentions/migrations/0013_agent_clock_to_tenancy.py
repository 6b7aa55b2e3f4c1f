"""The agent clock now belongs to tenancy (tenancy 0006): dropped from this app's
state only. Its table, `intentions_agentclock`, and its rows stay where they are.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("intentions", "0012_rebuild_may_rewrite_intentions"),
        ("tenancy", "0006_agent_clock_from_intentions"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="AgentClock")],
            database_operations=[],
        ),
    ]
