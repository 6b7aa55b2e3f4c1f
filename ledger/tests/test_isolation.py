"""Agent B never sees agent A's events: not in a list, a detail, a filter, a page or an error."""

import uuid

import pytest
from django.db import IntegrityError, transaction

from ledger.models import GENESIS_HASH, Event
from ledger.services import EventDraft, events_append
from ledger.tests.helpers import error, ledger_state


@pytest.fixture
def a_events(client_a):
    return events_append(
        agent=client_a.agent,
        drafts=[
            EventDraft(event_type="secret.kept", session_id="a-session", actor="alice")
            for _ in range(5)
        ],
    )


def test_list_shows_only_own_events(client_a, client_b, a_events):
    b_event = client_b.post("/api/v1/events", {"event_type": "b.own"}, format="json").json()
    assert b_event["seq"] == 1  # B's chain starts at 1: A's five events are not counted
    assert [e["id"] for e in client_b.get("/api/v1/events").json()["results"]] == [b_event["id"]]
    assert len(client_a.get("/api/v1/events").json()["results"]) == 5


@pytest.mark.parametrize(
    "params",
    [
        {"event_type": "secret.kept"},
        {"session_id": "a-session"},
        {"actor": "alice"},
        {"occurred_after": "2000-01-01T00:00:00Z"},
        {"recorded_before": "2999-01-01T00:00:00Z"},
        {"limit": 1000},
    ],
)
def test_filters_never_reach_another_agent(client_b, a_events, params):
    response = client_b.get("/api/v1/events", params)
    assert response.status_code == 200
    assert response.json() == {"next": None, "previous": None, "results": []}


def test_pages_never_reach_another_agent(client_a, client_b, a_events):
    events_append(agent=client_b.agent, drafts=[EventDraft(event_type="b.own") for _ in range(3)])
    seen, url = [], "/api/v1/events?limit=1"
    while url:
        body = client_b.get(url).json()
        seen += [e["id"] for e in body["results"]]
        url = body["next"]
    assert len(seen) == 3
    assert not set(seen) & {str(e.pk) for e in a_events}


def test_cursor_from_a_used_by_b_shows_only_b(client_a, client_b, a_events):
    next_url = client_a.get("/api/v1/events?limit=2").json()["next"]
    body = client_b.get(next_url).json()
    assert body["results"] == []


def test_detail_is_404_with_the_body_of_a_missing_event(client_b, a_events):
    theirs = a_events[0].pk
    response = client_b.get(f"/api/v1/events/{theirs}")
    assert response.status_code == 404
    assert response.json() == error("not_found", f"event {theirs} not found")

    missing = uuid.uuid4()
    truly_missing = client_b.get(f"/api/v1/events/{missing}")
    assert truly_missing.status_code == 404
    assert truly_missing.json() == error("not_found", f"event {missing} not found")
    assert (
        truly_missing.json()["error"]["message"].replace(str(missing), str(theirs))
        == (response.json()["error"]["message"])
    )


@pytest.mark.parametrize("field", ["parent_event_id", "correction_of"])
def test_cannot_reference_another_agents_event(client_b, a_events, field):
    client_b.post("/api/v1/events", {"event_type": "b.own"}, format="json")
    theirs = str(a_events[0].pk)
    before = ledger_state()
    response = client_b.post(
        "/api/v1/events", {"event_type": "b.reply", field: theirs}, format="json"
    )
    assert response.status_code == 422
    assert response.json() == error(
        "unknown_event_reference",
        f"referenced event {theirs} does not exist",
        {"missing_event_ids": [theirs]},
    )
    assert ledger_state() == before


def test_cannot_reference_another_agents_event_in_a_batch(client_b, a_events):
    theirs = str(a_events[1].pk)
    before = ledger_state()
    body = {"events": [{"event_type": "b.one"}, {"event_type": "b.two", "correction_of": theirs}]}
    response = client_b.post("/api/v1/events", body, format="json")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "unknown_event_reference"
    assert ledger_state() == before


def test_composite_foreign_key_refuses_a_cross_agent_parent_via_the_orm(client_b, a_events):
    event = Event(
        agent=client_b.agent,
        seq=1,
        event_type="b.forged",
        occurred_at=a_events[0].occurred_at,
        source_type="operator",
        authority="operator",
        confidence=1.0,
        payload={},
        payload_hash="0" * 64,
        prev_hash=GENESIS_HASH,
        hash="0" * 64,
        parent_event_id=a_events[0].pk,
    )
    with (
        pytest.raises(IntegrityError, match="ledger_event_parent_same_agent"),
        transaction.atomic(),
    ):
        event.save(force_insert=True)
    assert not Event.objects.filter(agent=client_b.agent).exists()


def test_sources_of_another_agent_are_invisible(client_a, client_b):
    theirs = client_a.post(
        "/api/v1/sources", {"title": "A's", "content": "private"}, format="json"
    ).json()
    assert client_b.get("/api/v1/sources").json()["results"] == []
    response = client_b.get(f"/api/v1/sources/{theirs['id']}")
    assert (response.status_code, response.json()) == (
        404,
        error("not_found", f"source {theirs['id']} not found"),
    )
