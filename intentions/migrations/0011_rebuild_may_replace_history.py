"""A rebuild from the ledger may delete working-state versions.

Versions are history: the trigger refuses UPDATE and DELETE except to an
erasure (0007). A rebuild (services/rebuild.py) drops an agent's versions and
inserts them again from the ledger, under the transaction-local setting
`piper.rebuild`; it may delete, nothing more (its inserts need no leave).
"""

from django.db import migrations

GUARD = """
CREATE OR REPLACE FUNCTION intentions_workingstate_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {rebuild}
    IF current_setting('piper.erasure', true) = 'on' THEN
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        IF (NEW.id, NEW.agent_id, NEW.thread_id, NEW.version, NEW.based_on, NEW.session_id,
            NEW.created_at)
           IS DISTINCT FROM
           (OLD.id, OLD.agent_id, OLD.thread_id, OLD.version, OLD.based_on, OLD.session_id,
            OLD.created_at) THEN
            RAISE EXCEPTION 'working state %: an erasure may only scrub its words', OLD.id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION '% is history: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""
REBUILD = """IF TG_OP = 'DELETE' AND current_setting('piper.rebuild', true) = 'on' THEN
        RETURN OLD;
    END IF;"""


class Migration(migrations.Migration):
    dependencies = [("intentions", "0010_escalation_history_and_same_agent")]
    operations = [migrations.RunSQL(GUARD.format(rebuild=REBUILD), GUARD.format(rebuild=""))]
