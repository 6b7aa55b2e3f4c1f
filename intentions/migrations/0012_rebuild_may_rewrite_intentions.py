"""A rebuild from the ledger may set intentions, firings, transitions and
escalations to what the ledger says.

0003 refuses a status change outside the state machine and any UPDATE of a
firing or transition (0010: of an escalation). The intentions rebuild
(services/intentions_rebuild.py) writes each row as the ledger's events make it,
under the transaction-local setting `piper.rebuild` (as 0011 for working-state
versions); every other writer is still held to the state machine and history.
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
REBUILD = """IF current_setting('piper.rebuild', true) = 'on' THEN
        RETURN NEW;
    END IF;"""
STATUS_GUARD = """
CREATE OR REPLACE FUNCTION intentions_status_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {rebuild}
    IF NEW.status IS DISTINCT FROM OLD.status
       AND (OLD.status, NEW.status) NOT IN ({pairs}) THEN
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
"""
HISTORY_GUARD = """
CREATE OR REPLACE FUNCTION intentions_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    {rebuild}
    RAISE EXCEPTION '% is history: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""


def sql(rebuild: str) -> str:
    return STATUS_GUARD.format(rebuild=rebuild, pairs=PAIRS) + HISTORY_GUARD.format(
        rebuild=rebuild
    )


class Migration(migrations.Migration):
    dependencies = [("intentions", "0011_rebuild_may_replace_history")]
    operations = [migrations.RunSQL(sql(REBUILD), sql(""))]
