"""The Idempotency-Key header: a retry replays the first answer and writes nothing."""

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection
from rest_framework.parsers import JSONParser
from rest_framework.request import Request
from rest_framework.response import Response

from conftest import make_client
from ledger import services as ledger_services
from ledger.models import Event
from ledger.tests.helpers import error, ledger_state
from piper.api.idempotency import idempotent_write
from piper.api.models import IdempotencyRecord
from piper.api.services import idempotency_records_erase, idempotency_records_purge
from piper.transactions import RaceLost, run_write

pytestmark = pytest.mark.django_db


def post(client, body, key, path="/api/v1/events"):
    return client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_retry_replays_the_first_answer_and_writes_nothing(client_a):
    first = post(client_a, {"event_type": "a.b", "payload": {"x": 1}}, "retry-1")
    assert first.status_code == 201
    assert "Idempotent-Replayed" not in first
    before = ledger_state()
    retry = post(client_a, {"event_type": "a.b", "payload": {"x": 1}}, "retry-1")
    assert retry.status_code == 201
    assert retry["Idempotent-Replayed"] == "true"
    assert retry.json() == first.json()
    assert ledger_state() == before
    record = IdempotencyRecord.objects.get(agent=client_a.agent, key="retry-1")
    assert (record.response_status, record.response_body) == (201, first.json())


def test_the_record_names_the_events_the_write_appended(client_a):
    body = {"events": [{"event_type": "a.b"}, {"event_type": "a.c"}]}
    first = post(client_a, body, "names-1")
    record = IdempotencyRecord.objects.get(agent=client_a.agent, key="names-1")
    assert record.event_ids == [uuid.UUID(e["id"]) for e in first.json()["events"]]


def test_an_erased_write_is_neither_replayed_nor_run_again(client_a):
    body = {"event_type": "user.said", "payload": {"text": "my new address is 5 Elm Row"}}
    first = post(client_a, body, "erased-1")
    event_id = uuid.UUID(first.json()["id"])
    assert idempotency_records_erase(agent_id=client_a.agent.pk, event_ids=[event_id]) == 1
    record = IdempotencyRecord.objects.get(agent=client_a.agent, key="erased-1")
    assert (record.response_body, record.erased_at is not None) == (None, True)
    before = ledger_state()
    retry = post(client_a, body, "erased-1")
    assert (retry.status_code, retry.json()) == (
        410,
        error(
            "idempotent_write_erased",
            "the write answered under Idempotency-Key 'erased-1' was erased; it is not "
            "replayed and nothing was written. To write it again, use a new key",
        ),
    )
    assert ledger_state() == before
    # A second erasure marks nothing more, and the time-to-live purge keeps the mark.
    assert idempotency_records_erase(agent_id=client_a.agent.pk, event_ids=[event_id]) == 0
    assert idempotency_records_purge(older_than=timedelta(0)) == 0
    assert post(client_a, body, "erased-1").status_code == 410


def test_erasing_one_agents_events_leaves_another_agents_records(client_a, client_b):
    first = post(client_a, {"event_type": "a.b"}, "shared-key")
    post(client_b, {"event_type": "a.b"}, "shared-key")
    event_id = uuid.UUID(first.json()["id"])
    assert idempotency_records_erase(agent_id=client_b.agent.pk, event_ids=[event_id]) == 0
    assert post(client_a, {"event_type": "a.b"}, "shared-key")["Idempotent-Replayed"] == "true"


def test_retry_of_a_batch(client_a):
    body = {"events": [{"event_type": "a.b"}, {"event_type": "a.c"}]}
    first = post(client_a, body, "batch-1")
    before = ledger_state()
    retry = post(client_a, body, "batch-1")
    assert (retry.status_code, retry.json()) == (201, first.json())
    assert ledger_state() == before


