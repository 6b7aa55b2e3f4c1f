"""Foreign-key indexes only where a query needs them.

A superseding claim writes three row versions (the new value, the remainder
of the old one, and the old one closed by a non-HOT UPDATE), so every index on
facts_fact takes three entries per claim; Django had added one per foreign key.

Dropped, because something else serves the lookup or nothing looks it up:

* agent_id: every facts_fact index leads with agent_id.
* subject_id: every query by subject names the agent too (facts_versions_idx,
  facts_believed_idx). Its single-column foreign key goes as well: the
  composite (agent_id, subject_id) key of migration 0004 implies it (the
  entity exists, and is the agent's) and is the one that cascades.
* predicate_id and object_entity_id: the same for their foreign keys (the
  composite keys imply them). predicate_id keeps its index: a predicate's
  redefinition checks its believed facts by predicate alone.
* source_event_id: nothing reads facts by their event, and ledger events are
  never deleted (a trigger refuses), so no key check walks it.
* facts_factevidence.fact_id: facts_evidence_once (fact_id, event_id) leads
  with it. facts_factevidence.event_id: as source_event_id.

Made partial (WHERE … IS NOT NULL), since most rows leave them empty:

* object_entity_id (only relations): the key check when an entity is deleted
  (a rebuild's clear), beside facts_object_entity_idx (believed rows only).
* supersedes_id, superseded_by_id, contests_id: deleting versions (a rebuild's
  clear) checks, per deleted row, that no version still links to it; and
  contests_id answers every read's "open contests against this version".

The database side drops only what goes (Django would drop and re-add, and so
re-validate, every foreign key it touches).
"""

import django.db.models.deletion
from django.db import migrations, models

INDEXES = [  # (table, index, column)
    ("facts_fact", "facts_fact_agent_id_ceddd377", "agent_id"),
    ("facts_fact", "facts_fact_subject_id_918ec6c3", "subject_id"),
    ("facts_fact", "facts_fact_object_entity_id_e1796edc", "object_entity_id"),
    ("facts_fact", "facts_fact_source_event_id_d99fbe48", "source_event_id"),
    ("facts_fact", "facts_fact_supersedes_id_f911dd42", "supersedes_id"),
    ("facts_fact", "facts_fact_superseded_by_id_ca0e868a", "superseded_by_id"),
    ("facts_fact", "facts_fact_contests_id_083b9c87", "contests_id"),
    ("facts_factevidence", "facts_factevidence_fact_id_e2902709", "fact_id"),
    ("facts_factevidence", "facts_factevidence_event_id_ef74f303", "event_id"),
]
CONSTRAINTS = [  # (constraint, column, target)
    ("facts_fact_subject_id_918ec6c3_fk_facts_entity_id", "subject_id", "facts_entity"),
    ("facts_fact_predicate_id_53b5fa2f_fk_facts_predicate_id", "predicate_id", "facts_predicate"),
    ("facts_fact_object_entity_id_e1796edc_fk_facts_entity_id", "object_entity_id", "facts_entity"),
]
FORWARD = [f"DROP INDEX IF EXISTS {name};" for _, name, _ in INDEXES] + [
    f"ALTER TABLE facts_fact DROP CONSTRAINT IF EXISTS {name};" for name, _, _ in CONSTRAINTS
]
BACKWARD = [f"CREATE INDEX {name} ON {table} ({column});" for table, name, column in INDEXES] + [
    f"ALTER TABLE facts_fact ADD CONSTRAINT {name} FOREIGN KEY ({column}) REFERENCES {target} (id) "
    "DEFERRABLE INITIALLY DEFERRED;"
    for name, column, target in CONSTRAINTS
]


class Migration(migrations.Migration):
    dependencies = [
        ("facts", "0005_fact_texts"),
        ("ledger", "0005_record_time_at_chain_lock"),
        ("tenancy", "0002_api_key_rate_positive"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="fact",
                    name="agent",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="tenancy.agent",
                    ),
                ),
                migrations.AlterField(
                    model_name="fact",
                    name="contests",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        help_text="The higher-authority version this claim challenged.",
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="contested_by",
                        to="facts.fact",
                    ),
                ),
                migrations.AlterField(
                    model_name="fact",
                    name="object_entity",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        help_text="The object, when the fact is a relation.",
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="incoming_facts",
                        to="facts.entity",
                    ),
                ),
                migrations.AlterField(
                    model_name="fact",
                    name="predicate",
                    field=models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="facts",
                        to="facts.predicate",
                    ),
                ),
                migrations.AlterField(
                    model_name="fact",
                    name="source_event",
                    field=models.ForeignKey(
                        db_index=False,
                        help_text="The claim's ledger event.",
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="ledger.event",
                    ),
                ),
                migrations.AlterField(
                    model_name="fact",
                    name="subject",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="facts",
                        to="facts.entity",
                    ),
                ),
                migrations.AlterField(
                    model_name="fact",
                    name="superseded_by",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="facts.fact",
                    ),
                ),
                migrations.AlterField(
                    model_name="fact",
                    name="supersedes",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="facts.fact",
                    ),
                ),
                migrations.AlterField(
                    model_name="factevidence",
                    name="event",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="ledger.event",
                    ),
                ),
                migrations.AlterField(
                    model_name="factevidence",
                    name="fact",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evidence",
                        to="facts.fact",
                    ),
                ),
            ],
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(
                condition=models.Q(("supersedes__isnull", False)),
                fields=["supersedes"],
                name="facts_supersedes_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(
                condition=models.Q(("superseded_by__isnull", False)),
                fields=["superseded_by"],
                name="facts_superseded_by_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(
                condition=models.Q(("contests__isnull", False)),
                fields=["contests"],
                name="facts_contests_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="fact",
            index=models.Index(
                condition=models.Q(("object_entity__isnull", False)),
                fields=["object_entity"],
                name="facts_object_entity_fk_idx",
            ),
        ),
    ]
