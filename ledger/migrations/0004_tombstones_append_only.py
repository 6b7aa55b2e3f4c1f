"""Tombstones are the evidence that a purge happened: like events, they are
never changed or removed once written."""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION ledger_tombstone_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger_tombstone is append-only: % of tombstone % refused', TG_OP, OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TRIGGER ledger_tombstone_append_only
    BEFORE UPDATE OR DELETE ON ledger_tombstone
    FOR EACH ROW EXECUTE FUNCTION ledger_tombstone_guard();
"""

BACKWARD = r"""
DROP TRIGGER ledger_tombstone_append_only ON ledger_tombstone;
DROP FUNCTION ledger_tombstone_guard();
"""


class Migration(migrations.Migration):
    dependencies = [("ledger", "0003_purge_only_empties_payload")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
