"""An erasure may remove skill history that came from erased evidence.

Versions, transitions, validation cases and provenance are history, and
finished validations and executions final: the guards of 0003 refuse every
change. The one exception is an erasure (forgetting app), which sets the
transaction-local `piper.erasure`: it may delete these rows, and may cut an
erased episode out of a surviving version's provenance_episodes (or its link
to an erased version it superseded) — nothing else.
"""

import importlib

from django.db import migrations

_0003 = importlib.import_module("skills.migrations.0003_immutable_versions_state_machine_and_same_agent")

ERASING = "current_setting('piper.erasure', true) = 'on'"
KEEPS = [c for c in _0003.IMMUTABLE if c not in ("provenance_episodes", "supersedes_id")]
OLD_KEPT = ", ".join(f"OLD.{c}" for c in KEEPS)
NEW_KEPT = ", ".join(f"NEW.{c}" for c in KEEPS)

FORWARD = f"""
CREATE OR REPLACE FUNCTION skills_version_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF {ERASING} THEN
        IF TG_OP = 'DELETE' THEN
            RETURN OLD;
        END IF;
        IF ROW({OLD_KEPT}) IS DISTINCT FROM ROW({NEW_KEPT})
           OR NEW.status IS DISTINCT FROM OLD.status THEN
            RAISE EXCEPTION 'skill version %: an erasure may only cut provenance and links', OLD.id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'skill version %: versions are history; retire it instead', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF ROW({_0003.OLD}) IS DISTINCT FROM ROW({_0003.NEW}) THEN
        RAISE EXCEPTION 'skill version %: a version is immutable; write a new version', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status
       AND (OLD.status, NEW.status) NOT IN ({_0003.PAIRS}) THEN
        RAISE EXCEPTION 'skill version %: % -> % is not a transition of the lifecycle',
            OLD.id, OLD.status, NEW.status USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE FUNCTION skills_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND {ERASING} THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% is history: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE OR REPLACE FUNCTION skills_final_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND {ERASING} THEN
        RETURN OLD;
    END IF;
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
"""

BACKWARD = f"""
CREATE OR REPLACE FUNCTION skills_version_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'skill version %: versions are history; retire it instead', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF ROW({_0003.OLD}) IS DISTINCT FROM ROW({_0003.NEW}) THEN
        RAISE EXCEPTION 'skill version %: a version is immutable; write a new version', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status
       AND (OLD.status, NEW.status) NOT IN ({_0003.PAIRS}) THEN
        RAISE EXCEPTION 'skill version %: % -> % is not a transition of the lifecycle',
            OLD.id, OLD.status, NEW.status USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$;

CREATE OR REPLACE FUNCTION skills_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is history: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE OR REPLACE FUNCTION skills_final_guard() RETURNS trigger LANGUAGE plpgsql AS $$
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
"""


class Migration(migrations.Migration):
    dependencies = [("skills", "0005_match_covering_index")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
