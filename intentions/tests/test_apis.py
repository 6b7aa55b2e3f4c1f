"""The working-state and intentions API through HTTP: exact bodies built from the
rows themselves, and for every refusal a clear error and nothing written."""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from dateutil.rrule import rrulestr
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from conftest import AgentClient
from facts.tests.api_helpers import admin_key_for, iso, ok, post, put
from intentions.models import (
    MAX_STATE_BYTES,
    Escalation,
    EventCursor,
    Firing,
    Handover,
    Intention,
    IntentionDependency,
    OutboxMessage,
    PendingItem,
    Thread,
    Transition,
    Webhook,
    WorkingState,
)
from intentions.services import engine, lifecycle
from intentions.services.state import STATE_FIELDS
from ledger.models import Event
from ledger.tests.helpers import error, ledger_state
from piper.api.models import IdempotencyRecord
from piper.errors import InvalidInput
from piper.tenancy.models import AgentClock, Scope
from piper.tenancy.services import agent_create, api_key_create

pytestmark = pytest.mark.django_db

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
STATE_ALLOWED = ", ".join(STATE_FIELDS)
NAIVE_RULE = "must carry a time zone, e.g. 2026-01-31T09:00:00Z"


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


def battery_client(name: str = "battery-run", now: datetime | None = T0) -> AgentClient:
    """A throwaway agent (as the Memory Battery makes), on a simulated clock at `now`."""
    agent = agent_create(name=name, is_throwaway=True)
    api_key, raw = api_key_create(agent=agent, name="battery", scopes=[Scope.READ, Scope.WRITE])
    if now is not None:
        engine.clock_set(agent=agent, now=now)
    return AgentClient(agent, raw, api_key)


@pytest.fixture
def sim() -> AgentClient:
    return battery_client()


# ------------------------------------------------------------------ expected bodies


def thread_body(thread_id) -> dict:
    thread = Thread.objects.get(pk=thread_id)
    return {
        "id": str(thread.pk),
        "key": thread.key,
        "status": thread.status,
        "session_id": thread.session_id,
        "current_version": thread.current_version,
        "created_at": iso(thread.created_at),
        "updated_at": iso(thread.updated_at),
    }


def state_body(thread_id, version: int | None = None) -> dict:
    thread = Thread.objects.get(pk=thread_id)
    version = thread.current_version if version is None else version
    if version == 0:
        return {
            "thread_id": str(thread.pk),
            "version": 0,
            "based_on": None,
            "state": {},
            "size_bytes": 0,
            "session_id": "",
            "source_event_id": None,
            "created_at": None,
        }
    row = WorkingState.objects.get(thread=thread, version=version)
    return {
        "thread_id": str(thread.pk),
        "version": row.version,
        "based_on": row.based_on,
        "state": row.state,
        "size_bytes": row.size_bytes,
        "session_id": row.session_id,
        "source_event_id": str(row.source_event_id),
        "created_at": iso(row.created_at),
    }


def handover_body(handover_id) -> dict:
    handover = Handover.objects.get(pk=handover_id)
    return {
        "id": str(handover.pk),
        "thread_id": str(handover.thread_id),
        "from_session": handover.from_session,
        "to_session": handover.to_session,
        "frozen_version": handover.frozen_version,
        "status": handover.status,
        "note": handover.note,
        "succession_event_id": str(handover.succession_event_id),
        "created_at": iso(handover.created_at),
        "resumed_at": iso(handover.resumed_at),
        "acknowledged_at": iso(handover.acknowledged_at),
    }


def pending_body(item: PendingItem) -> dict:
    intention = Intention.objects.get(pk=item.intention_id)
    return {
        "id": item.pk,
        "kind": item.kind,
        "intention_id": str(intention.pk),
        "description": intention.description,
        "priority": intention.priority,
        "status": intention.status,
        "occurrence": item.occurrence,
        "added_at": iso(item.added_at),
    }


def pending_bodies(thread_id) -> list[dict]:
    items = PendingItem.objects.filter(thread_id=thread_id, cleared_at__isnull=True)
    return [pending_body(item) for item in items.order_by("added_at", "id")]


def thread_detail_body(thread_id) -> dict:
    handover = Handover.objects.filter(thread_id=thread_id).exclude(status="acknowledged").first()
    return {
        **thread_body(thread_id),
        "checkpoint": state_body(thread_id),
        "pending": pending_bodies(thread_id),
        "handover": None if handover is None else handover_body(handover.pk),
    }


def intention_body(intention_id) -> dict:
    intention = Intention.objects.get(pk=intention_id)
    dependencies = IntentionDependency.objects.filter(intention=intention).order_by("id")
    return {
        "id": str(intention.pk),
        "description": intention.description,
        "priority": intention.priority,
        "status": intention.status,
        "trigger_type": intention.trigger_type,
        "trigger_spec": intention.trigger_spec,
        "thread": str(intention.thread_id) if intention.thread_id else None,
        "not_before": iso(intention.not_before),
        "due_at": iso(intention.due_at),
        "rrule": intention.rrule,
        "expires_at": iso(intention.expires_at),
        "occurrence": intention.occurrence,
        "last_fired_at": iso(intention.last_fired_at),
        "last_rehearsed_at": iso(intention.last_rehearsed_at),
        "dependencies": [str(d.depends_on_id) for d in dependencies],
        "required_context": intention.required_context,
        "completion_criteria": intention.completion_criteria,
        "completion_evidence": intention.completion_evidence,
        "retry_policy": intention.retry_policy,
        "escalation_policy": intention.escalation_policy,
        "escalated_at": iso(intention.escalated_at),
        "escalation": intention.escalation,
        "source_session": intention.source_session,
        "inherited_by": intention.inherited_by,
        "source_event_id": str(intention.source_event_id),
        "created_at": iso(intention.created_at),
        "updated_at": iso(intention.updated_at),
    }


def detail_body(intention_id) -> dict:
    transitions = Transition.objects.filter(intention_id=intention_id).order_by("id")
    firings = Firing.objects.filter(intention_id=intention_id).order_by("occurrence")
    return {
        **intention_body(intention_id),
        "transitions": [
            {
                "from": t.from_status or None,
                "to": t.to_status,
                "at": iso(t.at),
                "reason": t.reason,
                "occurrence": t.occurrence,
                "event_id": str(t.event_id) if t.event_id else None,
            }
            for t in transitions
        ],
        "firings": [
            {
                "id": str(f.pk),
                "occurrence": f.occurrence,
                "fired_at": iso(f.fired_at),
                "cause": f.cause,
                "cause_event_id": str(f.cause_event_id) if f.cause_event_id else None,
                "event_id": str(f.event_id),
            }
            for f in firings
        ],
    }


def timeline(intention_id) -> list[tuple]:
    return list(
        Transition.objects.filter(intention_id=intention_id)
        .order_by("id")
        .values_list("from_status", "to_status", "occurrence", "reason")
    )


def intentions_state() -> dict:
    """Everything an intentions write could touch. Refusals assert it did not change."""
    return {
        **ledger_state(),
        "threads": sorted(
            Thread.objects.values_list("pk", "status", "session_id", "current_version"), key=str
        ),
        "versions": sorted(WorkingState.objects.values_list("pk", "version"), key=str),
        "handovers": sorted(Handover.objects.values_list("pk", "status"), key=str),
        "intentions": sorted(
            Intention.objects.values_list(
                "pk",
                "status",
                "occurrence",
                "due_at",
                "inherited_by",
                "completion_evidence",
                "escalation_policy",
                "escalated_at",
            ),
            key=str,
        ),
        "dependencies": sorted(
            IntentionDependency.objects.values_list("intention_id", "depends_on_id"), key=str
        ),
        "transitions": Transition.objects.count(),
        "firings": Firing.objects.count(),
        "escalations": Escalation.objects.count(),
        "pending": sorted(PendingItem.objects.values_list("pk", "cleared_at"), key=str),
        "outbox": OutboxMessage.objects.count(),
        "webhooks": sorted(Webhook.objects.values_list("agent_id", "url", "secret"), key=str),
        "clocks": sorted(AgentClock.objects.values_list("agent_id", "now"), key=str),
        "cursors": sorted(EventCursor.objects.values_list("agent_id", "last_seq"), key=str),
    }


def event_types(agent) -> list[str]:
    return list(
        Event.objects.filter(agent=agent).order_by("seq").values_list("event_type", flat=True)
    )


# ---------------------------------------------------------------- request helpers


def make_thread(client, key: str = "main", session_id: str = "s1") -> str:
    response = post(client, "/api/v1/threads", {"key": key, "session_id": session_id})
    assert response.status_code in (200, 201), response.json()
    return response.json()["id"]


def write_state(client, thread_id: str, state: dict, based_on: int, **extra) -> dict:
    response = put(
        client,
        f"/api/v1/threads/{thread_id}/state",
        {"state": state, "based_on": based_on, **extra},
    )
    assert response.status_code == 201, response.json()
    return response.json()


def make_intention(client, **body) -> dict:
    body.setdefault("description", "follow up")
    body.setdefault("trigger_type", "manual")
    response = post(client, "/api/v1/intentions", body)
    assert response.status_code == 201, response.json()
    return response.json()


def act(client, intention_id: str, action: str, body: dict | None = None) -> dict:
    response = post(client, f"/api/v1/intentions/{intention_id}/{action}", body or {})
    assert response.status_code == 200, response.json()
    return response.json()


def tick(client) -> dict:
    return ok(post(client, "/api/v1/intentions/tick", {}))


def set_clock(client, moment: datetime) -> dict:
    return ok(put(client, "/api/v1/clock", {"now": moment.isoformat()}))


def refused(response, status: int, body: dict, before: dict) -> None:
    """The request was refused with exactly this error, and nothing was written."""
    assert (response.status_code, response.json()) == (status, body)
    assert intentions_state() == before


# ------------------------------------------------------------------------- threads


