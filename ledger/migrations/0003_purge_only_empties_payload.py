"""The purge path may only empty a payload, once.

0002 let an UPDATE under `piper.ledger_purge` write any payload, and purge an
already purged event again: the sanctioned path could rewrite evidence (a
purged event's payload is outside every hash). Now the purge must set the
payload to {} and stamp redacted_at on an event not yet redacted.
"""

from django.db import migrations

GUARD = r"""
CREATE OR REPLACE FUNCTION ledger_event_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.recorded_at := now();
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND current_setting('piper.ledger_purge', true) = 'on' THEN
        IF NEW.redacted_at IS NULL
           %(purge_only_empties)s
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
            RAISE EXCEPTION 'ledger purge may only redact the payload of event %%', OLD.id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'ledger_event is append-only: %% of event %% refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation',
              HINT = 'record a correction event instead (correction_of)';
END;
$$;
"""

FORWARD = GUARD % {
    "purge_only_empties": "OR NEW.payload IS DISTINCT FROM '{}'::jsonb OR OLD.redacted_at IS NOT NULL"
}
BACKWARD = GUARD % {"purge_only_empties": ""}


class Migration(migrations.Migration):
    dependencies = [("ledger", "0002_append_only_and_same_agent_references")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
