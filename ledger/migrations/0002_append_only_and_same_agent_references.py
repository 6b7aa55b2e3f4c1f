"""PostgreSQL enforces what the ledger promises.

* Events are append-only: a trigger refuses UPDATE and DELETE. The one
  sanctioned change is the retention purge, which sets the transaction-local
  setting `piper.ledger_purge` and may only replace the payload and stamp
  redacted_at (every hash stays, so the chain still verifies).
* recorded_at is the database's transaction time, whatever the writer sent.
* parent_event and correction_of may only point at the same agent's events
  (composite foreign keys over (agent_id, id)).
"""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION ledger_event_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.recorded_at := now();
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND current_setting('piper.ledger_purge', true) = 'on' THEN
        IF NEW.redacted_at IS NULL
           OR (NEW.id, NEW.agent_id, NEW.seq, NEW.event_type, NEW.occurred_at, NEW.recorded_at,
               NEW.session_id, NEW.actor, NEW.source_type, NEW.source_ref, NEW.authority,
               NEW.confidence, NEW.payload_hash, NEW.prev_hash, NEW.hash, NEW.parent_event_id,
               NEW.correction_of_id, NEW.privacy_class, NEW.retention_class)
              IS DISTINCT FROM
              (OLD.id, OLD.agent_id, OLD.seq, OLD.event_type, OLD.occurred_at, OLD.recorded_at,
               OLD.session_id, OLD.actor, OLD.source_type, OLD.source_ref, OLD.authority,
               OLD.confidence, OLD.payload_hash, OLD.prev_hash, OLD.hash, OLD.parent_event_id,
               OLD.correction_of_id, OLD.privacy_class, OLD.retention_class)
        THEN
            RAISE EXCEPTION 'ledger purge may only redact the payload of event %', OLD.id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'ledger_event is append-only: % of event % refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'record a correction event instead (correction_of)';
END;
$$;

CREATE TRIGGER ledger_event_append_only
    BEFORE INSERT OR UPDATE OR DELETE ON ledger_event
    FOR EACH ROW EXECUTE FUNCTION ledger_event_guard();

ALTER TABLE ledger_event
    ADD CONSTRAINT ledger_event_parent_same_agent
        FOREIGN KEY (agent_id, parent_event_id) REFERENCES ledger_event (agent_id, id),
    ADD CONSTRAINT ledger_event_correction_same_agent
        FOREIGN KEY (agent_id, correction_of_id) REFERENCES ledger_event (agent_id, id);
"""

BACKWARD = r"""
ALTER TABLE ledger_event
    DROP CONSTRAINT ledger_event_parent_same_agent,
    DROP CONSTRAINT ledger_event_correction_same_agent;
DROP TRIGGER ledger_event_append_only ON ledger_event;
DROP FUNCTION ledger_event_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_events_sources_tombstones")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