class TestThreads:
    def test_create_then_get_the_same_thread(self, client_a):
        before = ledger_state()
        response = post(client_a, "/api/v1/threads", {"key": "main", "session_id": "s1"})
        assert response.status_code == 201
        thread = Thread.objects.get(agent=client_a.agent, key="main")
        assert response.json() == {
            "id": str(thread.pk),
            "key": "main",
            "status": "active",
            "session_id": "s1",
            "current_version": 0,
            "created_at": iso(thread.created_at),
            "updated_at": iso(thread.updated_at),
            "checkpoint": {
                "thread_id": str(thread.pk),
                "version": 0,
                "based_on": None,
                "state": {},
                "size_bytes": 0,
                "session_id": "",
                "source_event_id": None,
                "created_at": None,
            },
            "pending": [],
            "handover": None,
        }
        # The thread's creation is recorded, once: the second POST wrote nothing.
        new_events = Event.objects.filter(agent=client_a.agent).exclude(
            pk__in=[pk for pk, _ in before["events"]]
        )
        assert list(new_events.values_list("event_type", flat=True)) == ["thread.created"]

        snapshot = intentions_state()
        again = post(client_a, "/api/v1/threads", {"key": " main ", "session_id": "s9"})
        assert (again.status_code, again.json()) == (200, response.json())
        assert intentions_state() == snapshot
        assert ok(client_a.get(f"/api/v1/threads/{thread.pk}")) == response.json()

    def test_session_is_optional(self, client_a):
        response = post(client_a, "/api/v1/threads", {"key": "side"})
        assert response.status_code == 201
        assert response.json()["session_id"] == ""

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "key", "This field is required."),
            ({"key": ""}, "key", "This field may not be blank."),
            ({"key": "   "}, "key", "This field may not be blank."),
            ({"key": 7}, "key", "Not a valid string."),
            ({"key": "k" * 201}, "key", "Ensure this field has no more than 200 characters."),
            ({"key": "k", "session_id": 1}, "session_id", "Not a valid string."),
            (
                {"key": "k", "session_id": "s" * 201},
                "session_id",
                "Ensure this field has no more than 200 characters.",
            ),
            ({"key": "k", "colour": "red"}, "colour", "unknown field; allowed: key, session_id"),
        ],
    )
    def test_bad_input(self, client_a, body, field, message):
        before = intentions_state()
        refused(
            post(client_a, "/api/v1/threads", body),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )

    def test_a_body_that_is_not_an_object(self, client_a):
        before = intentions_state()
        refused(
            post(client_a, "/api/v1/threads", ["main"]),
            400,
            error("invalid", "send a JSON object", {"body": ["expected a JSON object"]}),
            before,
        )

    def test_list_newest_first_paginated_and_filtered(self, client_a, client_b):
        ids = [make_thread(client_a, key) for key in ("a", "b", "c")]
        make_thread(client_b, "a")
        first = ok(client_a.get("/api/v1/threads", {"limit": 2}))
        assert first["results"] == [thread_body(ids[2]), thread_body(ids[1])]
        assert first["previous"] is None
        second = ok(client_a.get(first["next"]))
        assert (second["results"], second["next"]) == ([thread_body(ids[0])], None)

        post(client_a, f"/api/v1/threads/{ids[1]}/handover", {"to_session": "s2"})
        frozen = ok(client_a.get("/api/v1/threads", {"status": "handing_over"}))
        assert [t["id"] for t in frozen["results"]] == [ids[1]]

    @pytest.mark.parametrize(
        ("params", "field", "message"),
        [
            ({"status": "open"}, "status", '"open" is not a valid choice.'),
            ({"limit": "0"}, "limit", "Ensure this value is greater than or equal to 1."),
            ({"key": "a"}, "key", "unknown field; allowed: cursor, limit, status"),
        ],
    )
    def test_list_bad_parameters(self, client_a, params, field, message):
        response = client_a.get("/api/v1/threads", params)
        assert (response.status_code, response.json()) == (
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
        )

    def test_list_refuses_a_forged_cursor(self, client_a):
        response = client_a.get("/api/v1/threads", {"cursor": "forged"})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid_cursor"

    def test_unknown_thread(self, client_a):
        missing = uuid.uuid4()
        response = client_a.get(f"/api/v1/threads/{missing}")
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", f"thread {missing} not found"),
        )

    def test_a_key_is_not_an_id(self, client_a):
        make_thread(client_a, "main")
        response = client_a.get("/api/v1/threads/main")
        assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")


# ------------------------------------------------------------------- working state

FULL_STATE = {
    "goal": "ship the release",
    "subgoal": "green CI",
    "goal_stack": ["ship the release", "green CI"],
    "plan": [{"step": 1, "do": "fix flaky test"}, {"step": 2, "do": "tag"}],
    "assumptions": ["staging mirrors prod", "the freeze starts Friday", "Bob reviews"],
    "unresolved_questions": ["is the migration reversible?"],
    "artifacts": [
        {"name": "build", "ref": "ci://123", "checked_at": "2030-01-07T08:00:00Z"},
        {"name": "report", "ref": "s3://r.pdf"},
    ],
    "tool_handles": [{"name": "shell", "ref": "pty-4"}],
    "last_action": {"tool": "pytest", "args": ["-x"]},
    "last_observation": "3 failed",
    "blockers": ["waiting for review"],
    "decision_points": {"rollback": "if error rate > 1%"},
    "failed_branches": [{"branch": "retry the flaky test", "reason": "fails 1 in 3"}],
    "next_action": "quarantine the flaky test",
    "source_session": "s1",
}


class TestWorkingState:
    def test_write_every_field_then_read_it_back(self, client_a):
        thread_id = make_thread(client_a)
        response = put(
            client_a,
            f"/api/v1/threads/{thread_id}/state",
            {"state": FULL_STATE, "based_on": 0, "session_id": "s1"},
        )
        assert response.status_code == 201
        row = WorkingState.objects.get(thread_id=thread_id)
        event = Event.objects.filter(agent=client_a.agent).latest("seq")
        assert response.json() == {
            "thread_id": thread_id,
            "version": 1,
            "based_on": 0,
            "state": FULL_STATE,
            "size_bytes": len(json.dumps(FULL_STATE, separators=(",", ":")).encode()),
            "session_id": "s1",
            "source_event_id": str(event.pk),
            "created_at": iso(row.created_at),
        }
        assert (event.event_type, event.payload, event.session_id) == (
            "working_state.written",
            {
                "thread_id": thread_id,
                "thread": "main",
                "version": 1,
                "state": FULL_STATE,
                "working_state_id": str(row.pk),
            },
            "s1",
        )
        assert ok(client_a.get(f"/api/v1/threads/{thread_id}/state")) == response.json()
        detail = ok(client_a.get(f"/api/v1/threads/{thread_id}"))
        assert detail["checkpoint"] == response.json()
        assert detail["current_version"] == 1

    def test_versions_are_kept(self, client_a):
        thread_id = make_thread(client_a)
        for version in range(1, 4):
            write_state(client_a, thread_id, {"goal": f"goal {version}"}, version - 1)
        url = f"/api/v1/threads/{thread_id}/state"
        assert ok(client_a.get(url)) == state_body(thread_id, 3)
        assert ok(client_a.get(url, {"version": 1})) == state_body(thread_id, 1)
        assert ok(client_a.get(url, {"version": 1}))["state"] == {"goal": "goal 1"}
        assert ok(client_a.get(url, {"version": 0})) == state_body(thread_id, 0)
        missing = client_a.get(url, {"version": 4})
        assert (missing.status_code, missing.json()) == (
            404,
            error(
                "not_found",
                f"thread {thread_id} has no version 4; its current version is 3",
                {"version": ["between 0 and 3"]},
            ),
        )

        first = ok(client_a.get(f"/api/v1/threads/{thread_id}/versions", {"limit": 2}))
        assert first["results"] == [state_body(thread_id, 3), state_body(thread_id, 2)]
        second = ok(client_a.get(first["next"]))
        assert (second["results"], second["next"]) == ([state_body(thread_id, 1)], None)

    def test_a_new_thread_has_no_versions(self, client_a):
        thread_id = make_thread(client_a)
        assert ok(client_a.get(f"/api/v1/threads/{thread_id}/versions")) == {
            "next": None,
            "previous": None,
            "results": [],
        }

    @pytest.mark.parametrize(
        ("params", "field", "message"),
        [
            ({"version": "x"}, "version", "A valid integer is required."),
            ({"version": "-1"}, "version", "Ensure this value is greater than or equal to 0."),
            (
                {"version": str(2**31)},
                "version",
                "Ensure this value is less than or equal to 2147483647.",
            ),
            ({"v": "1"}, "v", "unknown field; allowed: version"),
        ],
    )
    def test_read_bad_parameters(self, client_a, params, field, message):
        thread_id = make_thread(client_a)
        response = client_a.get(f"/api/v1/threads/{thread_id}/state", params)
        assert (response.status_code, response.json()) == (
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
        )

    def test_a_stale_write_is_refused(self, client_a):
        thread_id = make_thread(client_a)
        write_state(client_a, thread_id, {"goal": "a"}, 0)
        write_state(client_a, thread_id, {"goal": "b"}, 1)
        before = intentions_state()
        refused(
            put(
                client_a,
                f"/api/v1/threads/{thread_id}/state",
                {"state": {"goal": "mine"}, "based_on": 1},
            ),
            409,
            error(
                "stale_version",
                "working state is at version 2, not 1: read it, merge your change, and write again",
                {"current_version": 2, "based_on": 1},
            ),
            before,
        )
        ahead = put(client_a, f"/api/v1/threads/{thread_id}/state", {"state": {}, "based_on": 5})
        assert (ahead.status_code, ahead.json()["error"]["details"]) == (
            409,
            {"current_version": 2, "based_on": 5},
        )
        assert intentions_state() == before

    def test_a_state_over_the_size_limit_is_refused(self, client_a):
        thread_id = make_thread(client_a)
        state = {"goal": "x" * MAX_STATE_BYTES}
        size = MAX_STATE_BYTES + len('{"goal":""}')
        before = intentions_state()
        refused(
            put(client_a, f"/api/v1/threads/{thread_id}/state", {"state": state, "based_on": 0}),
            413,
            error(
                "state_too_large",
                f"working state is {size} bytes; the limit is {MAX_STATE_BYTES}. Keep the "
                "working set (goal, plan, open questions…) and put transcripts in events or "
                "sources.",
                {"limit_bytes": MAX_STATE_BYTES, "size_bytes": size},
            ),
            before,
        )

    def test_a_state_at_the_size_limit_is_kept(self, client_a):
        thread_id = make_thread(client_a)
        state = {"goal": "x" * (MAX_STATE_BYTES - len('{"goal":""}'))}
        written = write_state(client_a, thread_id, state, 0)
        assert written["size_bytes"] == MAX_STATE_BYTES

    @pytest.mark.parametrize(
        ("state", "field", "message"),
        [
            ({"colour": "red"}, "colour", f"unknown field; allowed: {STATE_ALLOWED}"),
            ({"goal": 5}, "goal", "must be text"),
            ({"assumptions": "one"}, "assumptions", "must be a list of text"),
            ({"assumptions": ["a", 2]}, "assumptions", "must be a list of text"),
            ({"failed_branches": ["x"]}, "failed_branches", "must be a list of objects"),
            (
                {"artifacts": [{"name": "a", "checked_at": "2030-01-07T08:00:00"}]},
                "artifacts",
                "[0].checked_at: an ISO 8601 time with a zone",
            ),
            (
                {"tool_handles": [{"name": "a", "freshness_seconds": -1}]},
                "tool_handles",
                "[0].freshness_seconds: a whole number ≥ 0",
            ),
        ],
    )
    def test_a_state_of_the_wrong_shape_is_refused(self, client_a, state, field, message):
        thread_id = make_thread(client_a)
        before = intentions_state()
        refused(
            put(client_a, f"/api/v1/threads/{thread_id}/state", {"state": state, "based_on": 0}),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({"based_on": 0}, "state", "This field is required."),
            (
                {"state": ["goal"], "based_on": 0},
                "state",
                'Expected a dictionary of items but got type "list".',
            ),
            ({"state": {}}, "based_on", "This field is required."),
            ({"state": {}, "based_on": "0"}, "based_on", "A valid integer is required."),
            ({"state": {}, "based_on": 1.0}, "based_on", "A valid integer is required."),
            ({"state": {}, "based_on": True}, "based_on", "A valid integer is required."),
            (
                {"state": {}, "based_on": -1},
                "based_on",
                "Ensure this value is greater than or equal to 0.",
            ),
            ({"state": {}, "based_on": 0, "session_id": 3}, "session_id", "Not a valid string."),
            (
                {"state": {}, "based_on": 0, "version": 1},
                "version",
                "unknown field; allowed: based_on, privacy_class, retention_class, session_id, state",
            ),
        ],
    )
    def test_bad_write_requests(self, client_a, body, field, message):
        thread_id = make_thread(client_a)
        before = intentions_state()
        refused(
            put(client_a, f"/api/v1/threads/{thread_id}/state", body),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )

    def test_a_frozen_thread_refuses_writes_until_the_successor_acknowledges(self, client_a):
        thread_id = make_thread(client_a)
        write_state(client_a, thread_id, {"goal": "a"}, 0)
        post(client_a, f"/api/v1/threads/{thread_id}/handover", {"to_session": "s2"})
        before = intentions_state()
        refused(
            put(client_a, f"/api/v1/threads/{thread_id}/state", {"state": {}, "based_on": 1}),
            409,
            error(
                "thread_frozen",
                "thread 'main' is frozen for a handover; the successor resumes and "
                "acknowledges it first",
            ),
            before,
        )
        post(client_a, f"/api/v1/threads/{thread_id}/resume", {"session_id": "s2"})
        post(client_a, f"/api/v1/threads/{thread_id}/acknowledge", {"session_id": "s2"})
        written = write_state(client_a, thread_id, {"goal": "b"}, 1, session_id="s2")
        assert (written["version"], written["session_id"]) == (2, "s2")

    def test_an_idempotent_retry_writes_once(self, client_a):
        thread_id = make_thread(client_a)
        url = f"/api/v1/threads/{thread_id}/state"
        body = {"state": {"goal": "a"}, "based_on": 0}
        first = put(client_a, url, body, HTTP_IDEMPOTENCY_KEY="w-1")
        before = intentions_state()
        again = put(client_a, url, body, HTTP_IDEMPOTENCY_KEY="w-1")
        assert (again.status_code, again.json()) == (201, first.json())
        assert again["Idempotent-Replayed"] == "true"
        assert intentions_state() == before


