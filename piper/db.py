"""The hottest read statements as server-side prepared statements.

Planning a statement costs PostgreSQL more than running it when the answer is
a few index lookups, like the facts lookup over five tables
(docs/experiments.md, 2026-11-29). A prepared statement is planned once per connection (after five
executions PostgreSQL keeps a generic plan when it costs no more than the
custom ones) and then only executed.

Django turns psycopg's preparation off (`prepare_threshold` None) so that
transaction-mode connection poolers keep working, and its cursors bind
parameters client-side, which never prepares. Only `fetchall_prepared`
prepares, and only the statements handed to it. Behind a pooler that does not
track prepared statements (PgBouncer before 1.21 in transaction mode) set
PIPER_DB_PREPARED_STATEMENTS=false: the same statements then run unprepared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.backends.postgresql.base import ServerBindingCursor
from pgvector import Vector
from pgvector.psycopg.vector import VectorBinaryDumper, VectorDumper
from psycopg import ClientCursor, pq

# psycopg prepares a statement on request only when a threshold is set; one no
# statement reaches keeps it from preparing anything on its own.
_EXPLICIT_ONLY = 2**31


class _ServerBoundCursor(ServerBindingCursor):
    def execute(self, query, params=None, *, prepare=None, binary=None):
        try:
            return super().execute(query, params, prepare=prepare, binary=binary)
        finally:
            # Django's query log (connection.queries, captured queries in tests)
            # reads the statement from psycopg's _query, which here holds $1, $2
            # placeholders (or nothing, after a prepared execution): log it with
            # its parameters in, as it would be sent with client-side binding.
            self._query = _LoggedStatement(self.connection, query, params)


class _PreparingCursor(_ServerBoundCursor):
    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


class _LoggedStatement:
    """The statement with its parameters in, as a client-side binding cursor
    sends it; built only when the query log reads it."""

    def __init__(self, raw_connection, sql, params):
        self._connection, self._sql, self._params = raw_connection, sql, params

    @property
    def query(self) -> bytes:
        return ClientCursor(self._connection).mogrify(self._sql, self._params).encode()


def _django_cursor(cursor_class):
    """What connection.cursor() does, with a psycopg cursor of `cursor_class`:
    Django's wrapper around it (query log, execute wrappers, error translation)."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(cursor_class(connection.connection))


def server_bound_cursor(*, binary: bool = False):
    """A Django cursor that sends its parameters apart from the statement
    (server-side binding, not prepared). A statement naming a large value
    several times — an episode search names its 4.6 kB query vector five
    times — is then parsed with it once (docs/benchmarks.md, episodic
    memory). Unnamed statements, so poolers are not a concern.
    `binary`: results come in PostgreSQL's binary format, which psycopg loads
    faster (UUIDs, timestamps); for types it has binary loaders for."""
    cursor = _django_cursor(_ServerBoundCursor)
    if binary:
        cursor.cursor.format = pq.Format.BINARY
    return cursor


def fetchall_prepared(sql: str, params: Mapping[str, Any] | Sequence[Any]) -> list[tuple]:
    """Every row of a read-only statement, run as a prepared statement on this
    connection (prepared on first use; psycopg forgets it after a rollback
    and prepares it again). The statement goes through Django's cursor
    wrapper like any other, so query logging, execute wrappers (query counts
    in tests) and error translation see it."""
    if not settings.PIPER_DB_PREPARED_STATEMENTS:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()
    cursor = _django_cursor(_PreparingCursor)
    raw = connection.connection
    if raw.prepare_threshold is None:
        raw.prepare_threshold = _EXPLICIT_ONLY
    with cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def vector_param(values: Sequence[float]) -> Vector:
    """`values` as a pgvector parameter, for a statement that casts it
    (`%(v)s::vector`): a server-bound cursor sends it in binary, 4 bytes a
    number, the others (and the query log) as a '[…]' literal. Formatting a
    query vector as text, for PostgreSQL to parse again, was a measurable share
    of an episode search (docs/benchmarks.md)."""
    return Vector(values)


def register_vector_dumpers(sender=None, connection=None, **kwargs) -> None:
    """connection_created: every connection can send vector_param's values.
    Registered on the connection, not per cursor (a cursor copies the
    connection's adapters when it is made), without the type's oid: the value
    goes as unknown and the statement's cast decides, so no look-up is needed."""
    adapters = connection.connection.adapters
    adapters.register_dumper(Vector, VectorDumper)
    adapters.register_dumper(Vector, VectorBinaryDumper)
