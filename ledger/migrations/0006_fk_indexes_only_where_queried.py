"""Foreign-key indexes on ledger_event only where they earn their cost.

* agent_id: every ledger_event index leads with agent_id; the single-column
  one was one more entry per append.
* parent_event_id, correction_of_id: empty on most events, so indexed only
  where set. No key check walks them (the composite same-agent keys point at
  events, which are never deleted); they serve the reverse lookups.

The database side drops only the indexes (Django would drop and re-add, and so
re-validate, the agent foreign key).
"""

import django.db.models.deletion
from django.db import migrations, models

INDEXES = [  # (index, column)
    ("ledger_event_agent_id_c4053cf7", "agent_id"),
    ("ledger_event_parent_event_id_eaeaa7db", "parent_event_id"),
    ("ledger_event_correction_of_id_8aeae17f", "correction_of_id"),
]
FORWARD = [f"DROP INDEX IF EXISTS {name};" for name, _ in INDEXES]
BACKWARD = [f"CREATE INDEX {name} ON ledger_event ({column});" for name, column in INDEXES]


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0005_record_time_at_chain_lock"),
        ("tenancy", "0002_api_key_rate_positive"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="event",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="tenancy.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="event",
                    name="correction_of",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="corrections",
                        to="ledger.event",
                    ),
                ),
                migrations.AlterField(
                    model_name="event",
                    name="parent_event",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="children",
                        to="ledger.event",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("parent_event__isnull", False)),
                fields=["parent_event"],
                name="ledger_event_parent_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="event",
            index=models.Index(
                condition=models.Q(("correction_of__isnull", False)),
                fields=["correction_of"],
                name="ledger_event_correction_idx",
            ),
        ),
    ]