# ------------------------------------------------------------------------ handover


class TestHandover:
    def test_handover_resume_acknowledge(self, sim):
        """A1/A3 in one: the successor gets the checkpoint, the open intentions (due and
        overdue first), what to re-check, the failed branches and the pending items."""
        thread_id = make_thread(sim, "deploy", "s1")
        state = {
            **FULL_STATE,
            "artifacts": [
                # checked 2 h before T0, trusted for 1 h: re-check
                {"name": "build", "checked_at": "2030-01-07T07:00:00Z", "freshness_seconds": 3600},
                # checked 10 min before T0, trusted for 1 h: fine
                {"name": "report", "checked_at": "2030-01-07T08:50:00Z", "freshness_seconds": 3600},
                {"name": "notes"},  # no freshness declared: never re-checked
            ],
            "tool_handles": [
                {"name": "shell", "checked_at": "2030-01-07T08:59:00Z", "freshness_seconds": 30}
            ],
        }
        write_state(sim, thread_id, state, 0, session_id="s1")
        later = make_intention(
            sim,
            description="later",
            trigger_type="time",
            due_at=(T0 + minutes(60)).isoformat(),
            thread=thread_id,
        )
        overdue = make_intention(
            sim,
            description="overdue",
            trigger_type="time",
            due_at=(T0 - minutes(5)).isoformat(),
            thread=thread_id,
        )
        fired = make_intention(sim, description="fired", thread=thread_id, priority=5)
        act(sim, fired["id"], "fire")
        done = make_intention(sim, description="done", thread=thread_id)
        act(sim, done["id"], "complete")
        elsewhere = make_intention(sim, description="no thread")

        response = post(
            sim,
            f"/api/v1/threads/{thread_id}/handover",
            {"to_session": "s2", "note": "going off shift"},
        )
        assert response.status_code == 201
        handover = Handover.objects.get(thread_id=thread_id)
        assert response.json() == handover_body(handover.pk)
        assert response.json()["status"] == "pending"
        assert (handover.from_session, handover.frozen_version) == ("s1", 1)
        event = Event.objects.get(pk=handover.succession_event_id)
        assert (event.event_type, event.payload) == (
            "thread.handover_started",
            {
                "thread_id": thread_id,
                "thread": "deploy",
                "from_session": "s1",
                "to_session": "s2",
                "frozen_version": 1,
                "note": "going off shift",
                "handover_id": str(handover.pk),
            },
        )
        assert ok(sim.get(f"/api/v1/threads/{thread_id}"))["handover"] == response.json()

        resumed = post(sim, f"/api/v1/threads/{thread_id}/resume", {"session_id": "s2"})
        assert resumed.status_code == 200
        body = resumed.json()
        assert list(body) == [
            "checkpoint",
            "intentions",
            "recheck",
            "failed_branches",
            "pending",
            "thread",
            "handover",
            "now",
        ]
        assert body == {
            "checkpoint": state_body(thread_id, 1),
            "intentions": [
                intention_body(fired["id"]),
                intention_body(overdue["id"]),
                intention_body(later["id"]),
                # The agent's promise of no thread: the successor inherits it too.
                intention_body(elsewhere["id"]),
            ],
            "recheck": [
                {
                    "kind": "artifact",
                    "name": "build",
                    "checked_at": "2030-01-07T07:00:00Z",
                    "freshness_seconds": 3600,
                    "age_seconds": 7200,
                    "reason": "expired",
                },
                {
                    "kind": "tool_handle",
                    "name": "shell",
                    "checked_at": "2030-01-07T08:59:00Z",
                    "freshness_seconds": 30,
                    "age_seconds": 60,
                    "reason": "expired",
                },
            ],
            "failed_branches": FULL_STATE["failed_branches"],
            "pending": pending_bodies(thread_id),
            "thread": thread_body(thread_id),
            "handover": handover_body(handover.pk),
            "now": iso(T0),
        }
        assert [p["intention_id"] for p in body["pending"]] == [fired["id"]]
        assert body["handover"]["status"] == "resumed"
        assert body["thread"]["status"] == "handing_over"
        assert done["id"] not in json.dumps(body)  # completed: nothing to inherit

        acknowledged = post(sim, f"/api/v1/threads/{thread_id}/acknowledge", {"session_id": "s2"})
        assert (acknowledged.status_code, acknowledged.json()) == (
            200,
            handover_body(handover.pk),
        )
        assert acknowledged.json()["status"] == "acknowledged"
        assert thread_body(thread_id)["status"] == "active"
        assert thread_body(thread_id)["session_id"] == "s2"
        inherited = dict(
            Intention.objects.filter(agent=sim.agent).values_list("description", "inherited_by")
        )
        assert inherited == {
            "later": "s2",
            "overdue": "s2",
            "fired": "s2",
            "done": "",
            "no thread": "",
        }
        assert event_types(sim.agent)[-3:] == [
            "thread.handover_started",
            "thread.resumed",
            "thread.handover_acknowledged",
        ]
        assert ok(sim.get(f"/api/v1/threads/{thread_id}"))["handover"] is None

    def test_resume_without_a_handover_writes_nothing(self, client_a):
        thread_id = make_thread(client_a)
        before = intentions_state()
        body = ok(post(client_a, f"/api/v1/threads/{thread_id}/resume", {"session_id": "s7"}))
        assert body["checkpoint"] == state_body(thread_id, 0)
        assert (body["intentions"], body["recheck"], body["failed_branches"], body["pending"]) == (
            [],
            [],
            [],
            [],
        )
        assert body["handover"] is None
        assert intentions_state() == before

    def test_only_the_successor_resumes_and_acknowledges(self, client_a):
        thread_id = make_thread(client_a)
        post(client_a, f"/api/v1/threads/{thread_id}/handover", {"to_session": "s2"})
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/resume", {"session_id": "s3"}),
            409,
            error(
                "not_the_successor",
                "thread 'main' is being handed over to 's2', not 's3'",
            ),
            before,
        )
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/acknowledge", {"session_id": "s2"}),
            409,
            error("not_resumed", "resume the thread before acknowledging the handover"),
            before,
        )
        post(client_a, f"/api/v1/threads/{thread_id}/resume", {"session_id": "s2"})
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/acknowledge", {"session_id": "s3"}),
            409,
            error("not_the_successor", "only 's2' can acknowledge this handover"),
            before,
        )
        # resuming again (a retry) answers the package and records nothing more
        again = post(client_a, f"/api/v1/threads/{thread_id}/resume", {"session_id": "s2"})
        assert again.status_code == 200
        assert intentions_state() == before

    def test_one_open_handover_at_a_time(self, client_a):
        thread_id = make_thread(client_a)
        post(client_a, f"/api/v1/threads/{thread_id}/handover", {"to_session": "s2"})
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/handover", {"to_session": "s3"}),
            409,
            error("handover_open", "thread 'main' is already being handed over to 's2'"),
            before,
        )

    def test_acknowledge_without_a_handover(self, client_a):
        thread_id = make_thread(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/acknowledge", {"session_id": "s1"}),
            409,
            error("no_handover", "thread 'main' has no open handover"),
            before,
        )

    @pytest.mark.parametrize(
        ("action", "body", "field", "message"),
        [
            ("handover", {}, "to_session", "This field is required."),
            ("handover", {"to_session": ""}, "to_session", "This field may not be blank."),
            ("handover", {"to_session": 2}, "to_session", "Not a valid string."),
            (
                "handover",
                {"to_session": "s2", "reason": "x"},
                "reason",
                "unknown field; allowed: from_session, note, to_session",
            ),
            ("resume", {}, "session_id", "This field is required."),
            ("resume", {"session_id": None}, "session_id", "This field may not be null."),
            ("acknowledge", {"session_id": ["s2"]}, "session_id", "Not a valid string."),
        ],
    )
    def test_bad_input(self, client_a, action, body, field, message):
        thread_id = make_thread(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/{action}", body),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )


# -------------------------------------------------------------------------- pending


class TestPending:
    def test_fired_intentions_are_pending_until_cleared(self, client_a):
        thread_id = make_thread(client_a)
        other_thread = make_thread(client_a, "other")
        first = make_intention(client_a, description="first", thread=thread_id)
        second = make_intention(client_a, description="second", thread=thread_id)
        third = make_intention(client_a, description="third", thread=other_thread)
        for intention in (first, second, third):
            act(client_a, intention["id"], "fire")
        pending = ok(client_a.get(f"/api/v1/threads/{thread_id}"))["pending"]
        assert pending == pending_bodies(thread_id)
        assert [(p["intention_id"], p["kind"], p["status"]) for p in pending] == [
            (first["id"], "fired", "due"),
            (second["id"], "fired", "due"),
        ]
        elsewhere = PendingItem.objects.get(intention_id=third["id"]).pk

        response = post(
            client_a,
            f"/api/v1/threads/{thread_id}/pending/clear",
            {"ids": [pending[0]["id"], elsewhere, 10**12]},
        )
        assert ok(response) == {"cleared": 1, "pending": [pending[1]]}
        assert PendingItem.objects.get(pk=elsewhere).cleared_at is None
        before = intentions_state()
        again = post(
            client_a, f"/api/v1/threads/{thread_id}/pending/clear", {"ids": [pending[0]["id"]]}
        )
        assert ok(again) == {"cleared": 0, "pending": [pending[1]]}
        assert intentions_state() == before

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "ids", "This field is required."),
            ({"ids": []}, "ids", "This list may not be empty."),
            ({"ids": "1"}, "ids", 'Expected a list of items but got type "str".'),
        ],
    )
    def test_bad_input(self, client_a, body, field, message):
        thread_id = make_thread(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/pending/clear", body),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )

    @pytest.mark.parametrize(
        ("ids", "message"),
        [
            (["1"], "A valid integer is required."),
            ([0], "Ensure this value is greater than or equal to 1."),
            ([2**63], "Ensure this value is less than or equal to 9223372036854775807."),
        ],
    )
    def test_ids_are_whole_numbers(self, client_a, ids, message):
        thread_id = make_thread(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/threads/{thread_id}/pending/clear", {"ids": ids}),
            400,
            error("invalid", f"ids[0]: {message}", {"ids": {"0": [message]}}),
            before,
        )


# ---------------------------------------------------------------- making intentions


class TestCreate:
    def test_every_field(self, sim):
        thread_id = make_thread(sim)
        dependency = make_intention(sim, description="get approval")
        body = {
            "description": "  deploy to prod  ",
            "trigger_type": "time",
            "trigger_spec": {},
            "thread": thread_id,
            "priority": 7,
            "not_before": "2030-01-07T10:00:00Z",
            "due_at": "2030-01-07T13:00:00+02:00",
            "rrule": "",
            "expires_at": "2030-02-01T00:00:00Z",
            "dependencies": [dependency["id"]],
            "required_context": ["release notes", {"ticket": "OPS-1"}],
            "completion_criteria": "the health check is green",
            "retry_policy": {"max_retries": 2, "backoff_seconds": 30},
            "escalation_policy": {"after_failures": 2, "to_session": "oncall"},
            "source_session": "s1",
        }
        response = post(sim, "/api/v1/intentions", body)
        assert response.status_code == 201
        intention = Intention.objects.get(agent=sim.agent, description="deploy to prod")
        event = Event.objects.get(pk=intention.source_event_id)
        assert response.json() == {
            "id": str(intention.pk),
            "description": "deploy to prod",
            "priority": 7,
            "status": "blocked",
            "trigger_type": "time",
            "trigger_spec": {},
            "thread": thread_id,
            "not_before": "2030-01-07T10:00:00Z",
            "due_at": "2030-01-07T11:00:00Z",
            "rrule": "",
            "expires_at": "2030-02-01T00:00:00Z",
            "occurrence": 1,
            "last_fired_at": None,
            "last_rehearsed_at": iso(T0),
            "dependencies": [dependency["id"]],
            "required_context": ["release notes", {"ticket": "OPS-1"}],
            "completion_criteria": "the health check is green",
            "completion_evidence": None,
            "retry_policy": {"max_retries": 2, "backoff_seconds": 30},
            "escalation_policy": {"after_failures": 2, "to_session": "oncall"},
            "escalated_at": None,
            "escalation": None,
            "source_session": "s1",
            "inherited_by": "",
            "source_event_id": str(event.pk),
            "created_at": iso(intention.created_at),
            "updated_at": iso(intention.updated_at),
            "transitions": [
                {
                    "from": None,
                    "to": "blocked",
                    "at": iso(T0),
                    "reason": "created",
                    "occurrence": 1,
                    "event_id": str(event.pk),
                }
            ],
            "firings": [],
        }
        assert (event.event_type, event.session_id, event.payload) == (
            "intention.created",
            "s1",
            {
                "intention_id": str(intention.pk),
                "description": "deploy to prod",
                "trigger_type": "time",
                "trigger_spec": {},
                "due_at": "2030-01-07T11:00:00+00:00",
                "not_before": "2030-01-07T10:00:00+00:00",
                "rrule": "",
                "dependencies": [dependency["id"]],
                "thread_id": thread_id,
                "status": "blocked",
                "priority": 7,
                "expires_at": "2030-02-01T00:00:00+00:00",
                "required_context": body["required_context"],
                "completion_criteria": body["completion_criteria"],
                "retry_policy": {"max_retries": 2, "backoff_seconds": 30},
                "escalation_policy": {"after_failures": 2, "to_session": "oncall"},
                "at": "2030-01-07T09:00:00+00:00",
            },
        )
        assert ok(sim.get(f"/api/v1/intentions/{intention.pk}")) == response.json()

    def test_defaults(self, client_a):
        response = post(
            client_a, "/api/v1/intentions", {"description": "ping", "trigger_type": "manual"}
        )
        assert response.status_code == 201
        assert response.json() == detail_body(response.json()["id"])
        assert {
            k: response.json()[k]
            for k in (
                "priority",
                "status",
                "trigger_spec",
                "thread",
                "dependencies",
                "required_context",
                "retry_policy",
                "escalation_policy",
                "occurrence",
            )
        } == {
            "priority": 0,
            "status": "active",
            "trigger_spec": {},
            "thread": None,
            "dependencies": [],
            "required_context": [],
            "retry_policy": {},
            "escalation_policy": {},
            "occurrence": 1,
        }

    def test_each_trigger_type(self, sim):
        event = make_intention(
            sim,
            trigger_type="event",
            trigger_spec={
                "event_type": "deploy.*",
                "conditions": [{"field": "payload.env", "op": "eq", "value": "prod"}],
            },
        )
        state = make_intention(
            sim,
            trigger_type="state",
            trigger_spec={"subject": "build", "predicate": "status", "op": "eq", "value": "green"},
        )
        recurring = make_intention(
            sim,
            trigger_type="time",
            due_at=(T0 + minutes(30)).isoformat(),
            rrule="FREQ=DAILY;COUNT=3",
        )
        first = make_intention(sim)
        dependent = make_intention(sim, trigger_type="dependency", dependencies=[first["id"]])
        assert [i["status"] for i in (event, state, recurring, dependent)] == [
            "active",
            "active",
            "active",
            "blocked",
        ]
        assert event["trigger_spec"]["event_type"] == "deploy.*"
        assert recurring["due_at"] == iso(T0 + minutes(30))

    def test_a_dependency_already_complete_fires_at_once(self, sim):
        first = make_intention(sim)
        act(sim, first["id"], "complete")
        dependent = make_intention(sim, trigger_type="dependency", dependencies=[first["id"]])
        assert dependent["status"] == "due"
        assert [(f["cause"], f["occurrence"]) for f in dependent["firings"]] == [("dependency", 1)]
        assert dependent == detail_body(dependent["id"])

    def test_an_idempotent_retry_makes_one_intention(self, client_a):
        body = {"description": "once", "trigger_type": "manual"}
        first = post(client_a, "/api/v1/intentions", body, HTTP_IDEMPOTENCY_KEY="i-1")
        before = intentions_state()
        again = post(client_a, "/api/v1/intentions", body, HTTP_IDEMPOTENCY_KEY="i-1")
        assert (again.status_code, again.json()) == (201, first.json())
        assert intentions_state() == before
        other = post(
            client_a, "/api/v1/intentions", {**body, "priority": 1}, HTTP_IDEMPOTENCY_KEY="i-1"
        )
        assert (other.status_code, other.json()["error"]["code"]) == (
            422,
            "idempotency_key_reused",
        )
        assert intentions_state() == before


SPEC_RULES = [
    (
        "event",
        {},
        "event_type: the event type to wait for (a glob like 'deploy.*' is fine)",
    ),
    (
        "event",
        {"event_type": "x", "when": 1},
        "an event trigger has event_type and conditions only",
    ),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "payload.a", "op": "like", "value": 1}]},
        "conditions[0].op: one of eq, ne, gt, gte, lt, lte, in, contains, exists, absent",
    ),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "payload.a"}]},
        "conditions[0].value: required for op 'eq'",
    ),
    ("event", {"event_type": "x", "conditions": "a=1"}, "conditions: a list of at most 20"),
    ("state", {"subject": "build"}, "predicate: required (an entity name or id; a predicate name)"),
    (
        "state",
        {"subject": "build", "predicate": "status", "op": "in", "value": "green"},
        "state.value: a list for op 'in'",
    ),
    ("time", {"at": "noon"}, "a time trigger takes no spec (send {})"),
    ("manual", {"x": 1}, "a manual trigger takes no spec (send {})"),
    ("manual", ["x"], "must be a JSON object"),
    ("manual", "deploy.*", "must be a JSON object"),
]


