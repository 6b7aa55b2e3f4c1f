"""Advisory locks for many keys: bounded in number, and still exclusive per key."""

import psycopg
import pytest
from django.db import connection, transaction

from piper.locks import _LOCK_SQL, STRIPES, advisory_xact_locks

pytestmark = pytest.mark.django_db(transaction=True)


def _advisory_locks_held() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def _other_session():
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    other = psycopg.connect(**params, autocommit=True)
    other.execute("SET lock_timeout = '200ms'")
    return other


def _can_lock(other, namespace: str, key: str) -> bool:
    """Whether another session gets the key's lock now (it gives up after 200 ms)."""
    try:
        with other.transaction(), other.cursor() as cursor:
            # The same statement as piper.locks, in a session of its own.
            cursor.execute(_LOCK_SQL, [namespace, [key]])
        return True
    except psycopg.errors.LockNotAvailable:
        return False


def test_ten_thousand_keys_take_at_most_one_lock_a_stripe():
    with transaction.atomic():
        advisory_xact_locks("facts:agent-1", (f"subject-{n}:predicate" for n in range(10_000)))
        assert _advisory_locks_held() == STRIPES
    assert _advisory_locks_held() == 0


def test_a_locked_key_waits_for_the_holder_and_another_namespace_does_not():
    other = _other_session()
    try:
        with transaction.atomic():
            advisory_xact_locks("facts:agent-1", ["alice:lives_in"])
            assert not _can_lock(other, "facts:agent-1", "alice:lives_in")
            assert _can_lock(other, "facts:agent-2", "alice:lives_in")
        assert _can_lock(other, "facts:agent-1", "alice:lives_in")
    finally:
        other.close()
