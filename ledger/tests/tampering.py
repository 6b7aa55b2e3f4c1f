"""Changing the ledger behind the trigger's back, as an attacker with database access would."""

from django.db import connection, transaction


def behind_the_triggers_back(sql: str, params=()) -> None:
    """Run SQL with triggers off (session_replication_role = replica) for this transaction only."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('session_replication_role', 'replica', true)")
        cursor.execute(sql, params)
        cursor.execute("SELECT set_config('session_replication_role', 'origin', true)")


def as_scheme_1(event) -> None:
    """Rewrite the agent's *last* event as the ledger wrote events before hash
    scheme 2 (plain payload hash, labels in the chain), head included: old data."""
    from ledger.hashing import event_hash, payload_hash
    from ledger.models import ChainHead

    event.hash_version, event.payload_salt = 1, ""
    event.payload_hash = payload_hash(event.payload)
    event.hash = event_hash(event)
    behind_the_triggers_back(
        "UPDATE ledger_event SET hash_version = 1, payload_salt = '', payload_hash = %s, "
        "hash = %s WHERE id = %s",
        [event.payload_hash, event.hash, event.pk],
    )
    ChainHead.objects.filter(agent_id=event.agent_id, last_seq=event.seq).update(
        last_hash=event.hash
    )