class TestCreateRefusals:
    """Bad input: a clear error naming the field, and nothing written."""

    @pytest.mark.parametrize(("trigger_type", "spec", "message"), SPEC_RULES)
    def test_a_trigger_spec_that_does_not_fit(self, sim, trigger_type, spec, message):
        before = intentions_state()
        body = {"description": "x", "trigger_type": trigger_type, "trigger_spec": spec}
        if trigger_type == "time":
            body["due_at"] = T0.isoformat()
        refused(
            post(sim, "/api/v1/intentions", body),
            400,
            error("invalid_trigger", f"trigger_spec: {message}", {"trigger_spec": [message]}),
            before,
        )

    def test_an_rrule_that_does_not_parse(self, sim):
        rule = "FREQ=SOMETIMES"
        with pytest.raises(ValueError) as exc:
            rrulestr(rule, dtstart=T0)
        before = intentions_state()
        refused(
            post(
                sim,
                "/api/v1/intentions",
                {
                    "description": "x",
                    "trigger_type": "time",
                    "due_at": T0.isoformat(),
                    "rrule": rule,
                },
            ),
            400,
            error(
                "invalid_rrule", f"rrule: does not parse ({exc.value})", {"rrule": [str(exc.value)]}
            ),
            before,
        )

    def test_an_rrule_that_never_occurs(self, sim):
        before = intentions_state()
        refused(
            post(
                sim,
                "/api/v1/intentions",
                {
                    "description": "x",
                    "trigger_type": "time",
                    "due_at": T0.isoformat(),
                    "rrule": "FREQ=DAILY;UNTIL=20200101T000000Z",
                },
            ),
            400,
            error(
                "invalid_rrule", "rrule: never occurs from its start", {"rrule": ["never occurs"]}
            ),
            before,
        )

    @pytest.mark.parametrize(
        ("extra", "field", "message"),
        [
            (
                {
                    "trigger_type": "time",
                    "not_before": "2030-01-07T10:00:00Z",
                    "due_at": "2030-01-07T09:59:59Z",
                },
                "due_at",
                "must not be before not_before",
            ),
            ({"trigger_type": "time"}, "due_at", "a time trigger needs due_at (or not_before)"),
            (
                {"trigger_type": "manual", "rrule": "FREQ=DAILY"},
                "rrule",
                "recurrence applies to time triggers",
            ),
            ({"trigger_type": "dependency"}, "dependencies", "required"),
        ],
    )
    def test_times_that_contradict_each_other(self, sim, extra, field, message):
        before = intentions_state()
        service_message = {
            "dependencies": "a dependency trigger needs dependencies",
        }.get(field, f"{field}: {message}")
        refused(
            post(sim, "/api/v1/intentions", {"description": "x", **extra}),
            400,
            error("invalid", service_message, {field: [message]}),
            before,
        )

    @pytest.mark.parametrize(
        ("extra", "field", "message"),
        [
            ({"description": None}, "description", "This field may not be null."),
            ({"description": ""}, "description", "This field may not be blank."),
            ({"description": 5}, "description", "Not a valid string."),
            ({"trigger_type": "cron"}, "trigger_type", '"cron" is not a valid choice.'),
            ({"priority": "high"}, "priority", "A valid integer is required."),
            ({"priority": 1.5}, "priority", "A valid integer is required."),
            ({"priority": 40000}, "priority", "Ensure this value is less than or equal to 32767."),
            ({"due_at": "2030-01-07T09:00:00"}, "due_at", NAIVE_RULE),
            ({"not_before": "2030-01-07"}, "not_before", NAIVE_RULE),
            ({"expires_at": "tomorrow"}, "expires_at", None),
            ({"thread": "main"}, "thread", "Must be a valid UUID."),
            (
                {"dependencies": "abc"},
                "dependencies",
                'Expected a list of items but got type "str".',
            ),
            (
                {"required_context": {"a": 1}},
                "required_context",
                'Expected a list of items but got type "dict".',
            ),
            ({"escalation_policy": []}, "escalation_policy", None),
            ({"rrule": 3}, "rrule", "Not a valid string."),
            (
                {"source_session": "s" * 201},
                "source_session",
                "Ensure this field has no more than 200 characters.",
            ),
            ({"owner": "me"}, "owner", None),
        ],
    )
    def test_wrong_types_and_unknown_fields(self, sim, extra, field, message):
        before = intentions_state()
        response = post(
            sim, "/api/v1/intentions", {"description": "x", "trigger_type": "manual", **extra}
        )
        if message is None:  # DRF's own long message: check the field is named
            assert response.status_code == 400
            assert list(response.json()["error"]["details"]) == [field]
            assert response.json()["error"]["message"].startswith(f"{field}: ")
        else:
            assert (response.status_code, response.json()) == (
                400,
                error("invalid", f"{field}: {message}", {field: [message]}),
            )
        assert intentions_state() == before

    @pytest.mark.parametrize(
        ("policy", "path", "message"),
        [
            ({"max_retries": "3"}, "max_retries", "A valid integer is required."),
            (
                {"max_retries": -1},
                "max_retries",
                "Ensure this value is greater than or equal to 0.",
            ),
            (
                {"backoff_seconds": 0},
                "backoff_seconds",
                "Ensure this value is greater than or equal to 1.",
            ),
            ({"tries": 3}, "tries", "unknown field; allowed: backoff_seconds, max_retries"),
        ],
    )
    def test_a_retry_policy_is_checked(self, sim, policy, path, message):
        before = intentions_state()
        refused(
            post(
                sim,
                "/api/v1/intentions",
                {"description": "x", "trigger_type": "manual", "retry_policy": policy},
            ),
            400,
            error(
                "invalid", f"retry_policy.{path}: {message}", {"retry_policy": {path: [message]}}
            ),
            before,
        )

    def test_an_unknown_dependency(self, sim):
        missing = str(uuid.uuid4())
        before = intentions_state()
        refused(
            post(
                sim,
                "/api/v1/intentions",
                {"description": "x", "trigger_type": "dependency", "dependencies": [missing]},
            ),
            422,
            error(
                "unknown_intention",
                f"dependency {missing} does not exist",
                {"dependencies": [missing]},
            ),
            before,
        )

    def test_another_agents_thread_and_intention_are_unknown(self, sim, client_b):
        their_thread = make_thread(client_b)
        theirs = make_intention(client_b)
        before = intentions_state()
        refused(
            post(
                sim,
                "/api/v1/intentions",
                {"description": "x", "trigger_type": "manual", "thread": their_thread},
            ),
            422,
            error(
                "unknown_thread",
                f"thread {their_thread} does not exist",
                {"thread": [their_thread]},
            ),
            before,
        )
        refused(
            post(
                sim,
                "/api/v1/intentions",
                {"description": "x", "trigger_type": "dependency", "dependencies": [theirs["id"]]},
            ),
            422,
            error(
                "unknown_intention",
                f"dependency {theirs['id']} does not exist",
                {"dependencies": [theirs["id"]]},
            ),
            before,
        )

    def test_a_body_that_is_not_an_object(self, sim):
        before = intentions_state()
        refused(
            post(sim, "/api/v1/intentions", [{"description": "x"}]),
            400,
            error("invalid", "send a JSON object", {"body": ["expected a JSON object"]}),
            before,
        )


