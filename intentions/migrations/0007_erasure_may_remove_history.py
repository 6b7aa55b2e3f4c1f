"""An erasure may remove or scrub working-state versions made from erased evidence.

Working-state versions are history: 0003's guard refuses every UPDATE and
DELETE. The one exception is an erasure (forgetting app), which sets the
transaction-local `piper.erasure`: it may delete a version, or rewrite the
words of one that quoted erased material (state, its size, and the ledger
event holding the scrubbed copy) — nothing else. Firings and transitions stay
history (deleted only with their intention).
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION intentions_workingstate_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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
DROP TRIGGER intentions_workingstate_history ON intentions_workingstate;
CREATE TRIGGER intentions_workingstate_history BEFORE UPDATE OR DELETE ON intentions_workingstate
    FOR EACH ROW EXECUTE FUNCTION intentions_workingstate_guard();
"""

BACKWARD = """
DROP TRIGGER intentions_workingstate_history ON intentions_workingstate;
CREATE TRIGGER intentions_workingstate_history BEFORE UPDATE OR DELETE ON intentions_workingstate
    FOR EACH ROW EXECUTE FUNCTION intentions_history_guard();
DROP FUNCTION intentions_workingstate_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("intentions", "0006_outbox_claim_lease")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
