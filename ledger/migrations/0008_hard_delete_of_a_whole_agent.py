"""A whole agent may be deleted, by an operator, and nothing else.

Events and tombstones refuse DELETE (0002, 0004). A hard delete of an agent
(forgetting.services.agents) sets the transaction-local `piper.agent_delete`
to that agent's id: rows of exactly that agent may then be deleted, and no
other row, and no UPDATE is allowed by it.
"""

import importlib

from django.db import migrations

_0007 = importlib.import_module("ledger.migrations.0007_salted_payload_hash_and_bulk_purge")

AGENT_DELETE = """
    IF TG_OP = 'DELETE'
       AND current_setting('piper.agent_delete', true) = OLD.agent_id::text THEN
        RETURN OLD;
    END IF;
"""

EVENT_GUARD = _0007.GUARD.replace(
    "BEGIN\n    IF TG_OP = 'INSERT' THEN", "BEGIN" + AGENT_DELETE + "    IF TG_OP = 'INSERT' THEN", 1
)
assert EVENT_GUARD != _0007.GUARD

TOMBSTONE_GUARD = r"""
CREATE OR REPLACE FUNCTION ledger_tombstone_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN""" + AGENT_DELETE + r"""    RAISE EXCEPTION 'ledger_tombstone is append-only: % of tombstone % refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""

PREVIOUS_TOMBSTONE_GUARD = r"""
CREATE OR REPLACE FUNCTION ledger_tombstone_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger_tombstone is append-only: % of tombstone % refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0007_salted_payload_hash_and_bulk_purge")]
    operations = [
        migrations.RunSQL(EVENT_GUARD, _0007.GUARD),
        migrations.RunSQL(TOMBSTONE_GUARD, PREVIOUS_TOMBSTONE_GUARD),
    ]
