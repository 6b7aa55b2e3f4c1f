"""A fact's subject, object and predicate, and an alias's entity, belong to the
fact's (alias's) own agent: composite foreign keys over (agent_id, …) make a
cross-tenant reference impossible, whatever the code does."""

from django.db import migrations

REFERENCES = [
    ("facts_fact", "facts_fact_subject_same_agent", "subject_id", "facts_entity"),
    ("facts_fact", "facts_fact_object_same_agent", "object_entity_id", "facts_entity"),
    ("facts_fact", "facts_fact_predicate_same_agent", "predicate_id", "facts_predicate"),
    ("facts_entityalias", "facts_alias_entity_same_agent", "entity_id", "facts_entity"),
]

FORWARD = "\n".join(
    f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY (agent_id, {column}) "
    f"REFERENCES {target} (agent_id, id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;"
    for table, name, column, target in REFERENCES
)
BACKWARD = "\n".join(
    f"ALTER TABLE {table} DROP CONSTRAINT {name};" for table, name, _, _ in REFERENCES
)


class Migration(migrations.Migration):
    dependencies = [("facts", "0003_evidence_ids_derived_and_agent_id_keys")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
