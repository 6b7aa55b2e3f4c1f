"""piper.db: fetchall_prepared prepared once per connection, the same rows as
unprepared; vector_param the same value in binary as in text."""

import uuid

import pytest
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext

from piper.db import fetchall_prepared, server_bound_cursor, vector_param

pytestmark = pytest.mark.django_db

SQL = "SELECT %(n)s::int + 1, %(name)s::text, %(id)s::uuid"


def _prepared_here() -> list[int]:
    # pg_prepared_statements shows the statement with psycopg's $n placeholders.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans + custom_plans FROM pg_prepared_statements WHERE statement = %s",
            [SQL.replace("%(n)s", "$1").replace("%(name)s", "$2").replace("%(id)s", "$3")],
        )
        return [row[0] for row in cursor.fetchall()]


def test_prepared_once_and_executed_from_then_on():
    key = uuid.uuid4()
    rows = [fetchall_prepared(SQL, {"n": n, "name": "O'Brien", "id": key}) for n in range(3)]
    assert rows == [[(1, "O'Brien", key)], [(2, "O'Brien", key)], [(3, "O'Brien", key)]]
    assert _prepared_here() == [3]  # one statement, run three times


def test_same_rows_unprepared(settings):
    key = uuid.uuid4()
    prepared = fetchall_prepared(SQL, {"n": 41, "name": "x", "id": key})
    settings.PIPER_DB_PREPARED_STATEMENTS = False
    assert _prepared_here() == [1]
    assert fetchall_prepared(SQL, {"n": 41, "name": "x", "id": key}) == prepared
    assert _prepared_here() == [1]  # not run through the prepared statement


def test_query_log_shows_the_statement_with_its_parameters():
    with CaptureQueriesContext(connection) as queries:
        fetchall_prepared(SQL, {"n": 1, "name": "O'Brien", "id": uuid.UUID(int=7)})
    assert [q["sql"] for q in queries.captured_queries] == [
        "SELECT 1::int + 1, 'O''Brien'::text, '00000000000000000000000000000007'::uuid::uuid"
    ]


def test_works_again_after_a_rollback_forgets_the_statement():
    fetchall_prepared(SQL, {"n": 1, "name": "a", "id": uuid.UUID(int=1)})
    with pytest.raises(DatabaseError), transaction.atomic():
        fetchall_prepared("SELECT 1 / %(zero)s", {"zero": 0})
    assert fetchall_prepared(SQL, {"n": 2, "name": "b", "id": uuid.UUID(int=2)}) == [
        (3, "b", uuid.UUID(int=2))
    ]


VECTOR_SQL = "SELECT (%(v)s::vector)::text, %(v)s::vector <=> %(w)s::vector"


def test_a_vector_parameter_is_the_same_value_in_binary_and_in_text():
    values = [0.1, -2.5, 3.0e-8, 1 / 3]
    other = [1.0, 0.0, 0.0, 0.0]
    with server_bound_cursor(binary=True) as cursor:  # sent in binary
        cursor.execute(VECTOR_SQL, {"v": vector_param(values), "w": vector_param(other)})
        binary = cursor.fetchone()
    with connection.cursor() as cursor:  # a client-side literal
        cursor.execute(VECTOR_SQL, {"v": vector_param(values), "w": vector_param(other)})
        text = cursor.fetchone()
    with connection.cursor() as cursor:  # what the retrieval sent before: repr of each number
        literal = "[" + ",".join(repr(x) for x in values) + "]"
        cursor.execute(VECTOR_SQL, {"v": literal, "w": "[1,0,0,0]"})
        before = cursor.fetchone()
    assert binary == text == before
    assert binary[0] == "[0.1,-2.5,3e-08,0.33333334]"


def test_the_query_log_shows_a_vector_parameter_as_its_literal():
    with CaptureQueriesContext(connection) as queries, server_bound_cursor() as cursor:
        cursor.execute("SELECT %(v)s::vector", {"v": vector_param([0.5, 2.0])})
    assert queries.captured_queries[-1]["sql"] == "SELECT '[0.5,2.0]'::vector"
