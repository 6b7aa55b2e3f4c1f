"""Changing the ledger behind the trigger's back, as an attacker with database access would."""

from django.db import connection, transaction


def behind_the_triggers_back(sql: str, params=()) -> None:
    """Run SQL with triggers off (session_replication_role = replica) for this transaction only."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('session_replication_role', 'replica', true)")
        cursor.execute(sql, params)
        cursor.execute("SELECT set_config('session_replication_role', 'origin', true)")
