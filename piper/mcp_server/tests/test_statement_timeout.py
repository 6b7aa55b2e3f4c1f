"""An MCP tool call is bounded as a web request is: a statement that waits past
the MCP process's statement_timeout fails the call with the API's 503
database_busy and when to retry — not a call that hangs for as long as a lock
lasts (issue 18). Real PostgreSQL: another session holds the lock."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest
from django.db import connection

from conftest import make_client
from facts.models import Fact
from ledger.models import ChainHead
from piper.mcp_server.bounds import DEFAULT_MS, bound_statements, statement_timeout_ms
from piper.mcp_server.tests.test_mcp import call, error_text, structured

pytestmark = pytest.mark.django_db(transaction=True)

FACT = {"subject": "billing export", "predicate": "deadline", "value": "March 3"}


@contextlib.contextmanager
def bounded(ms: int):
    bound_statements(ms)
    try:
        yield
    finally:
        bound_statements(0)


@contextlib.contextmanager
def other_session():
    """A second connection to the test database: another client holding locks."""
    params = connection.get_connection_params()
    for name in ("cursor_factory", "context", "prepare_threshold", "options"):
        params.pop(name, None)
    with psycopg.connect(**params) as other:
        try:
            yield other
        finally:
            other.rollback()


def head(agent) -> int:
    return ChainHead.objects.filter(agent=agent).values_list("last_seq", flat=True).first() or 0


def test_a_tool_call_behind_a_lock_is_a_503_database_busy_and_writes_nothing():
    client = make_client("mcp-timeout")
    key = client.raw_key
    structured(call(key, "remember", {"summary": "first", "occurred_at": "2026-01-01T00:00:00Z"}))
    before = head(client.agent)
    with bounded(300), other_session() as other:
        # Another session holds the agent's chain head: the write waits for it.
        other.execute(
            "SELECT 1 FROM ledger_chainhead WHERE agent_id = %s FOR UPDATE", [client.agent.pk]
        )
        started = time.monotonic()
        result = call(key, "assert_fact", {**FACT, "idempotency_key": "mcp-k-1"})
        waited = time.monotonic() - started
        text = error_text(result)
        assert "503 database_busy" in text, text
        assert "statement timeout" in text
        assert text.endswith("Retry after 1 s."), text
        assert waited < 5, waited
        assert head(client.agent) == before
        assert not Fact.objects.filter(agent=client.agent).exists()
        other.rollback()  # the lock is gone: the retry with its key goes through, once
        structured(call(key, "assert_fact", {**FACT, "idempotency_key": "mcp-k-1"}))
    structured(call(key, "assert_fact", {**FACT, "idempotency_key": "mcp-k-1"}))
    assert Fact.objects.filter(agent=client.agent).count() == 1


def test_the_key_lookup_behind_a_lock_is_a_503_too():
    client = make_client("mcp-timeout-key")
    with bounded(300), other_session() as other:
        other.execute("LOCK TABLE tenancy_apikey IN ACCESS EXCLUSIVE MODE")
        text = error_text(call(client.raw_key, "list_due_intentions", {}))
        assert text.startswith("Error executing tool list_due_intentions: 503 database_busy"), text
        assert text.endswith("Retry after 1 s."), text
    assert not call(client.raw_key, "list_due_intentions", {}).is_error


def test_without_the_bound_the_same_call_waits_for_the_lock():
    """The test above can fail: unbounded, the call outlasts the lock and succeeds."""
    client = make_client("mcp-unbounded")
    with other_session() as other:
        other.execute("LOCK TABLE tenancy_apikey IN ACCESS EXCLUSIVE MODE")
        release = threading.Timer(1.0, other.rollback)
        release.start()
        started = time.monotonic()
        result = call(client.raw_key, "list_due_intentions", {})
        release.join()
    assert not result.is_error
    assert time.monotonic() - started >= 0.9


def test_the_bound_comes_from_the_environment():
    assert statement_timeout_ms({}) == DEFAULT_MS == 30_000
    assert statement_timeout_ms({"PIPER_WEB_STATEMENT_TIMEOUT_MS": "1500"}) == 1500
    both = {"PIPER_WEB_STATEMENT_TIMEOUT_MS": "1500", "PIPER_MCP_STATEMENT_TIMEOUT_MS": "0"}
    assert statement_timeout_ms(both) == 0


def test_manage_py_mcp_bounds_its_connections(monkeypatch):
    from django.core.management import call_command

    from piper.mcp_server.management.commands import mcp

    client = make_client("mcp-command-bound")
    seen = {}

    class Server:
        def run(self, transport):
            with connection.cursor() as cursor:
                cursor.execute("SHOW statement_timeout")
                seen[transport] = cursor.fetchone()[0]

    monkeypatch.setattr(mcp, "build_server", lambda **_: Server())
    monkeypatch.delenv("PIPER_MCP_STATEMENT_TIMEOUT_MS", raising=False)
    monkeypatch.setenv("PIPER_WEB_STATEMENT_TIMEOUT_MS", "2500")
    try:
        call_command("mcp", api_key=client.raw_key)
    finally:
        bound_statements(0)
    assert seen == {"stdio": "2500ms"}
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "0"