# ------------------------------------------------------------------ reading intentions


class TestList:
    def test_newest_first_with_filters(self, client_a, client_b):
        thread_id = make_thread(client_a)
        manual = make_intention(client_a, description="manual", thread=thread_id)
        timed = make_intention(
            client_a, description="timed", trigger_type="time", due_at="2031-01-01T00:00:00Z"
        )
        fired = make_intention(client_a, description="fired", thread=thread_id)
        act(client_a, fired["id"], "fire")
        cancelled = make_intention(client_a, description="cancelled")
        act(client_a, cancelled["id"], "cancel")
        make_intention(client_b, description="theirs")

        def ids(**params):
            return [i["id"] for i in ok(client_a.get("/api/v1/intentions", params))["results"]]

        everything = ok(client_a.get("/api/v1/intentions"))
        assert everything == {
            "next": None,
            "previous": None,
            "results": [intention_body(i["id"]) for i in (cancelled, fired, timed, manual)],
        }
        assert ids(status="active") == [timed["id"], manual["id"]]
        assert ids(status="due,cancelled") == [cancelled["id"], fired["id"]]
        assert ids(trigger_type="time") == [timed["id"]]
        assert ids(trigger_type="manual", status="active") == [manual["id"]]
        assert ids(thread=thread_id) == [fired["id"], manual["id"]]
        first = ok(client_a.get("/api/v1/intentions", {"limit": 3}))
        assert [i["id"] for i in first["results"]] == [cancelled["id"], fired["id"], timed["id"]]
        assert [i["id"] for i in ok(client_a.get(first["next"]))["results"]] == [manual["id"]]

    def test_a_filter_by_another_agents_thread_is_404(self, client_a, client_b):
        theirs = make_thread(client_b)
        response = client_a.get("/api/v1/intentions", {"thread": theirs})
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", f"thread {theirs} not found"),
        )

    @pytest.mark.parametrize(
        ("params", "details"),
        [
            ({"status": "done"}, {"status": {"0": ['"done" is not a valid choice.']}}),
            (
                {"status": "active,later"},
                {"status": {"1": ['"later" is not a valid choice.']}},
            ),
            ({"trigger_type": "cron"}, {"trigger_type": {"0": ['"cron" is not a valid choice.']}}),
            # an empty part is a mistake, as in every comma-separated list
            ({"status": "due,"}, {"status": {"1": ['"" is not a valid choice.']}}),
            ({"thread": "main"}, {"thread": ["Must be a valid UUID."]}),
            (
                {"owner": "me"},
                {
                    "owner": [
                        "unknown field; allowed: cursor, escalated, limit, status, thread, trigger_type"
                    ]
                },
            ),
        ],
    )
    def test_bad_filters(self, client_a, params, details):
        response = client_a.get("/api/v1/intentions", params)
        assert response.status_code == 400
        assert response.json()["error"]["details"] == details

    def test_queries_do_not_grow_with_rows(self, client_a):
        def count() -> int:
            with CaptureQueriesContext(connection) as queries:
                ok(client_a.get("/api/v1/intentions"))
            return len(queries)

        first = make_intention(client_a)
        make_intention(client_a, trigger_type="dependency", dependencies=[first["id"]])
        few = count()
        for _ in range(15):
            make_intention(client_a, trigger_type="dependency", dependencies=[first["id"]])
        assert count() == few


class TestDetail:
    def test_timeline_of_transitions_and_firings(self, sim):
        recurring = make_intention(
            sim,
            description="stand-up",
            trigger_type="time",
            due_at=(T0 + minutes(10)).isoformat(),
            rrule="FREQ=DAILY;COUNT=2",
        )
        set_clock(sim, T0 + minutes(10))
        tick(sim)
        act(sim, recurring["id"], "start")
        act(sim, recurring["id"], "complete", {"evidence": {"notes": "done"}})
        detail = ok(sim.get(f"/api/v1/intentions/{recurring['id']}"))
        assert detail == detail_body(recurring["id"])
        assert [
            (t["from"], t["to"], t["occurrence"], t["reason"]) for t in detail["transitions"]
        ] == [
            (None, "active", 1, "created"),
            ("active", "due", 1, "fired by time"),
            ("due", "executing", 1, "started"),
            ("executing", "completed", 1, "completed"),
            ("completed", "active", 1, "next occurrence"),
        ]
        assert [(f["occurrence"], f["fired_at"], f["cause"]) for f in detail["firings"]] == [
            (1, iso(T0 + minutes(10)), "time")
        ]
        assert (detail["status"], detail["occurrence"], detail["due_at"]) == (
            "active",
            2,
            iso(T0 + minutes(10) + timedelta(days=1)),
        )

    def test_unknown_and_other_agents_intentions_are_404(self, client_a, client_b):
        theirs = make_intention(client_b)["id"]
        for intention_id in (theirs, str(uuid.uuid4())):
            response = client_a.get(f"/api/v1/intentions/{intention_id}")
            assert (response.status_code, response.json()) == (
                404,
                error("not_found", f"intention {intention_id} not found"),
            )


class TestDue:
    def test_what_fired_in_firing_order(self, sim):
        thread_id = make_thread(sim)
        early = make_intention(
            sim, description="early", trigger_type="time", due_at=(T0 + minutes(1)).isoformat()
        )
        late = make_intention(
            sim,
            description="late",
            trigger_type="time",
            due_at=(T0 + minutes(2)).isoformat(),
            thread=thread_id,
        )
        make_intention(
            sim, description="not yet", trigger_type="time", due_at=(T0 + minutes(9)).isoformat()
        )
        started = make_intention(sim, description="started")
        act(sim, started["id"], "fire")
        act(sim, started["id"], "start")
        assert ok(sim.get("/api/v1/intentions/due"))["results"] == []
        set_clock(sim, T0 + minutes(1))
        tick(sim)
        set_clock(sim, T0 + minutes(5))
        tick(sim)
        due = ok(sim.get("/api/v1/intentions/due"))
        assert due == {
            "next": None,
            "previous": None,
            "results": [intention_body(early["id"]), intention_body(late["id"])],
        }
        assert [i["last_fired_at"] for i in due["results"]] == [
            iso(T0 + minutes(1)),
            iso(T0 + minutes(5)),
        ]
        on_thread = ok(sim.get("/api/v1/intentions/due", {"thread": thread_id}))["results"]
        assert [i["id"] for i in on_thread] == [late["id"]]
        page = ok(sim.get("/api/v1/intentions/due", {"limit": 1}))
        assert [i["id"] for i in page["results"]] == [early["id"]]
        assert [i["id"] for i in ok(sim.get(page["next"]))["results"]] == [late["id"]]

    def test_bad_parameters(self, client_a, client_b):
        response = client_a.get("/api/v1/intentions/due", {"status": "due"})
        assert response.json() == error(
            "invalid",
            "status: unknown field; allowed: cursor, limit, thread",
            {"status": ["unknown field; allowed: cursor, limit, thread"]},
        )
        theirs = make_thread(client_b)
        response = client_a.get("/api/v1/intentions/due", {"thread": theirs})
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", f"thread {theirs} not found"),
        )


# --------------------------------------------------------------------- the lifecycle


