"""Record time is taken when the chain lock is granted, not when the transaction began.

With now() (the transaction's start), a writer that began first but waited
for a lock recorded its events *before* the writer it waited for, so record
time could run backwards along a chain and a later belief could look older
than the one it replaced. The ledger service now stamps clock_timestamp()
into the transaction-local setting piper.record_time right after locking the
chain head, and the trigger takes recorded_at from there.
"""

from django.db import migrations

GUARD = r"""
CREATE OR REPLACE FUNCTION ledger_event_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- The ledger service stamps piper.record_time when it takes the
        -- chain lock; any other insert gets the transaction's start time.
        NEW.recorded_at := coalesce(
            nullif(current_setting('piper.record_time', true), '')::timestamptz, now()
        );
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

OLD_GUARD = r"""
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

PURGE_ONLY_EMPTIES = (
    "OR NEW.payload IS DISTINCT FROM '{}'::jsonb OR OLD.redacted_at IS NOT NULL"
)


class Migration(migrations.Migration):
    dependencies = [("ledger", "0004_tombstones_append_only")]
    operations = [
        migrations.RunSQL(
            GUARD % {"purge_only_empties": PURGE_ONLY_EMPTIES},
            OLD_GUARD % {"purge_only_empties": PURGE_ONLY_EMPTIES},
        )
    ]
