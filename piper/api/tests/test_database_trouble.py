"""A database that cannot serve a request answers 503 with Retry-After, never 500 (issue 18)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from django.db import InterfaceError, OperationalError, connection
from django.test import Client, override_settings
from psycopg import errors as pg

from conftest import make_client
from facts.models import Entity, Fact
from ledger.models import ChainHead
from ledger.services import EventDraft, events_append
from piper.api.middleware import database_trouble
from piper.api.models import IdempotencyRecord


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


# ------------------------------------------------- a slow or full database (issue 18)


@contextlib.contextmanager
def session_settings(**gucs):
    """Django's connection made again with these PostgreSQL settings given at
    connect — as PIPER_DB_STATEMENT_TIMEOUT_MS gives statement_timeout
    (piper/settings/base.py) — for this test's requests only."""
    options = connection.settings_dict.setdefault("OPTIONS", {})
    saved = options.get("options")
    connection.close()
    options["options"] = " ".join(f"-c {name}={value}" for name, value in gucs.items())
    try:
        yield
    finally:
        connection.close()
        if saved is None:
            options.pop("options", None)
        else:
            options["options"] = saved


@contextlib.contextmanager
def other_session():
    """A second connection to the test database: another client holding locks."""
    params = connection.get_connection_params()
    for name in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(name, None)
    with psycopg.connect(**params) as other:
        try:
            yield other
        finally:
            other.rollback()


def ledger_head(agent) -> int:
    return ChainHead.objects.filter(agent=agent).values_list("last_seq", flat=True).first() or 0


@pytest.mark.django_db(transaction=True)
def test_the_web_bound_on_statements_reaches_postgresql():
    """What the settings give the connection when PIPER_DB_STATEMENT_TIMEOUT_MS is set."""
    with session_settings(statement_timeout=1234), connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "1234ms"