class TestLifecycle:
    def test_fire_start_complete(self, client_a):
        intention = make_intention(client_a, description="call back")
        fired = act(client_a, intention["id"], "fire")
        assert fired == detail_body(intention["id"])
        assert (fired["status"], [f["cause"] for f in fired["firings"]]) == ("due", ["manual"])
        started = act(client_a, intention["id"], "start")
        assert (started, started["status"]) == (detail_body(intention["id"]), "executing")
        done = act(client_a, intention["id"], "complete", {"evidence": {"call": "ok", "n": 1}})
        assert done == detail_body(intention["id"])
        assert (done["status"], done["completion_evidence"]) == (
            "completed",
            {"call": "ok", "n": 1},
        )
        assert event_types(client_a.agent)[-4:] == [
            "intention.created",
            "intention.fired",
            "intention.executing",
            "intention.completed",
        ]

    def test_completed_and_cancelled_never_come_back(self, client_a):
        done = make_intention(client_a, description="done")
        act(client_a, done["id"], "complete")
        cancelled = make_intention(client_a, description="cancelled")
        act(client_a, cancelled["id"], "cancel", {"reason": "plans changed"})
        assert timeline(cancelled["id"])[-1] == ("active", "cancelled", 1, "plans changed")
        before = intentions_state()
        for intention, status in ((done, "completed"), (cancelled, "cancelled")):
            refused(
                post(client_a, f"/api/v1/intentions/{intention['id']}/complete", {}),
                409,
                error(
                    "invalid_transition",
                    f"intention is {status}; it cannot be completed",
                    {"status": status, "to": "completed"},
                ),
                before,
            )
            refused(
                post(client_a, f"/api/v1/intentions/{intention['id']}/fire", {}),
                409,
                error("not_armed", f"intention is {status}; only an armed one can fire"),
                before,
            )
            refused(
                post(client_a, f"/api/v1/intentions/{intention['id']}/start", {}),
                409,
                error(
                    "invalid_transition",
                    f"intention is {status}; it cannot become executing",
                    {"status": status, "to": "executing"},
                ),
                before,
            )
        refused(
            post(client_a, f"/api/v1/intentions/{done['id']}/cancel", {}),
            409,
            error(
                "invalid_transition",
                "intention is completed; it cannot become cancelled",
                {"status": "completed", "to": "cancelled"},
            ),
            before,
        )
        # cancelling a cancelled intention changes nothing
        again = post(client_a, f"/api/v1/intentions/{cancelled['id']}/cancel", {})
        assert (again.status_code, again.json()) == (200, detail_body(cancelled["id"]))
        assert intentions_state() == before

    def test_start_needs_a_due_intention(self, client_a):
        intention = make_intention(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/intentions/{intention['id']}/start", {}),
            409,
            error(
                "invalid_transition",
                "intention is active; it cannot become executing",
                {"status": "active", "to": "executing"},
            ),
            before,
        )

    def test_skip_a_recurring_occurrence(self, sim):
        recurring = make_intention(
            sim,
            trigger_type="time",
            due_at=(T0 + minutes(10)).isoformat(),
            rrule="FREQ=HOURLY;COUNT=2",
        )
        skipped = act(sim, recurring["id"], "skip", {"reason": "holiday"})
        assert skipped == detail_body(recurring["id"])
        assert (skipped["status"], skipped["occurrence"], skipped["due_at"]) == (
            "active",
            2,
            iso(T0 + minutes(70)),
        )
        assert (
            Event.objects.filter(agent=sim.agent, event_type="intention.completed")
            .get()
            .payload["reason"]
            == "skipped"
        )
        last = act(sim, recurring["id"], "skip")
        assert (last["status"], last["completion_evidence"]) == (
            "completed",
            {"skipped": True, "reason": ""},
        )

    def test_a_one_shot_cannot_skip(self, client_a):
        intention = make_intention(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/intentions/{intention['id']}/skip", {"reason": "x"}),
            409,
            error(
                "not_recurring",
                "only a recurring intention can skip an occurrence; cancel a one-shot",
            ),
            before,
        )

    def test_fail_retries_within_the_policy(self, sim):
        intention = make_intention(
            sim,
            trigger_type="time",
            due_at=T0.isoformat(),
            retry_policy={"max_retries": 1, "backoff_seconds": 60},
            escalation_policy={"after_failures": 5, "to_session": "oncall"},
        )
        tick(sim)
        retried = act(sim, intention["id"], "fail", {"reason": "timeout"})
        assert retried == detail_body(intention["id"])
        assert (retried["status"], retried["occurrence"], retried["due_at"]) == (
            "active",
            2,
            iso(T0 + minutes(1)),
        )
        assert retried["transitions"][-1]["reason"] == "failed: timeout; retry 1"
        set_clock(sim, T0 + minutes(1))
        assert [f["intention_id"] for f in tick(sim)["fired"]] == [intention["id"]]

    def test_fail_escalates_once_the_retries_are_spent(self, sim):
        intention = make_intention(
            sim,
            trigger_type="time",
            due_at=T0.isoformat(),
            retry_policy={"max_retries": 1, "backoff_seconds": 60},
        )
        tick(sim)
        act(sim, intention["id"], "fail", {"reason": "timeout"})
        set_clock(sim, T0 + minutes(1))
        tick(sim)
        act(sim, intention["id"], "start")
        escalated = act(sim, intention["id"], "fail", {"reason": "timeout again"})
        assert (escalated["status"], escalated["transitions"][-1]["reason"]) == (
            "due",
            "failed: timeout again; escalate",
        )

    def test_fail_without_retries_escalates(self, client_a):
        intention = make_intention(
            client_a, escalation_policy={"after_failures": 5, "to_session": "oncall"}
        )
        act(client_a, intention["id"], "fire")
        act(client_a, intention["id"], "start")
        escalated = act(client_a, intention["id"], "fail", {"reason": "no answer"})
        assert escalated == detail_body(intention["id"])
        assert (escalated["status"], escalated["transitions"][-1]["reason"]) == (
            "due",
            "failed: no answer; escalate",
        )
        still_due = act(client_a, intention["id"], "fail", {"reason": "still nothing"})
        assert still_due["status"] == "due"
        event = Event.objects.filter(agent=client_a.agent).latest("seq")
        assert (event.event_type, event.payload) == (
            "intention.failed",
            {
                "intention_id": intention["id"],
                "reason": "still nothing",
                "escalate": {"after_failures": 5, "to_session": "oncall"},
                "attempts": 2,
                "at": event.payload["at"],  # the wall clock: this agent has no simulated one
            },
        )

    def test_fail_needs_a_reason_and_a_due_intention(self, client_a):
        intention = make_intention(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/intentions/{intention['id']}/fail", {}),
            400,
            error(
                "invalid",
                "reason: This field is required.",
                {"reason": ["This field is required."]},
            ),
            before,
        )
        refused(
            post(client_a, f"/api/v1/intentions/{intention['id']}/fail", {"reason": "x"}),
            409,
            error(
                "invalid_transition", "intention is active; only a due or executing one can fail"
            ),
            before,
        )

    def test_expire(self, client_a):
        intention = make_intention(client_a)
        expired = act(client_a, intention["id"], "expire")
        assert (expired, expired["status"]) == (detail_body(intention["id"]), "expired")
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/intentions/{intention['id']}/expire", {}),
            409,
            error(
                "invalid_transition",
                "intention is expired; it cannot become expired",
                {"status": "expired", "to": "expired"},
            ),
            before,
        )

    def test_fire_exactly_once(self, client_a):
        intention = make_intention(client_a)
        act(client_a, intention["id"], "fire")
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/intentions/{intention['id']}/fire", {}),
            409,
            error("not_armed", "intention is due; only an armed one can fire"),
            before,
        )
        assert Firing.objects.filter(intention_id=intention["id"]).count() == 1

    @pytest.mark.parametrize(
        ("action", "body", "field", "message"),
        [
            ("complete", {"proof": 1}, "proof", "unknown field; allowed: evidence, occurrence"),
            ("cancel", {"reason": 5}, "reason", "Not a valid string."),
            (
                "cancel",
                {"reason": "r" * 251},
                "reason",
                "Ensure this field has no more than 250 characters.",
            ),
            (
                "fail",
                {"reason": "r" * 251},
                "reason",
                "Ensure this field has no more than 250 characters.",
            ),
            ("skip", {"why": "x"}, "why", "unknown field; allowed: occurrence, reason"),
            ("start", {"now": True}, "now", "unknown field; allowed: "),
            ("fire", {"at": "now"}, "at", "unknown field; allowed: "),
            ("expire", {"x": 1}, "x", "unknown field; allowed: "),
        ],
    )
    def test_bad_bodies(self, client_a, action, body, field, message):
        intention = make_intention(client_a)
        before = intentions_state()
        refused(
            post(client_a, f"/api/v1/intentions/{intention['id']}/{action}", body),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )

    def test_an_empty_body_is_fine_for_actions_without_fields(self, client_a):
        intention = make_intention(client_a)
        response = client_a.post(f"/api/v1/intentions/{intention['id']}/fire")
        assert (response.status_code, response.json()["status"]) == (200, "due")


class TestDependencies:
    def test_replace_and_release(self, client_a):
        first = make_intention(client_a, description="first")
        second = make_intention(client_a, description="second")
        waiting = make_intention(
            client_a, description="waiting", trigger_type="dependency", dependencies=[first["id"]]
        )
        url = f"/api/v1/intentions/{waiting['id']}/dependencies"
        replaced = ok(put(client_a, url, {"dependencies": [second["id"], first["id"]]}))
        assert replaced == detail_body(waiting["id"])
        assert (replaced["status"], replaced["dependencies"]) == (
            "blocked",
            [second["id"], first["id"]],
        )
        assert Event.objects.filter(agent=client_a.agent).latest("seq").payload == {
            "intention_id": waiting["id"],
            "dependencies": [second["id"], first["id"]],
        }
        act(client_a, first["id"], "complete")
        assert intention_body(waiting["id"])["status"] == "blocked"
        act(client_a, second["id"], "complete")
        released = ok(client_a.get(f"/api/v1/intentions/{waiting['id']}"))
        assert (released["status"], [f["cause"] for f in released["firings"]]) == (
            "due",
            ["dependency"],
        )

    def test_cancelling_a_dependency_cancels_its_blocked_dependent_and_says_why(self, client_a):
        first = make_intention(client_a, description="first")
        waiting = make_intention(
            client_a, description="waiting", trigger_type="dependency", dependencies=[first["id"]]
        )

        act(client_a, first["id"], "cancel", {"reason": "plans changed"})

        shown = ok(client_a.get(f"/api/v1/intentions/{waiting['id']}"))
        assert shown == detail_body(waiting["id"])
        assert (shown["status"], shown["transitions"][-1]["reason"], shown["firings"]) == (
            "cancelled",
            f"dependency {first['id']} cancelled",
            [],
        )
        # Waiting on it from now on would be waiting forever.
        before = intentions_state()
        refused(
            post(
                client_a,
                "/api/v1/intentions",
                {
                    "description": "late",
                    "trigger_type": "dependency",
                    "dependencies": [first["id"]],
                },
            ),
            422,
            error(
                "dependency_ended",
                f"dependency {first['id']} is cancelled and was never completed: "
                "this intention could never have every dependency met",
                {"dependencies": [first["id"]]},
            ),
            before,
        )

    def test_a_cycle_is_refused(self, client_a):
        a = make_intention(client_a, description="a")
        b = make_intention(
            client_a, description="b", trigger_type="dependency", dependencies=[a["id"]]
        )
        c = make_intention(
            client_a, description="c", trigger_type="dependency", dependencies=[b["id"]]
        )
        before = intentions_state()
        for dependencies in ([c["id"]], [a["id"]], [b["id"], c["id"]]):
            refused(
                put(
                    client_a,
                    f"/api/v1/intentions/{a['id']}/dependencies",
                    {"dependencies": dependencies},
                ),
                422,
                error(
                    "dependency_cycle",
                    "these dependencies would make a cycle: an intention would wait for itself",
                    {"dependencies": dependencies},
                ),
                before,
            )

    def test_unknown_dependencies_and_finished_intentions(self, client_a, client_b):
        intention = make_intention(client_a)
        theirs = make_intention(client_b)["id"]
        before = intentions_state()
        refused(
            put(
                client_a,
                f"/api/v1/intentions/{intention['id']}/dependencies",
                {"dependencies": [theirs]},
            ),
            422,
            error(
                "unknown_intention",
                f"dependency {theirs} does not exist",
                {"dependencies": [theirs]},
            ),
            before,
        )
        act(client_a, intention["id"], "complete")
        before = intentions_state()
        refused(
            put(
                client_a, f"/api/v1/intentions/{intention['id']}/dependencies", {"dependencies": []}
            ),
            409,
            error(
                "not_armed",
                "intention is completed; only a waiting one can change what it waits for",
            ),
            before,
        )

    @pytest.mark.parametrize(
        ("body", "details"),
        [
            ({}, {"dependencies": ["This field is required."]}),
            ({"dependencies": ["x"]}, {"dependencies": {"0": ["Must be a valid UUID."]}}),
            ({"dependencies": None}, {"dependencies": ["This field may not be null."]}),
            (
                {"dependencies": [], "mode": "add"},
                {"mode": ["unknown field; allowed: dependencies"]},
            ),
        ],
    )
    def test_bad_input(self, client_a, body, details):
        intention = make_intention(client_a)
        before = intentions_state()
        response = put(client_a, f"/api/v1/intentions/{intention['id']}/dependencies", body)
        assert (response.status_code, response.json()["error"]["details"]) == (400, details)
        assert intentions_state() == before


# ---------------------------------------------------------- the battery's clock, tick


