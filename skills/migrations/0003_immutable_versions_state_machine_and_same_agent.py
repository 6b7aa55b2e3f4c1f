"""PostgreSQL enforces the skills' promises.

* A skill version's content is immutable: an UPDATE may change only its status
  (and status_changed_at), and the status only moves along the lifecycle
  (skills.models.STATUS_TRANSITIONS); versions are never deleted.
* Transitions and validation cases are history: never updated or deleted.
  Validations and executions are final once finished (only a queued row may
  change, and only to finish it); neither is ever deleted.
* Every reference stays inside one agent (composite foreign keys), and a
  version supersedes only a version of its own skill.
"""

from django.db import migrations

ALLOWED = {
    "candidate": ("experimental", "deprecated", "retired"),
    "experimental": ("validated", "deprecated", "retired"),
    "validated": ("deprecated", "retired"),
    "deprecated": ("experimental", "retired"),
    "retired": (),
}
PAIRS = ", ".join(f"('{a}', '{b}')" for a, targets in ALLOWED.items() for b in targets)

IMMUTABLE = (
    "id", "agent_id", "skill_id", "number", "purpose", "scope", "trigger", "intent_embedding",
    "preconditions", "contraindications", "required_tools", "required_permissions",
    "parameter_schema", "procedure", "entry_point", "validator", "rollback", "examples",
    "holdout", "provenance_episodes", "supersedes_id", "source_event_id", "created_at",
)
OLD = ", ".join(f"OLD.{c}" for c in IMMUTABLE)
NEW = ", ".join(f"NEW.{c}" for c in IMMUTABLE)

SAME_AGENT = [
    ("skills_skill", "skills_skill_event_same_agent", "source_event_id", "ledger_event"),
    ("skills_skillversion", "skills_version_skill_same_agent", "skill_id", "skills_skill"),
    ("skills_skillversion", "skills_version_event_same_agent", "source_event_id", "ledger_event"),
    ("skills_versionprovenance", "skills_provenance_version_same_agent", "version_id", "skills_skillversion"),
    ("skills_versionprovenance", "skills_provenance_event_same_agent", "event_id", "ledger_event"),
    ("skills_versiontransition", "skills_transition_version_same_agent", "version_id", "skills_skillversion"),
    ("skills_versiontransition", "skills_transition_event_same_agent", "event_id", "ledger_event"),
    ("skills_validation", "skills_validation_version_same_agent", "version_id", "skills_skillversion"),
    ("skills_validation", "skills_validation_event_same_agent", "source_event_id", "ledger_event"),
    ("skills_validation", "skills_validation_finish_same_agent", "finish_event_id", "ledger_event"),
    ("skills_execution", "skills_execution_version_same_agent", "version_id", "skills_skillversion"),
    ("skills_execution", "skills_execution_event_same_agent", "source_event_id", "ledger_event"),
    ("skills_execution", "skills_execution_finish_same_agent", "finish_event_id", "ledger_event"),
]

FORWARD = f"""
CREATE FUNCTION skills_version_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'skill version %: versions are history; retire it instead', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF ROW({OLD}) IS DISTINCT FROM ROW({NEW}) THEN
        RAISE EXCEPTION 'skill version %: a version is immutable; write a new version', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status
       AND (OLD.status, NEW.status) NOT IN ({PAIRS}) THEN
        RAISE EXCEPTION 'skill version %: % -> % is not a transition of the lifecycle',
            OLD.id, OLD.status, NEW.status USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER skills_version_immutable BEFORE UPDATE OR DELETE ON skills_skillversion
    FOR EACH ROW EXECUTE FUNCTION skills_version_guard();

CREATE FUNCTION skills_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is history: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER skills_transition_history BEFORE UPDATE OR DELETE ON skills_versiontransition
    FOR EACH ROW EXECUTE FUNCTION skills_history_guard();
CREATE TRIGGER skills_case_history BEFORE UPDATE OR DELETE ON skills_validationcase
    FOR EACH ROW EXECUTE FUNCTION skills_history_guard();
CREATE TRIGGER skills_provenance_history BEFORE UPDATE OR DELETE ON skills_versionprovenance
    FOR EACH ROW EXECUTE FUNCTION skills_history_guard();

CREATE FUNCTION skills_final_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR OLD.status <> 'queued' THEN
        RAISE EXCEPTION '% %: a finished record is final (% refused)', TG_TABLE_NAME, OLD.id, TG_OP
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.id <> OLD.id OR NEW.agent_id <> OLD.agent_id OR NEW.version_id <> OLD.version_id
       OR NEW.source_event_id <> OLD.source_event_id THEN
        RAISE EXCEPTION '% %: what was asked for cannot change', TG_TABLE_NAME, OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER skills_validation_final BEFORE UPDATE OR DELETE ON skills_validation
    FOR EACH ROW EXECUTE FUNCTION skills_final_guard();
CREATE TRIGGER skills_execution_final BEFORE UPDATE OR DELETE ON skills_execution
    FOR EACH ROW EXECUTE FUNCTION skills_final_guard();

ALTER TABLE skills_skillversion ADD CONSTRAINT skills_version_supersedes_same_skill
    FOREIGN KEY (skill_id, supersedes_id) REFERENCES skills_skillversion (skill_id, id)
    DEFERRABLE INITIALLY DEFERRED;
""" + "\n".join(
    f"ALTER TABLE {table} ADD CONSTRAINT {name} FOREIGN KEY (agent_id, {column}) "
    f"REFERENCES {target} (agent_id, id) DEFERRABLE INITIALLY DEFERRED;"
    for table, name, column, target in SAME_AGENT
)

BACKWARD = "\n".join(
    f"ALTER TABLE {table} DROP CONSTRAINT {name};" for table, name, _, _ in SAME_AGENT
) + """
ALTER TABLE skills_skillversion DROP CONSTRAINT skills_version_supersedes_same_skill;
DROP TRIGGER skills_execution_final ON skills_execution;
DROP TRIGGER skills_validation_final ON skills_validation;
DROP FUNCTION skills_final_guard();
DROP TRIGGER skills_provenance_history ON skills_versionprovenance;
DROP TRIGGER skills_case_history ON skills_validationcase;
DROP TRIGGER skills_transition_history ON skills_versiontransition;
DROP FUNCTION skills_history_guard();
DROP TRIGGER skills_version_immutable ON skills_skillversion;
DROP FUNCTION skills_version_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("skills", "0002_versions_validations_executions")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