@pytest.mark.django_db(transaction=True)
def test_a_write_cut_off_by_the_statement_timeout_is_a_503_and_writes_nothing():
    client = make_client("agent-db-timeout")
    body = {"subject": "billing export", "predicate": "deadline", "value": "March 3"}
    assert client.post("/api/v1/events", {"event_type": "a.b"}, format="json").status_code == 201
    before = ledger_head(client.agent)
    with other_session() as other, session_settings(statement_timeout=300):
        # Another session holds the agent's chain head: the write waits for it.
        other.execute(
            "SELECT 1 FROM ledger_chainhead WHERE agent_id = %s FOR UPDATE", [client.agent.pk]
        )
        started = time.monotonic()
        cut = client.post("/api/v1/facts", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        waited = time.monotonic() - started

        assert cut.status_code == 503, cut.content
        assert cut["Retry-After"] == "1"
        assert cut.json()["error"]["code"] == "database_busy"
        assert "statement timeout" in cut.json()["error"]["message"]
        assert waited < 3
        # Nothing half-written: no entity, no fact, no event, no idempotency record.
        assert ledger_head(client.agent) == before
        assert not Entity.objects.filter(agent=client.agent).exists()
        assert not Fact.objects.filter(agent=client.agent).exists()
        assert not IdempotencyRecord.objects.filter(key="k-1").exists()
        other.rollback()  # the lock is gone: the retry goes through, once
        retried = client.post("/api/v1/facts", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        assert retried.status_code == 201, retried.content
    again = client.post("/api/v1/facts", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again["Idempotent-Replayed"] == "true"
    assert Fact.objects.filter(agent=client.agent).count() == 1
    assert ledger_head(client.agent) > before


@pytest.mark.django_db(transaction=True)
def test_a_read_cut_off_by_the_statement_timeout_is_a_503():
    client = make_client("agent-db-slow-read")
    with other_session() as other, session_settings(statement_timeout=300):
        other.execute("LOCK TABLE ledger_event IN ACCESS EXCLUSIVE MODE")  # as a migration would
        response = client.get("/api/v1/events")
        assert (response.status_code, response["Retry-After"]) == (503, "1")
        assert response.json()["error"]["code"] == "database_busy"
    assert client.get("/api/v1/events").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_sort_out_of_temporary_disk_is_a_503_out_of_resources():
    """temp_file_limit stands in for a full disk: PostgreSQL refuses the sort's
    temporary file (SQLSTATE 53400, the class of 53100 disk_full)."""
    client = make_client("agent-db-disk")
    drafts = [EventDraft(event_type="a.b", payload={"text": "x" * 800}) for _ in range(600)]
    events_append(agent=client.agent, drafts=drafts)
    spill = {
        "work_mem": "64kB",
        "temp_file_limit": "0",
        "enable_indexscan": "off",  # sort the page, rather than read it in order
        "enable_bitmapscan": "off",
    }
    with session_settings(**spill):
        response = client.get("/api/v1/events?limit=500")
        assert (response.status_code, response["Retry-After"]) == (503, "30"), response.content
        error = response.json()["error"]
        assert error["code"] == "database_out_of_resources"
        assert "out of disk" in error["message"]
    assert client.get("/api/v1/events?limit=500").status_code == 200


def _health(client):
    body = client.get("/healthz").json()
    return body["status"], body["database"]


@pytest.mark.django_db(transaction=True)
@override_settings(PIPER_HEALTH_DB_TIMEOUT_MS=300)
def test_healthz_is_degraded_while_a_lock_holds_the_database_and_ok_after(monkeypatch):
    from piper.api import health

    # Worker and beat alive, so that the database alone decides the status.
    monkeypatch.setattr(health, "liveness", lambda: {"workers": {"w": 1.0}, "beat_age_seconds": 1})
    client = Client()
    assert _health(client)[0] == "ok"
    with other_session() as other:
        other.execute("LOCK TABLE ledger_chainhead IN ACCESS EXCLUSIVE MODE")
        response = client.get("/healthz")
        assert response.status_code == 200  # serving: a load balancer keeps the process
        status, database = _health(client)
        assert status == "degraded"
        assert database["ok"] is True and database["slow"] is True
        assert database["error"] == "the probe did not finish within 300 ms"
    status, database = _health(client)
    assert status == "ok"
    assert database["slow"] is False and database["waiting_on_locks"] == 0


@pytest.mark.django_db(transaction=True)
@override_settings(PIPER_HEALTH_LOCK_WAIT_MS=200)
def test_healthz_reports_sessions_stuck_waiting_on_a_lock(monkeypatch):
    from piper.api import health

    monkeypatch.setattr(health, "liveness", lambda: {"workers": {"w": 1.0}, "beat_age_seconds": 1})
    client = Client()
    key = 18_000_000 + os.getpid()
    with other_session() as holder, other_session() as waiter:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [key])
        waiting = threading.Thread(
            target=lambda: waiter.execute("SELECT pg_advisory_xact_lock(%s)", [key])
        )
        waiting.start()
        time.sleep(0.5)
        status, database = _health(client)
        assert (status, database["slow"], database["waiting_on_locks"]) == ("degraded", True, 1)
        holder.rollback()
        waiting.join(timeout=10)
    status, database = _health(client)
    assert (status, database["waiting_on_locks"]) == ("ok", 0)


def test_the_web_process_bounds_every_statement_and_workers_do_not():
    """piper/wsgi.py sets 30 s for the web process; the settings turn it into the
    connection's statement_timeout. A worker or command (no wsgi) has none."""
    show = (
        "from django.conf import settings; "
        "print(settings.DATABASES['default'].get('OPTIONS', {}).get('options'))"
    )
    env = {k: v for k, v in os.environ.items() if "STATEMENT_TIMEOUT" not in k}
    env["DJANGO_SETTINGS_MODULE"] = "piper.settings.local"

    def options(code: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return done.stdout.strip().splitlines()[-1]

    assert options(f"import piper.wsgi; {show}") == "-c statement_timeout=30000"
    assert options(f"import django; django.setup(); {show}") == "None"
    env["PIPER_WEB_STATEMENT_TIMEOUT_MS"] = "1500"
    assert options(f"import piper.wsgi; {show}") == "-c statement_timeout=1500"
    assert options(f"import django; django.setup(); {show}") == "None"


@pytest.mark.django_db
def test_healthz_is_degraded_when_its_probe_is_over_the_threshold(monkeypatch):
    from piper.api import health

    monkeypatch.setattr(health, "liveness", lambda: {"workers": {"w": 1.0}, "beat_age_seconds": 1})
    with override_settings(PIPER_HEALTH_DB_SLOW_MS=0):  # every probe takes longer than 0 ms
        status, database = _health(Client())
    assert (status, database["ok"], database["slow"]) == ("degraded", True, True)
    assert "error" not in database  # slow, not cut off
    assert _health(Client())[0] == "ok"