class TestClock:
    def test_a_real_agent_runs_on_the_wall_clock(self, client_a):
        before = intentions_state()
        for method in (put, lambda c, url, body: c.delete(url)):
            refused(
                method(client_a, "/api/v1/clock", {"now": T0.isoformat()}),
                403,
                error(
                    "battery_only",
                    "a simulated clock is only for the Memory Battery's throwaway agents; "
                    "agent 'agent-a' runs on the wall clock and its engine runs on celery-beat",
                ),
                before,
            )
        lower = datetime.now(UTC)
        body = ok(client_a.get("/api/v1/clock"))
        assert body["simulated"] is False
        assert lower <= datetime.fromisoformat(body["now"]) <= datetime.now(UTC)

    def test_set_read_and_clear_a_simulated_clock(self):
        sim = battery_client(now=None)
        assert ok(sim.get("/api/v1/clock"))["simulated"] is False
        assert set_clock(sim, T0) == {"now": iso(T0), "simulated": True}
        assert AgentClock.objects.get(agent=sim.agent).now == T0
        assert ok(sim.get("/api/v1/clock")) == {"now": iso(T0), "simulated": True}
        moved = ok(put(sim, "/api/v1/clock", {"now": "2030-01-07T11:30:00+02:00"}))
        assert moved == {"now": iso(T0 + minutes(30)), "simulated": True}
        cleared = sim.delete("/api/v1/clock")
        assert (cleared.status_code, cleared.json()["simulated"]) == (200, False)
        assert not AgentClock.objects.filter(agent=sim.agent).exists()

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "now", "This field is required."),
            ({"now": "2030-01-07T09:00:00"}, "now", NAIVE_RULE),
            ({"now": T0.isoformat(), "speed": 2}, "speed", "unknown field; allowed: now"),
        ],
    )
    def test_bad_input(self, sim, body, field, message):
        before = intentions_state()
        refused(
            put(sim, "/api/v1/clock", body),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )


class TestTick:
    def test_time_fires_exactly_once_at_its_moment(self, sim):
        intention = make_intention(sim, trigger_type="time", due_at=(T0 + minutes(5)).isoformat())
        assert tick(sim) == {"now": iso(T0), "fired": [], "rehearsed": 0, "escalated": []}
        assert intention_body(intention["id"])["status"] == "active"
        set_clock(sim, T0 + minutes(5))
        firing = Firing.objects.filter(intention_id=intention["id"])
        result = tick(sim)
        assert result == {
            "now": iso(T0 + minutes(5)),
            "fired": [
                {
                    "intention_id": intention["id"],
                    "occurrence": 1,
                    "firing_id": str(firing.get().pk),
                    "cause": "time",
                }
            ],
            "rehearsed": 0,
            "escalated": [],
        }
        set_clock(sim, T0 + minutes(50))
        assert tick(sim)["fired"] == []
        assert firing.count() == 1

    def test_events_among_distractors(self, sim):
        intention = make_intention(
            sim,
            trigger_type="event",
            trigger_spec={
                "event_type": "deploy.*",
                "conditions": [{"field": "payload.env", "op": "eq", "value": "prod"}],
            },
        )
        for event in (
            {"event_type": "deploy.finished", "payload": {"env": "staging"}},
            {"event_type": "build.finished", "payload": {"env": "prod"}},
        ):
            assert post(sim, "/api/v1/events", event).status_code == 201
        assert tick(sim)["fired"] == []
        cue = post(
            sim, "/api/v1/events", {"event_type": "deploy.finished", "payload": {"env": "prod"}}
        )
        fired = tick(sim)["fired"]
        assert [(f["intention_id"], f["cause"]) for f in fired] == [(intention["id"], "event")]
        detail = ok(sim.get(f"/api/v1/intentions/{intention['id']}"))
        assert detail["firings"][0]["cause_event_id"] == cue.json()["id"]
        post(sim, "/api/v1/events", {"event_type": "deploy.finished", "payload": {"env": "prod"}})
        assert tick(sim)["fired"] == []

    def test_a_state_condition_over_current_facts(self, sim):
        intention = make_intention(
            sim,
            trigger_type="state",
            trigger_spec={"subject": "build", "predicate": "status", "op": "eq", "value": "green"},
        )
        assert tick(sim)["fired"] == []
        facts = {"subject": "build", "predicate": "status", "valid_from": "2030-01-01T00:00:00Z"}
        post(sim, "/api/v1/facts", {**facts, "value": "red"})
        assert tick(sim)["fired"] == []
        post(
            sim, "/api/v1/facts", {**facts, "value": "green", "valid_from": "2030-01-07T08:00:00Z"}
        )
        fired = tick(sim)["fired"]
        assert [(f["intention_id"], f["cause"]) for f in fired] == [(intention["id"], "state")]

    def test_rehearsal_resurfaces_long_pending_intentions(self, sim):
        thread_id = make_thread(sim)
        intention = make_intention(sim, thread=thread_id)
        set_clock(sim, T0 + timedelta(hours=25))
        assert tick(sim)["rehearsed"] == 1
        pending = ok(sim.get(f"/api/v1/threads/{thread_id}"))["pending"]
        assert [(p["intention_id"], p["kind"], p["added_at"]) for p in pending] == [
            (intention["id"], "rehearsed", iso(T0 + timedelta(hours=25)))
        ]
        assert intention_body(intention["id"])["last_rehearsed_at"] == iso(T0 + timedelta(hours=25))
        assert tick(sim)["rehearsed"] == 0

    def test_only_for_battery_agents(self, client_a):
        make_intention(client_a, trigger_type="time", due_at="2020-01-01T00:00:00Z")
        before = intentions_state()
        refused(
            post(client_a, "/api/v1/intentions/tick", {}),
            403,
            error(
                "battery_only",
                "running the engine by hand is only for the Memory Battery's throwaway "
                "agents; agent 'agent-a' runs on the wall clock and its engine runs on "
                "celery-beat",
            ),
            before,
        )

    def test_bad_body(self, sim):
        before = intentions_state()
        refused(
            post(sim, "/api/v1/intentions/tick", {"now": T0.isoformat()}),
            400,
            error(
                "invalid", "now: unknown field; allowed: ", {"now": ["unknown field; allowed: "]}
            ),
            before,
        )


# ------------------------------------------------------------------------- webhook


class TestWebhook:
    SECRET = "s3cret-s3cret-s3cret"

    def test_needs_the_admin_scope(self, client_a):
        before = intentions_state()
        response = put(
            client_a, "/api/v1/webhook", {"url": "https://x.test/h", "secret": self.SECRET}
        )
        assert (response.status_code, response.json()["error"]["code"]) == (
            403,
            "permission_denied",
        )
        assert client_a.get("/api/v1/webhook").status_code == 403
        assert intentions_state() == before

    def test_set_read_replace_delete(self, client_a):
        admin = admin_key_for(client_a)
        response = put(
            admin,
            "/api/v1/webhook",
            {"url": "https://hooks.test/piper", "secret": self.SECRET},
            HTTP_IDEMPOTENCY_KEY="hook-1",
        )
        hook = Webhook.objects.get(agent=client_a.agent)
        assert ok(response) == {
            "url": "https://hooks.test/piper",
            "is_active": True,
            "created_at": iso(hook.created_at),
        }
        assert hook.secret == self.SECRET
        record = IdempotencyRecord.objects.get(agent=client_a.agent, key="hook-1")
        assert self.SECRET not in json.dumps(record.response_body)
        assert ok(admin.get("/api/v1/webhook")) == response.json()

        put(
            admin,
            "/api/v1/webhook",
            {"url": "https://hooks.test/v2", "secret": "another-secret-16"},
        )
        assert Webhook.objects.get(agent=client_a.agent).url == "https://hooks.test/v2"

        intention = make_intention(client_a, description="ring")
        act(client_a, intention["id"], "fire")
        firing = Firing.objects.get(intention_id=intention["id"])
        message = OutboxMessage.objects.get(firing=firing)
        assert (message.status, message.payload["intention_id"], message.payload["type"]) == (
            "pending",
            intention["id"],
            "intention.fired",
        )

        deleted = admin.delete("/api/v1/webhook")
        assert (deleted.status_code, deleted.content) == (204, b"")
        assert not Webhook.objects.filter(agent=client_a.agent).exists()
        for response in (admin.delete("/api/v1/webhook"), admin.get("/api/v1/webhook")):
            assert (response.status_code, response.json()) == (
                404,
                error("not_found", "no webhook is set for this agent"),
            )

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({"secret": SECRET}, "url", "This field is required."),
            ({"url": "ftp://hooks.test/x", "secret": SECRET}, "url", "Enter an http(s) URL."),
            ({"url": "hooks.test", "secret": SECRET}, "url", "Enter an http(s) URL."),
            ({"url": "https://h.test/x"}, "secret", "This field is required."),
            (
                {"url": "https://h.test/x", "secret": "short"},
                "secret",
                "Ensure this field has at least 16 characters.",
            ),
            (
                {"url": "https://h.test/x", "secret": 1234567890123456},
                "secret",
                "Not a valid string.",
            ),
            (
                {"url": "https://h.test/x", "secret": SECRET, "events": ["fired"]},
                "events",
                "unknown field; allowed: secret, url",
            ),
        ],
    )
    def test_bad_input(self, client_a, body, field, message):
        admin = admin_key_for(client_a)
        before = intentions_state()
        refused(
            put(admin, "/api/v1/webhook", body),
            400,
            error("invalid", f"{field}: {message}", {field: [message]}),
            before,
        )


# --------------------------------------------------------------- tenancy and scopes

THREAD_ENDPOINTS = [
    ("get", "/api/v1/threads/{thread}", None),
    ("get", "/api/v1/threads/{thread}/state", None),
    ("put", "/api/v1/threads/{thread}/state", {"state": {"goal": "steal"}, "based_on": 0}),
    ("get", "/api/v1/threads/{thread}/versions", None),
    ("post", "/api/v1/threads/{thread}/handover", {"to_session": "evil"}),
    ("post", "/api/v1/threads/{thread}/resume", {"session_id": "evil"}),
    ("post", "/api/v1/threads/{thread}/acknowledge", {"session_id": "evil"}),
    ("post", "/api/v1/threads/{thread}/pending/clear", {"ids": [1]}),
]
INTENTION_ENDPOINTS = [
    ("get", "/api/v1/intentions/{intention}", None),
    ("post", "/api/v1/intentions/{intention}/start", {}),
    ("post", "/api/v1/intentions/{intention}/complete", {"evidence": "mine"}),
    ("post", "/api/v1/intentions/{intention}/skip", {}),
    ("post", "/api/v1/intentions/{intention}/fail", {"reason": "x"}),
    ("post", "/api/v1/intentions/{intention}/cancel", {}),
    ("post", "/api/v1/intentions/{intention}/expire", {}),
    ("post", "/api/v1/intentions/{intention}/fire", {}),
    ("put", "/api/v1/intentions/{intention}/dependencies", {"dependencies": []}),
]


@pytest.fixture
def theirs(client_b) -> dict:
    """Agent B's thread (with a version and a pending item) and a due intention on it."""
    thread_id = make_thread(client_b)
    write_state(client_b, thread_id, {"goal": "b's secret"}, 0)
    intention = make_intention(client_b, thread=thread_id, description="b's plan")
    act(client_b, intention["id"], "fire")
    return {"thread": thread_id, "intention": intention["id"]}


