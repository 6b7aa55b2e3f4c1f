"""PostgreSQL enforces the intentions' promises.

* An intention's status only moves along the state machine
  (intentions.models.TRANSITIONS): completed and cancelled one-shots can never
  come back, whoever writes.
* Working-state versions, firings and transitions are history: never
  updated once written.
* Threads, versions, intentions, firings and pending items reference only
  their own agent's rows (composite foreign keys).
"""

from django.db import migrations

ALLOWED = {
    "active": ("due", "blocked", "completed", "cancelled", "expired"),
    "blocked": ("active", "due", "completed", "cancelled", "expired"),
    "due": ("executing", "completed", "active", "cancelled", "expired"),
    "executing": ("completed", "due", "active", "cancelled", "expired"),
    "completed": ("active",),
    "cancelled": (),
    "expired": (),
}
PAIRS = ", ".join(f"('{a}', '{b}')" for a, targets in ALLOWED.items() for b in targets)

FORWARD = f"""
CREATE FUNCTION intentions_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status
       AND (OLD.status, NEW.status) NOT IN ({PAIRS}) THEN
        RAISE EXCEPTION 'intention %: % -> % is not a transition of the state machine',
            OLD.id, OLD.status, NEW.status USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.status = 'completed' AND NEW.status = 'active' AND NEW.rrule = '' THEN
        RAISE EXCEPTION 'intention %: a completed one-shot intention cannot come back', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER intentions_status_machine BEFORE UPDATE ON intentions_intention
    FOR EACH ROW EXECUTE FUNCTION intentions_status_guard();

CREATE FUNCTION intentions_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is history: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER intentions_workingstate_history BEFORE UPDATE OR DELETE ON intentions_workingstate
    FOR EACH ROW EXECUTE FUNCTION intentions_history_guard();
CREATE TRIGGER intentions_firing_history BEFORE UPDATE ON intentions_firing
    FOR EACH ROW EXECUTE FUNCTION intentions_history_guard();
CREATE TRIGGER intentions_transition_history BEFORE UPDATE ON intentions_transition
    FOR EACH ROW EXECUTE FUNCTION intentions_history_guard();

ALTER TABLE intentions_workingstate ADD CONSTRAINT intentions_state_same_agent
    FOREIGN KEY (agent_id, thread_id) REFERENCES intentions_thread (agent_id, id)
    DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE intentions_intention ADD CONSTRAINT intentions_intention_thread_same_agent
    FOREIGN KEY (agent_id, thread_id) REFERENCES intentions_thread (agent_id, id)
    DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE intentions_pendingitem ADD CONSTRAINT intentions_pending_same_agent
    FOREIGN KEY (agent_id, thread_id) REFERENCES intentions_thread (agent_id, id)
    DEFERRABLE INITIALLY DEFERRED;
ALTER TABLE intentions_firing ADD CONSTRAINT intentions_firing_same_agent
    FOREIGN KEY (agent_id, intention_id) REFERENCES intentions_intention (agent_id, id)
    DEFERRABLE INITIALLY DEFERRED;
"""

BACKWARD = """
ALTER TABLE intentions_firing DROP CONSTRAINT intentions_firing_same_agent;
ALTER TABLE intentions_pendingitem DROP CONSTRAINT intentions_pending_same_agent;
ALTER TABLE intentions_intention DROP CONSTRAINT intentions_intention_thread_same_agent;
ALTER TABLE intentions_workingstate DROP CONSTRAINT intentions_state_same_agent;
DROP TRIGGER intentions_transition_history ON intentions_transition;
DROP TRIGGER intentions_firing_history ON intentions_firing;
DROP TRIGGER intentions_workingstate_history ON intentions_workingstate;
DROP FUNCTION intentions_history_guard();
DROP TRIGGER intentions_status_machine ON intentions_intention;
DROP FUNCTION intentions_status_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("intentions", "0002_threads_states_intentions")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
