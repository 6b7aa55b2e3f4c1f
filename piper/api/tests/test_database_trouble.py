"""A database that cannot serve a request answers 503 with Retry-After, never 500 (issue 18)."""

from __future__ import annotations

import psycopg
import pytest
from django.db import InterfaceError, OperationalError, connection
from psycopg import errors as pg

from conftest import make_client
from piper.api.middleware import database_trouble


def wrapped(cause: BaseException) -> OperationalError:
    """What Django raises: its OperationalError, psycopg's error as the cause."""
    try:
        raise OperationalError(str(cause)) from cause
    except OperationalError as exc:
        return exc


@pytest.mark.parametrize(
    ("exc", "code", "retry_after"),
    [
        (wrapped(psycopg.OperationalError("connection refused")), "database_unavailable", 5),
        (wrapped(pg.AdminShutdown()), "database_unavailable", 5),
        (wrapped(pg.CannotConnectNow()), "database_unavailable", 5),
        (InterfaceError("connection already closed"), "database_unavailable", 5),
        (wrapped(pg.DeadlockDetected()), "database_busy", 1),
        (wrapped(pg.SerializationFailure()), "database_busy", 1),
        (wrapped(pg.QueryCanceled()), "database_busy", 1),
        (wrapped(pg.LockNotAvailable()), "database_busy", 1),
        (wrapped(pg.DiskFull()), "database_out_of_resources", 30),
        (wrapped(pg.TooManyConnections()), "database_out_of_resources", 30),
    ],
)
def test_what_a_database_error_means_to_a_client(exc, code, retry_after):
    assert database_trouble(exc)[0::2] == (code, retry_after)


@pytest.mark.parametrize(
    "exc",
    [
        wrapped(pg.UndefinedTable()),  # a bug, not a moment: 500
        wrapped(pg.DivisionByZero()),
        ValueError("not a database error"),
    ],
)
def test_a_bug_is_not_called_a_busy_database(exc):
    assert database_trouble(exc) is None


def _terminate_django_connection() -> None:
    """Kill the server side of Django's connection from another one, as a
    restarting PostgreSQL or an operator would."""
    pid = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    params.pop("prepare_threshold", None)
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
def test_a_lost_database_connection_is_a_503_and_the_next_request_recovers():
    client = make_client("agent-db-trouble")
    assert client.get("/api/v1/agent").status_code == 200
    _terminate_django_connection()

    response = client.get("/api/v1/agent")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "database_unavailable"
    assert response.json()["error"]["details"] == {"retry_after_seconds": 5}
    # The broken connection was closed: the next request opens a new one.
    assert client.get("/api/v1/agent").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_write_cut_off_by_a_lost_connection_writes_nothing_and_is_retried_whole():
    client = make_client("agent-db-trouble-write")
    body = {"subject": "billing export", "predicate": "deadline", "value": "March 3"}
    _terminate_django_connection()
    cut = client.post("/api/v1/facts", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (cut.status_code, cut.json()["error"]["code"]) == (503, "database_unavailable")
    retried = client.post("/api/v1/facts", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert retried.status_code == 201, retried.json()
    current = client.get("/api/v1/facts/current?subject=billing export&predicate=deadline")
    assert [f["value"] for f in current.json()["facts"]] == ["March 3"]