class TestTenancy:
    @pytest.mark.parametrize(("method", "path", "body"), THREAD_ENDPOINTS + INTENTION_ENDPOINTS)
    def test_another_agents_objects_are_not_found(self, client_a, theirs, method, path, body):
        url = path.format(**theirs)
        kind = "thread" if "{thread}" in path else "intention"
        before = intentions_state()
        call = getattr(client_a, method)
        response = call(url, body, format="json") if body is not None else call(url)
        refused(
            response,
            404,
            error("not_found", f"{kind} {theirs[kind]} not found"),
            before,
        )

    def test_lists_show_only_the_agents_own(self, client_a, theirs):
        for url in ("/api/v1/threads", "/api/v1/intentions", "/api/v1/intentions/due"):
            assert ok(client_a.get(url))["results"] == [], url
        make_thread(client_a, "main")  # the same key is another thread
        own = ok(client_a.get("/api/v1/threads"))["results"]
        assert [t["id"] for t in own] != [theirs["thread"]] and len(own) == 1

    def test_pending_items_of_another_agent_cannot_be_cleared(self, client_a, theirs):
        mine = make_thread(client_a)
        item = PendingItem.objects.get(intention_id=theirs["intention"])
        before = intentions_state()
        response = post(client_a, f"/api/v1/threads/{mine}/pending/clear", {"ids": [item.pk]})
        assert ok(response) == {"cleared": 0, "pending": []}
        assert intentions_state() == before


class TestScopes:
    WRITES = [
        ("post", "/api/v1/threads", {"key": "k"}),
        ("post", "/api/v1/intentions", {"description": "x", "trigger_type": "manual"}),
        ("post", "/api/v1/intentions/tick", {}),
        ("put", "/api/v1/clock", {"now": "2030-01-01T00:00:00Z"}),
    ]

    @pytest.mark.parametrize(("method", "path", "body"), WRITES)
    def test_a_read_key_cannot_write(self, read_only_client, method, path, body):
        before = intentions_state()
        response = getattr(read_only_client, method)(path, body, format="json")
        assert (response.status_code, response.json()["error"]["code"]) == (
            403,
            "permission_denied",
        )
        assert intentions_state() == before

    def test_a_read_key_reads(self, read_only_client):
        for url in (
            "/api/v1/threads",
            "/api/v1/intentions",
            "/api/v1/intentions/due",
            "/api/v1/clock",
        ):
            assert read_only_client.get(url).status_code == 200, url

    def test_no_key_no_access(self, anonymous_client):
        response = anonymous_client.get("/api/v1/intentions")
        assert (response.status_code, response.json()["error"]["code"]) == (
            401,
            "not_authenticated",
        )


def test_every_endpoint_is_in_the_schema(anonymous_client):
    schema = anonymous_client.get("/api/schema/", {"format": "json"}).json()
    operations = {
        (path, method)
        for path, item in schema["paths"].items()
        for method in item
        if path.startswith("/api/v1/threads")
        or path.startswith("/api/v1/intentions")
        or path in ("/api/v1/webhook", "/api/v1/clock")
    }
    assert operations == {
        ("/api/v1/threads", "get"),
        ("/api/v1/threads", "post"),
        ("/api/v1/threads/{thread_id}", "get"),
        ("/api/v1/threads/{thread_id}/state", "get"),
        ("/api/v1/threads/{thread_id}/state", "put"),
        ("/api/v1/threads/{thread_id}/versions", "get"),
        ("/api/v1/threads/{thread_id}/handover", "post"),
        ("/api/v1/threads/{thread_id}/resume", "post"),
        ("/api/v1/threads/{thread_id}/acknowledge", "post"),
        ("/api/v1/threads/{thread_id}/pending/clear", "post"),
        ("/api/v1/intentions", "get"),
        ("/api/v1/intentions", "post"),
        ("/api/v1/intentions/due", "get"),
        ("/api/v1/intentions/tick", "post"),
        ("/api/v1/intentions/{intention_id}", "get"),
        ("/api/v1/intentions/{intention_id}/start", "post"),
        ("/api/v1/intentions/{intention_id}/complete", "post"),
        ("/api/v1/intentions/{intention_id}/skip", "post"),
        ("/api/v1/intentions/{intention_id}/fail", "post"),
        ("/api/v1/intentions/{intention_id}/cancel", "post"),
        ("/api/v1/intentions/{intention_id}/expire", "post"),
        ("/api/v1/intentions/{intention_id}/fire", "post"),
        ("/api/v1/intentions/{intention_id}/dependencies", "put"),
        ("/api/v1/intentions/{intention_id}/escalation-policy", "put"),
        ("/api/v1/webhook", "get"),
        ("/api/v1/webhook", "put"),
        ("/api/v1/webhook", "delete"),
        ("/api/v1/clock", "get"),
        ("/api/v1/clock", "put"),
        ("/api/v1/clock", "delete"),
    }
    battery = [
        schema["paths"][path][method]["description"]
        for path, method in (
            ("/api/v1/intentions/tick", "post"),
            ("/api/v1/clock", "put"),
            ("/api/v1/clock", "delete"),
        )
    ]
    assert all("This endpoint exists for the Memory Battery" in text for text in battery)
    statuses = schema["components"]["schemas"]["IntentionStatusEnum"]["enum"]
    assert statuses == [
        "active",
        "blocked",
        "due",
        "executing",
        "completed",
        "cancelled",
        "expired",
    ]
    resume = schema["components"]["schemas"]["ResumeOutput"]["properties"]
    assert list(resume)[:5] == ["checkpoint", "intentions", "recheck", "failed_branches", "pending"]


# ------------------------------------------- problems in the services, seen from here


class TestEngineProblems:
    def test_a_time_trigger_with_only_not_before_fires(self, sim):
        intention = make_intention(
            sim, trigger_type="time", not_before=(T0 + minutes(5)).isoformat()
        )
        set_clock(sim, T0 + minutes(10))
        assert [f["intention_id"] for f in tick(sim)["fired"]] == [intention["id"]]

    def test_a_time_trigger_with_dependencies_waits_for_its_time(self, sim):
        first = make_intention(sim, description="approve")
        later = make_intention(
            sim,
            description="deploy tomorrow",
            trigger_type="time",
            due_at=(T0 + timedelta(days=1)).isoformat(),
            dependencies=[first["id"]],
        )
        act(sim, first["id"], "complete")
        assert intention_body(later["id"])["status"] == "active"

    def test_a_time_trigger_with_finished_dependencies_waits_for_its_time(self, sim):
        first = make_intention(sim, description="approve")
        act(sim, first["id"], "complete")
        later = make_intention(
            sim,
            description="deploy tomorrow",
            trigger_type="time",
            due_at=(T0 + timedelta(days=1)).isoformat(),
            dependencies=[first["id"]],
        )
        assert later["status"] == "active"

    def test_completing_an_occurrence_releases_what_waits_for_it(self, sim):
        standup = make_intention(
            sim,
            description="stand-up",
            trigger_type="time",
            due_at=(T0 + minutes(10)).isoformat(),
            rrule="FREQ=DAILY",
        )
        notes = make_intention(
            sim, description="send notes", trigger_type="dependency", dependencies=[standup["id"]]
        )
        act(sim, standup["id"], "complete")
        assert intention_body(notes["id"])["status"] == "due"

    def test_expiry_by_time_is_in_the_ledger(self, sim):
        intention = make_intention(
            sim,
            trigger_type="time",
            due_at=(T0 + minutes(30)).isoformat(),
            expires_at=(T0 + minutes(40)).isoformat(),
        )
        set_clock(sim, T0 + minutes(40))
        tick(sim)
        detail = ok(sim.get(f"/api/v1/intentions/{intention['id']}"))
        assert detail["status"] == "expired"
        assert detail["transitions"][-1]["event_id"] is not None
        assert "intention.expired" in event_types(sim.agent)


# --------------------------------------------------------------------- concurrency


def race(calls) -> list:
    """Run the calls at once, each in its own thread (and database connection)."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        try:
            barrier.wait()
            return call()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.mark.django_db(transaction=True)
class TestConcurrency:
    def test_racing_writes_from_the_same_version_one_wins(self):
        client = battery_client("racer", now=None)
        thread_id = make_thread(client)
        url = f"/api/v1/threads/{thread_id}/state"
        responses = race(
            [
                (lambda n=n: put(client, url, {"state": {"goal": f"g{n}"}, "based_on": 0}))
                for n in range(6)
            ]
        )
        statuses = sorted(r.status_code for r in responses)
        assert statuses == [201, 409, 409, 409, 409, 409]
        for response in responses:
            if response.status_code == 409:
                assert response.json()["error"]["code"] == "stale_version"
                assert response.json()["error"]["details"] == {
                    "current_version": 1,
                    "based_on": 0,
                }
        assert WorkingState.objects.filter(thread_id=thread_id).count() == 1
        assert (
            Event.objects.filter(agent=client.agent, event_type="working_state.written").count()
            == 1
        )

    def test_racing_fires_fire_once(self):
        client = battery_client("racer", now=None)
        intention = make_intention(client)
        url = f"/api/v1/intentions/{intention['id']}/fire"
        responses = race([(lambda: post(client, url, {})) for _ in range(6)])
        assert {r.status_code for r in responses} <= {200, 409}
        assert all(r.json()["status"] == "due" for r in responses if r.status_code == 200)
        assert Firing.objects.filter(intention_id=intention["id"]).count() == 1
        assert Event.objects.filter(agent=client.agent, event_type="intention.fired").count() == 1

    def test_racing_thread_creation_makes_one_thread(self):
        client = battery_client("racer", now=None)
        responses = race(
            [(lambda: post(client, "/api/v1/threads", {"key": "main"})) for _ in range(6)]
        )
        assert sorted(r.status_code for r in responses) == [200, 200, 200, 200, 200, 201]
        assert len({r.json()["id"] for r in responses}) == 1
        assert Thread.objects.filter(agent=client.agent).count() == 1


class TestServiceGuards:
    """The API refuses these (reason ≤ 250 characters, a typed retry_policy); the services
    do not, so the admin, commands and tasks can still reach the database with them."""

    def test_a_long_cancel_reason_is_bad_input(self, client_a):
        intention = make_intention(client_a)
        with pytest.raises(InvalidInput):
            lifecycle.intention_cancel(
                agent=client_a.agent, intention_id=uuid.UUID(intention["id"]), reason="r" * 301
            )

    def test_a_retry_policy_of_the_wrong_shape_is_refused_when_made(self, client_a):
        with pytest.raises(InvalidInput):
            lifecycle.intention_create(
                agent=client_a.agent,
                data=lifecycle.IntentionInput(
                    description="x", trigger_type="manual", retry_policy={"max_retries": "x"}
                ),
            )


@pytest.mark.django_db(transaction=True)
def test_a_tick_does_not_deadlock_with_a_worker_firing_for_the_same_agent():
    """The tick's first firing must not hold the agent's chain head while it
    locks the next intention: a worker holding that intention's row and waiting
    for the chain head (the engine's lock order) would deadlock with it."""
    import threading

    from django.db import connection, transaction

    from intentions.models import Firing, Intention
    from ledger.services import event_append

    client = battery_client("tick-vs-worker")
    make_intention(client, trigger_type="time", due_at=T0.isoformat(), description="first")
    watched = make_intention(
        client,
        trigger_type="state",
        trigger_spec={"subject": "web", "predicate": "status", "op": "exists"},
        description="second",
    )
    post(client, "/api/v1/facts", {"subject": "web", "predicate": "status", "value": "down"})
    locked, release = threading.Event(), threading.Event()
    failures = []

    def worker():  # what fire() does: the intention's row, then the chain head
        try:
            with transaction.atomic():
                Intention.objects.select_for_update(no_key=True).get(pk=watched["id"])
                locked.set()
                release.wait(10)
                event_append(agent=client.agent, event_type="worker.note")
        except Exception as exc:  # a deadlock victim lands here
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    assert locked.wait(10)
    # The tick fires "first" (taking the chain head), then waits for "second"'s
    # row; the worker is released only after the tick has had time to block.
    threading.Timer(0.5, release.set).start()
    body = tick(client)
    thread.join(10)

    assert failures == []
    assert "time" in [f["cause"] for f in body["fired"]]
    # The state intention fired exactly once — in the tick, or by a worker that
    # took the fact commit's re-check first.
    assert Firing.objects.filter(intention_id=watched["id"]).count() == 1
