"""Erasure that leaves nothing to guess, and purges of many events at once.

* Events written from now on use hash scheme 2 (ledger.hashing): payload_hash
  is an HMAC of the payload and the labels (actor, session_id, source_ref),
  keyed by a per-event salt. The purge path may now also blank the salt and,
  for scheme 2, the labels; everything else stays as it was.
* One purge event may record many tombstones (purge_event is a plain foreign key).
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models

_0005 = importlib.import_module("ledger.migrations.0005_record_time_at_chain_lock")

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
           OR OLD.redacted_at IS NOT NULL
           OR NEW.payload IS DISTINCT FROM '{}'::jsonb
           OR NEW.payload_salt <> ''
           OR (OLD.hash_version = 1 AND (NEW.actor, NEW.session_id, NEW.source_ref)
                                        IS DISTINCT FROM (OLD.actor, OLD.session_id, OLD.source_ref))
           OR (OLD.hash_version <> 1 AND (NEW.actor, NEW.session_id, NEW.source_ref)
                                         IS DISTINCT FROM ('', '', ''))
           OR (NEW.id, NEW.agent_id, NEW.seq, NEW.event_type, NEW.occurred_at, NEW.recorded_at,
               NEW.source_type, NEW.authority, NEW.confidence, NEW.payload_hash, NEW.prev_hash,
               NEW.hash, NEW.parent_event_id, NEW.correction_of_id, NEW.privacy_class,
               NEW.retention_class, NEW.hash_version)
              IS DISTINCT FROM
              (OLD.id, OLD.agent_id, OLD.seq, OLD.event_type, OLD.occurred_at, OLD.recorded_at,
               OLD.source_type, OLD.authority, OLD.confidence, OLD.payload_hash, OLD.prev_hash,
               OLD.hash, OLD.parent_event_id, OLD.correction_of_id, OLD.privacy_class,
               OLD.retention_class, OLD.hash_version)
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
"""

# 0005's guard, for a migration backwards.
PREVIOUS_GUARD = _0005.GUARD % {"purge_only_empties": _0005.PURGE_ONLY_EMPTIES}


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0006_fk_indexes_only_where_queried"),
        ("tenancy", "0002_api_key_rate_positive"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="hash_version",
            field=models.PositiveSmallIntegerField(
                default=1,
                db_default=1,
                help_text="1: the chain covers the labels (actor, session, source_ref) as "
                "written; 2: payload_hash covers them, and a purge removes them with the payload.",
            ),
        ),
        migrations.AddField(
            model_name="event",
            name="payload_salt",
            field=models.CharField(
                blank=True,
                default="",
                db_default="",
                help_text="The key of payload_hash (hash_version 2); a purge removes it, so an "
                "erased payload cannot be confirmed by guessing.",
                max_length=32,
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="payload_hash",
            field=models.CharField(
                help_text="Hash of the canonical JSON payload: SHA-256 (hash_version 1), or an "
                "HMAC of the payload and the labels keyed by payload_salt (hash_version 2).",
                max_length=64,
            ),
        ),
        migrations.AlterField(
            model_name="tombstone",
            name="purge_event",
            field=models.ForeignKey(
                help_text="The ledger event recording the purge (one for every event a purge took).",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="ledger.event",
            ),
        ),
        migrations.AddConstraint(
            model_name="event",
            constraint=models.CheckConstraint(
                condition=models.Q(("hash_version__in", [1, 2])), name="ledger_event_hash_version"
            ),
        ),
        migrations.RunSQL(GUARD, PREVIOUS_GUARD),
    ]