def test_key_order_in_the_body_does_not_matter(client_a):
    post(client_a, {"event_type": "a.b", "payload": {"x": 1, "y": 2}}, "order-1")
    before = ledger_state()
    retry = post(client_a, {"payload": {"y": 2, "x": 1}, "event_type": "a.b"}, "order-1")
    assert retry["Idempotent-Replayed"] == "true"
    assert ledger_state() == before


def test_same_key_with_another_body_is_refused(client_a):
    post(client_a, {"event_type": "a.b", "payload": {"x": 1}}, "reuse-1")
    before = ledger_state()
    response = post(client_a, {"event_type": "a.b", "payload": {"x": 2}}, "reuse-1")
    assert response.status_code == 422
    assert response.json() == error(
        "idempotency_key_reused",
        "Idempotency-Key 'reuse-1' was already used with a different request; use a new key for a new request",
    )
    assert ledger_state() == before


def test_same_key_on_another_endpoint_is_refused(client_a):
    post(client_a, {"event_type": "a.b"}, "endpoint-1")
    before = ledger_state()
    response = post(client_a, {"title": "T", "content": "x"}, "endpoint-1", path="/api/v1/sources")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    assert ledger_state() == before


def test_a_refused_request_does_not_burn_the_key(client_a):
    before = ledger_state()
    bad = post(client_a, {"event_type": "Not Valid"}, "fix-1")
    assert bad.status_code == 400
    assert ledger_state() == before
    unknown = post(
        client_a,
        {"event_type": "a.b", "parent_event_id": "01a2274a-0000-7000-8000-000000000000"},
        "fix-1",
    )
    assert unknown.status_code == 422
    assert ledger_state() == before
    good = post(client_a, {"event_type": "a.b"}, "fix-1")
    assert good.status_code == 201
    assert "Idempotent-Replayed" not in good
    assert Event.objects.filter(agent=client_a.agent).count() == 1


def test_keys_are_per_agent(client_a, client_b):
    a = post(client_a, {"event_type": "a.b"}, "shared-key")
    b = post(client_b, {"event_type": "a.b"}, "shared-key")
    assert (a.status_code, b.status_code) == (201, 201)
    assert "Idempotent-Replayed" not in b
    assert a.json()["id"] != b.json()["id"]
    assert IdempotencyRecord.objects.filter(key="shared-key").count() == 2
    # B reusing the key with another body is B's business only
    assert post(client_b, {"event_type": "a.c"}, "shared-key").status_code == 422
    assert post(client_a, {"event_type": "a.b"}, "shared-key").json() == a.json()


def test_without_a_key_every_request_writes(client_a):
    client_a.post("/api/v1/events", {"event_type": "a.b"}, format="json")
    client_a.post("/api/v1/events", {"event_type": "a.b"}, format="json")
    assert Event.objects.filter(agent=client_a.agent).count() == 2
    assert IdempotencyRecord.objects.count() == 0


@pytest.mark.parametrize(
    "key",
    ["", "x" * 256, "tab\there", "new\x0bline"],
)
def test_invalid_key(client_a, key):
    before = ledger_state()
    response = post(client_a, {"event_type": "a.b"}, key)
    assert response.status_code == 400
    assert response.json() == error(
        "invalid_idempotency_key", "Idempotency-Key must be 1-255 printable characters"
    )
    assert ledger_state() == before


def test_longest_key_is_accepted(client_a):
    assert post(client_a, {"event_type": "a.b"}, "k" * 255).status_code == 201


