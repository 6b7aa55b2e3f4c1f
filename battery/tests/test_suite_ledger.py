"""Suite L must catch what it claims to: each item, pointed at a broken service,
fails with the right code. A green battery means nothing unless this holds."""

import pytest
from django.db import connection

from battery.registry import ItemFailure, suites_select
from battery.runner import item_execute
from battery.suites import ledger_integrity
from battery.transport import InProcessTransport
from ledger.models import Event
from ledger.selectors import ChainReport, chain_verify
from piper.tenancy.models import Agent

from .helpers import EVENT_PATH, RewritingTransport, item_context, replace


def run_item(key: str, transport) -> object:
    suite = suites_select(codes=["L"])[0]
    item = next(item for item in suite.items if item.key == key)
    return item_execute(
        suite_code="L", item=item, context=item_context(item=key, transport=transport)
    )


def untouched(method, path, body, response):
    return response


@pytest.mark.parametrize(
    "key", ["append_read_back", "batch_atomic", "idempotent_retry", "tamper_detected", "isolation"]
)
def test_every_item_passes_against_the_real_service(db, key):
    outcome = run_item(key, RewritingTransport(InProcessTransport(), untouched))
    assert (outcome.passed, outcome.failure_code, outcome.detail) == (True, "", "")


def test_read_back_catches_an_event_that_changed_on_the_way_back(db):
    def corrupt(method, path, body, response):
        if method == "GET" and EVENT_PATH.match(path) and response.status == 200:
            return replace(response, body={**response.body, "actor": "someone else"})
        return response

    outcome = run_item("append_read_back", RewritingTransport(InProcessTransport(), corrupt))
    assert (outcome.passed, outcome.failure_code) == (False, "R2")
    assert outcome.detail.startswith("event read back by id: expected {")


def test_read_back_catches_a_field_stored_wrongly(db):
    def lose_session(method, path, body):
        return (
            {**body, "session_id": ""} if isinstance(body, dict) and "session_id" in body else body
        )

    transport = RewritingTransport(InProcessTransport(), untouched, rewrite_request=lose_session)
    outcome = run_item("append_read_back", transport)
    assert (outcome.passed, outcome.failure_code) == (False, "W0")
    assert outcome.detail.startswith("stored session_id: expected 'battery-session-")


def test_batch_atomicity_catches_a_service_that_accepts_a_bad_batch(db):
    def sanitise(method, path, body):
        # A lenient service: drops the invalid event and writes the rest.
        if (
            isinstance(body, dict)
            and body.get("events", [{}])[0].get("event_type") == "battery.ledger.doomed"
        ):
            return {"events": [e for e in body["events"] if len(e) == 2]}
        return body

    transport = RewritingTransport(InProcessTransport(), untouched, rewrite_request=sanitise)
    outcome = run_item("batch_atomic", transport)
    assert (outcome.passed, outcome.failure_code) == (False, "W0")
    assert outcome.detail.startswith("batch with ")
    assert ": expected HTTP 400, got HTTP 201 " in outcome.detail


def test_idempotency_catches_a_retry_that_is_not_marked_as_replayed(db):
    def drop_header(method, path, body, response):
        headers = {k: v for k, v in response.headers.items() if k.lower() != "idempotent-replayed"}
        return replace(response, headers=headers)

    outcome = run_item("idempotent_retry", RewritingTransport(InProcessTransport(), drop_header))
    assert (outcome.passed, outcome.failure_code, outcome.detail) == (
        False,
        "W0",
        "Idempotent-Replayed header on the retry: expected 'true', got None",
    )


def test_idempotency_catches_a_retry_that_writes_again(db):
    class NoKeys(RewritingTransport):
        def request(self, method, path, *, body=None, headers=None):
            headers = {k: v for k, v in (headers or {}).items() if k != "Idempotency-Key"}
            return super().request(method, path, body=body, headers=headers)

    outcome = run_item("idempotent_retry", NoKeys(InProcessTransport(), untouched))
    assert (outcome.passed, outcome.failure_code) == (False, "W0")
    assert outcome.detail.startswith("answer to the retry: expected {")


def test_tamper_detection_fails_when_the_verifier_misses_the_change(db, monkeypatch):
    def blind(*, agent):
        return ChainReport(str(agent.pk), agent.name, 0, None)

    monkeypatch.setattr(ledger_integrity, "chain_verify", blind)
    outcome = run_item("tamper_detected", RewritingTransport(InProcessTransport(), untouched))
    assert (outcome.passed, outcome.failure_code) == (False, "I0")
    assert outcome.detail.startswith("chain_verify missed the altered payload at seq ")


def test_tamper_detection_fails_when_the_append_only_trigger_is_off(db):
    # DDL is transactional: the trigger comes back when the test's transaction rolls back.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE ledger_event DISABLE TRIGGER ledger_event_append_only")
    context = item_context(item="tamper_detected", transport=InProcessTransport())
    # Called directly, without the runner's savepoint, to see what the item leaves behind.
    with pytest.raises(ItemFailure) as caught:
        ledger_integrity.tamper_detected(context)
    assert (caught.value.code, caught.value.detail) == (
        "I0",
        "a plain SQL UPDATE of a ledger event was accepted",
    )
    # The accepted UPDATE was undone, and the tampered payload restored.
    assert list(Event.objects.filter(actor="mallory")) == []
    tampered_agent = Agent.objects.get(name__endswith="-2", is_throwaway=True)
    assert chain_verify(agent=tampered_agent).ok is True


def test_the_tampered_payload_is_restored_and_the_trigger_left_on(db):
    outcome = run_item("tamper_detected", RewritingTransport(InProcessTransport(), untouched))
    assert outcome.passed is True
    tampered_agent = Agent.objects.get(name__endswith="-2", is_throwaway=True)
    report = chain_verify(agent=tampered_agent)
    assert (report.ok, report.events_checked) == (True, outcome.metrics["events"])
    with connection.cursor() as cursor:
        cursor.execute("SHOW session_replication_role")
        assert cursor.fetchone() == ("origin",)


def test_isolation_catches_a_403_that_admits_the_event_exists(db):
    def forbid(method, path, body, response):
        return replace(response, status=403) if response.status == 404 else response

    outcome = run_item("isolation", RewritingTransport(InProcessTransport(), forbid))
    assert (outcome.passed, outcome.failure_code) == (False, "R3")
    assert outcome.detail.startswith(
        "agent B reading agent A's event: expected HTTP 404, got HTTP 403 "
    )


def test_isolation_catches_a_list_that_leaks_another_agents_event(db):
    leaked = {}

    def leak(method, path, body, response):
        if method == "POST" and response.status == 201 and "secret" in str(body):
            leaked.update(response.body)
        if (
            method == "GET"
            and path.startswith("/api/v1/events?")
            and leaked
            and response.status == 200
        ):
            results = response.body["results"]
            if leaked["id"] not in {e["id"] for e in results}:
                return replace(response, body={**response.body, "results": [*results, leaked]})
        return response

    outcome = run_item("isolation", RewritingTransport(InProcessTransport(), leak))
    assert (outcome.passed, outcome.failure_code) == (False, "R3")
    assert outcome.detail.startswith("B's list (its own events only): expected [")


def test_isolation_catches_a_reference_to_another_agents_event(db):
    def accept(method, path, body, response):
        if response.status == 422:
            return replace(response, status=201, body={"id": "x"})
        return response

    outcome = run_item("isolation", RewritingTransport(InProcessTransport(), accept))
    assert (outcome.passed, outcome.failure_code) == (False, "R3")
    assert outcome.detail.startswith(
        "B citing A's event as parent_event_id: expected HTTP 422, got HTTP 201"
    )