def test_body_the_write_refuses_is_a_400_with_a_key_too(client_a):
    before = ledger_state()
    response = client_a.post(
        "/api/v1/events",
        '{"event_type": "a.b", "payload": {"x": 1e400, "y": "\\ud800"}}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="odd-1",
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert ledger_state() == before


def test_sources_replay_their_200(client_a):
    client_a.post("/api/v1/sources", {"title": "T", "content": "x"}, format="json")
    again = post(client_a, {"title": "T", "content": "x"}, "src-1", path="/api/v1/sources")
    replay = post(client_a, {"title": "T", "content": "x"}, "src-1", path="/api/v1/sources")
    assert (again.status_code, replay.status_code) == (200, 200)
    assert replay.json() == again.json()


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_write_exactly_one_event(monkeypatch):
    client_1, client_2 = make_client("racer"), None
    client_2 = type(client_1)(client_1.agent, client_1.raw_key, client_1.api_key)
    real_append = ledger_services.events_append

    def slow_append(**kwargs):
        events = real_append(**kwargs)
        time.sleep(0.3)  # hold the claimed key while the other request arrives
        return events

    monkeypatch.setattr(ledger_services, "events_append", slow_append)
    start = threading.Barrier(2)

    def send(client):
        try:
            start.wait()
            return post(client, {"event_type": "a.b", "payload": {"x": 1}}, "race-1")
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        responses = list(pool.map(send, [client_1, client_2]))

    assert [r.status_code for r in responses] == [201, 201]
    assert responses[0].json() == responses[1].json()
    assert sorted(r.get("Idempotent-Replayed", "") for r in responses) == ["", "true"]
    assert Event.objects.filter(agent=client_1.agent).count() == 1
    assert IdempotencyRecord.objects.filter(key="race-1").count() == 1


# --- a write PostgreSQL cancelled to break a deadlock is run again, key claim included
# (the retries themselves: piper/tests/test_transactions.py)


def _raise_in_postgres(sqlstate: str) -> None:
    # A real PostgreSQL error with that SQLSTATE, as psycopg and Django see one.
    with connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '{sqlstate}'; END $$")


def _append_then_fail(agent, attempts: list, failures: int, sqlstate: str = "40P01"):
    def write():
        attempts.append(1)
        ledger_services.event_append(agent=agent, event_type=f"attempt.{len(attempts)}")
        if len(attempts) <= failures:
            _raise_in_postgres(sqlstate)
        return Response({"attempts": len(attempts)}, status=201)

    return write


def test_a_keyed_write_retried_after_a_deadlock_keeps_one_record_and_one_answer(client_a):
    from rest_framework.test import APIRequestFactory

    attempts: list = []
    request = Request(
        APIRequestFactory().post("/x", {}, format="json", HTTP_IDEMPOTENCY_KEY="deadlock-1"),
        parsers=[JSONParser()],
    )
    request.user = client_a.agent

    response = idempotent_write(request, _append_then_fail(client_a.agent, attempts, 1))

    assert response.data == {"attempts": 2}
    record = IdempotencyRecord.objects.get(agent=client_a.agent, key="deadlock-1")
    assert (record.response_status, record.response_body) == (201, {"attempts": 2})
    kept = Event.objects.get(agent=client_a.agent)
    assert (kept.event_type, record.event_ids) == ("attempt.2", [kept.pk])


def test_a_keyed_write_whose_service_lost_a_race_is_run_again_whole(client_a):
    """The request owns the retry: a service's run_write inside it that lost a
    race does not retry on its own; the whole write, key claim included, runs again."""
    from rest_framework.test import APIRequestFactory

    runs: list = []

    def service():
        runs.append(1)
        ledger_services.event_append(agent=client_a.agent, event_type=f"attempt.{len(runs)}")
        if len(runs) == 1:
            raise RaceLost("lost")
        return len(runs)

    def write():
        return Response({"attempts": run_write(service)}, status=201)

    request = Request(
        APIRequestFactory().post("/x", {}, format="json", HTTP_IDEMPOTENCY_KEY="race-2"),
        parsers=[JSONParser()],
    )
    request.user = client_a.agent

    response = idempotent_write(request, write)

    assert response.data == {"attempts": 2}
    record = IdempotencyRecord.objects.get(agent=client_a.agent, key="race-2")
    kept = Event.objects.get(agent=client_a.agent)
    assert (kept.event_type, record.event_ids) == ("attempt.2", [kept.pk])
