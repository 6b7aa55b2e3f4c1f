"""The ledger API: POST/GET /api/v1/events, /api/v1/sources."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from ledger.hashing import event_hash, payload_hash
from ledger.models import GENESIS_HASH, Event, Source
from ledger.selectors import chain_verify
from ledger.services import EventDraft, event_redact, events_append
from ledger.tests.helpers import error, ledger_state
from piper.canonical import sha256_hex

EVENT_FIELDS = (
    "actor, authority, confidence, correction_of, event_type, occurred_at, parent_event_id, payload, "
    "privacy_class, retention_class, session_id, source_ref, source_type"
)
QUERY_FIELDS = (
    "actor, cursor, event_type, limit, occurred_after, occurred_before, ordering, recorded_after, "
    "recorded_before, session_id"
)
EVENT_TYPE_RULE = "use lower-case words joined by '.', ':', '/' or '-', e.g. 'tool.called'"
DATETIME_RULE = (
    "Datetime has wrong format. Use one of these formats instead: "
    "YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z]."
)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def expected_body(event: Event) -> dict:
    """The API's representation of a stored event, built from the row itself."""
    return {
        "id": str(event.pk),
        "seq": event.seq,
        "event_type": event.event_type,
        "occurred_at": iso(event.occurred_at),
        "recorded_at": iso(event.recorded_at),
        "session_id": event.session_id,
        "actor": event.actor,
        "source_type": event.source_type,
        "source_ref": event.source_ref,
        "authority": event.authority,
        "confidence": event.confidence,
        "payload": event.payload,
        "payload_hash": event.payload_hash,
        "payload_salt": event.payload_salt,
        "hash_version": event.hash_version,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
        "parent_event_id": str(event.parent_event_id) if event.parent_event_id else None,
        "correction_of": str(event.correction_of_id) if event.correction_of_id else None,
        "privacy_class": event.privacy_class,
        "retention_class": event.retention_class,
        "redacted": event.redacted_at is not None,
    }


def post(client, body, **extra):
    return client.post("/api/v1/events", body, format="json", **extra)


def append(agent, n: int, **fields) -> list[Event]:
    drafts = [EventDraft(event_type="a.b", payload={"n": i}, **fields) for i in range(n)]
    return events_append(agent=agent, drafts=drafts)


class TestPostOne:
    def test_every_field(self, client_a):
        parent = post(client_a, {"event_type": "task.started"}).json()
        body = {
            "event_type": "tool.called",
            "payload": {"tool": "search", "args": {"q": "weather"}, "n": [1, 2.5, None, True]},
            "occurred_at": "2026-01-31T11:00:00+02:00",
            "session_id": "s-1",
            "actor": "planner",
            "source_type": "tool_result",
            "source_ref": "call-17",
            "authority": "user_statement",
            "confidence": 0.75,
            "parent_event_id": parent["id"],
            "correction_of": parent["id"],
            "privacy_class": "personal",
            "retention_class": "long_term",
        }
        response = post(client_a, body)
        assert response.status_code == 201
        event = Event.objects.get(pk=response.json()["id"])
        assert response.json() == {
            "id": str(event.pk),
            "seq": 2,
            "event_type": "tool.called",
            "occurred_at": "2026-01-31T09:00:00Z",
            "recorded_at": iso(event.recorded_at),
            "session_id": "s-1",
            "actor": "planner",
            "source_type": "tool_result",
            "source_ref": "call-17",
            "authority": "user_statement",
            "confidence": 0.75,
            "payload": {"tool": "search", "args": {"q": "weather"}, "n": [1, 2.5, None, True]},
            "payload_hash": payload_hash(
                body["payload"],
                salt=event.payload_salt,
                labels={"actor": "planner", "session_id": "s-1", "source_ref": "call-17"},
            ),
            "payload_salt": event.payload_salt,
            "hash_version": 2,
            "prev_hash": parent["hash"],
            "hash": event_hash(event),
            "parent_event_id": parent["id"],
            "correction_of": parent["id"],
            "privacy_class": "personal",
            "retention_class": "long_term",
            "redacted": False,
        }
        assert event.hash == response.json()["hash"]

    def test_defaults(self, client_a):
        response = post(client_a, {"event_type": "user.said"})
        assert response.status_code == 201
        event = Event.objects.get(pk=response.json()["id"])
        assert response.json() == {
            "id": str(event.pk),
            "seq": 1,
            "event_type": "user.said",
            "occurred_at": iso(event.recorded_at),
            "recorded_at": iso(event.recorded_at),
            "session_id": "",
            "actor": "",
            "source_type": "agent_inference",
            "source_ref": "",
            "authority": "agent_inference",
            "confidence": 1.0,
            "payload": {},
            "payload_hash": payload_hash(
                {},
                salt=event.payload_salt,
                labels={"actor": "", "session_id": "", "source_ref": ""},
            ),
            "payload_salt": event.payload_salt,
            "hash_version": 2,
            "prev_hash": GENESIS_HASH,
            "hash": event_hash(event),
            "parent_event_id": None,
            "correction_of": None,
            "privacy_class": "internal",
            "retention_class": "standard",
            "redacted": False,
        }
        assert event.occurred_at == event.recorded_at

    @pytest.mark.parametrize(
        ("source_type", "authority"),
        [
            ("operator", "operator"),
            ("observation", "system_observation"),
            ("document", "third_party"),
        ],
    )
    def test_authority_follows_source_type(self, client_a, source_type, authority):
        response = post(client_a, {"event_type": "a.b", "source_type": source_type})
        assert (response.status_code, response.json()["authority"]) == (201, authority)

    def test_hash_chain_over_the_api(self, client_a):
        bodies = [
            post(client_a, {"event_type": "a.b", "payload": {"i": i}}).json() for i in range(5)
        ]
        assert [b["seq"] for b in bodies] == [1, 2, 3, 4, 5]
        assert bodies[0]["prev_hash"] == "0" * 64
        assert [b["prev_hash"] for b in bodies[1:]] == [b["hash"] for b in bodies[:-1]]
        for body in bodies:
            assert event_hash(Event.objects.get(pk=body["id"])) == body["hash"]
        assert chain_verify(agent=client_a.agent).ok

    def test_response_equals_what_a_read_returns(self, client_a):
        payload = {"big": 1e16, "zero": -0.0, "small": 1e-7}
        created = post(client_a, {"event_type": "a.b", "payload": payload})
        assert created.status_code == 201
        assert created.json()["payload"] == {"big": 10000000000000000, "zero": 0.0, "small": 1e-7}
        fetched = client_a.get(f"/api/v1/events/{created.json()['id']}")
        assert fetched.json() == created.json()
        assert chain_verify(agent=client_a.agent).ok


class TestPostBatch:
    def test_batch_of_1000_is_one_atomic_append(self, client_a):
        post(client_a, {"event_type": "a.first"})
        events = [{"event_type": "a.b", "payload": {"i": i}} for i in range(1000)]
        response = post(client_a, {"events": events})
        assert response.status_code == 201
        stored = list(Event.objects.filter(agent=client_a.agent, seq__gt=1).order_by("seq"))
        assert response.json() == {
            "count": 1000,
            "recorded_at": iso(stored[0].recorded_at),
            "events": [{"id": str(e.pk), "seq": e.seq, "hash": e.hash} for e in stored],
        }
        assert [e.seq for e in stored] == list(range(2, 1002))
        assert [e.payload for e in stored] == [{"i": i} for i in range(1000)]
        assert chain_verify(agent=client_a.agent).events_checked == 1001

    def test_batch_size_does_not_change_the_number_of_queries(self, client_a):
        post(client_a, {"event_type": "a.first"})
        with CaptureQueriesContext(connection) as one:
            assert post(client_a, {"events": [{"event_type": "a.b"}]}).status_code == 201
        with CaptureQueriesContext(connection) as many:
            assert post(client_a, {"events": [{"event_type": "a.b"}] * 200}).status_code == 201
        # the key, savepoints, the chain-head lock, one bulk INSERT, the head update
        assert len(many.captured_queries) == len(one.captured_queries) <= 8

    def test_batch_of_1001_is_refused(self, client_a):
        before = ledger_state()
        response = post(client_a, {"events": [{"event_type": "a.b"}] * 1001})
        assert response.status_code == 413
        assert response.json() == error(
            "batch_too_large",
            "a batch holds at most 1000 events; this one has 1001: split it",
            {"max_events": 1000, "received": 1001},
        )
        assert ledger_state() == before

    def test_one_bad_event_fails_the_batch_and_names_its_index(self, client_a):
        before = ledger_state()
        events = [{"event_type": "a.b"}] * 3 + [{"event_type": "Not Valid"}, {"event_type": "a.b"}]
        response = post(client_a, {"events": events})
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            f"events[3].event_type: {EVENT_TYPE_RULE}",
            {"events": {"3": {"event_type": [EVENT_TYPE_RULE]}}},
        )
        assert ledger_state() == before

    def test_unknown_reference_fails_the_batch(self, client_a):
        before = ledger_state()
        missing = str(uuid.uuid4())
        events = [{"event_type": "a.b"}, {"event_type": "a.b", "parent_event_id": missing}]
        response = post(client_a, {"events": events})
        assert response.status_code == 422
        assert response.json() == error(
            "unknown_event_reference",
            f"referenced event {missing} does not exist",
            {"missing_event_ids": [missing]},
        )
        assert ledger_state() == before

    @pytest.mark.parametrize(
        ("body", "message", "details"),
        [
            (
                {"events": []},
                "events: This list may not be empty.",
                {"events": ["This list may not be empty."]},
            ),
            (
                {"events": "a.b"},
                'events: Expected a list of items but got type "str".',
                {"events": ['Expected a list of items but got type "str".']},
            ),
            (
                {"events": [{"event_type": "a.b"}, 7]},
                "events[1]: Invalid data. Expected a dictionary, but got int.",
                {
                    "events": {
                        "1": {
                            "non_field_errors": [
                                "Invalid data. Expected a dictionary, but got int."
                            ]
                        }
                    }
                },
            ),
            (
                {"events": [{"event_type": "a.b"}], "event_type": "a.b"},
                "event_type: unknown field; allowed: events",
                {"event_type": ["unknown field; allowed: events"]},
            ),
            (
                {"events": [{"event_type": "a.b", "colour": "red"}]},
                f"events[0].colour: unknown field; allowed: {EVENT_FIELDS}",
                {"events": {"0": {"colour": [f"unknown field; allowed: {EVENT_FIELDS}"]}}},
            ),
        ],
    )
    def test_bad_batches(self, client_a, body, message, details):
        before = ledger_state()
        response = post(client_a, body)
        assert (response.status_code, response.json()) == (400, error("invalid", message, details))
        assert ledger_state() == before


class TestBadInput:
    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "event_type", "This field is required."),
            ({"payload": {"x": 1}}, "event_type", "This field is required."),
            ({"event_type": "Tool Called"}, "event_type", EVENT_TYPE_RULE),
            ({"event_type": ".starts.with.dot"}, "event_type", EVENT_TYPE_RULE),
            (
                {"event_type": "a" * 101},
                "event_type",
                "Ensure this field has no more than 100 characters.",
            ),
            ({"event_type": ["a.b"]}, "event_type", EVENT_TYPE_RULE),
            (
                {"event_type": "a.b", "payload": "text"},
                "payload",
                'Expected a dictionary of items but got type "str".',
            ),
            (
                {"event_type": "a.b", "payload": [1, 2]},
                "payload",
                'Expected a dictionary of items but got type "list".',
            ),
            ({"event_type": "a.b", "occurred_at": "yesterday"}, "occurred_at", DATETIME_RULE),
            ({"event_type": "a.b", "occurred_at": 1767225600}, "occurred_at", DATETIME_RULE),
            (
                {"event_type": "a.b", "confidence": 1.5},
                "confidence",
                "Ensure this value is less than or equal to 1.0.",
            ),
            (
                {"event_type": "a.b", "confidence": -0.5},
                "confidence",
                "Ensure this value is greater than or equal to 0.0.",
            ),
            (
                {"event_type": "a.b", "confidence": "high"},
                "confidence",
                "A valid number is required.",
            ),
            ({"event_type": "a.b", "session_id": {"id": 1}}, "session_id", "Not a valid string."),
            # Types are not coerced: a number is not a string, a string or a bool not a number.
            ({"event_type": "a.b", "session_id": 5}, "session_id", "Not a valid string."),
            ({"event_type": "a.b", "actor": True}, "actor", "Not a valid string."),
            (
                {"event_type": "a.b", "confidence": "0.5"},
                "confidence",
                "A valid number is required.",
            ),
            (
                {"event_type": "a.b", "confidence": True},
                "confidence",
                "A valid number is required.",
            ),
            (
                {"event_type": "a.b", "source_type": "rumour"},
                "source_type",
                '"rumour" is not a valid choice.',
            ),
            (
                {"event_type": "a.b", "authority": "god"},
                "authority",
                '"god" is not a valid choice.',
            ),
            (
                {"event_type": "a.b", "privacy_class": "secret"},
                "privacy_class",
                '"secret" is not a valid choice.',
            ),
            (
                {"event_type": "a.b", "parent_event_id": "not-a-uuid"},
                "parent_event_id",
                "Must be a valid UUID.",
            ),
            (
                {"event_type": "a.b", "actor": "x" * 201},
                "actor",
                "Ensure this field has no more than 200 characters.",
            ),
            (
                {"event_type": "a.b", "colour": "red"},
                "colour",
                f"unknown field; allowed: {EVENT_FIELDS}",
            ),
            (
                {"event_type": "a.b", "payload": {"text": "nul \u0000 inside"}},
                "payload",
                "payload.text: text must not contain NUL (\\u0000) characters",
            ),
        ],
    )
    def test_field_errors(self, client_a, body, field, message):
        post(client_a, {"event_type": "a.before"})
        before = ledger_state()
        response = post(client_a, body)
        assert response.status_code == 400
        assert response.json() == error("invalid", f"{field}: {message}", {field: [message]})
        assert ledger_state() == before

    def test_several_errors_are_all_reported(self, client_a):
        response = post(client_a, {"event_type": "BAD", "confidence": 2})
        assert response.status_code == 400
        # The message names the first field in error (the provenance fields
        # come first); the details name every one.
        assert response.json() == error(
            "invalid",
            "confidence: Ensure this value is less than or equal to 1.0.",
            {
                "event_type": [EVENT_TYPE_RULE],
                "confidence": ["Ensure this value is less than or equal to 1.0."],
            },
        )

    def test_malformed_json(self, client_a):
        before = ledger_state()
        response = client_a.post(
            "/api/v1/events", '{"event_type": "a.b",', content_type="application/json"
        )
        assert response.status_code == 400
        assert response.json() == error(
            "malformed_json",
            "the request body is not valid JSON: JSON parse error - Expecting property name enclosed "
            "in double quotes: line 1 column 22 (char 21)",
        )
        assert ledger_state() == before

    def test_nan_is_not_json(self, client_a):
        body = '{"event_type": "a.b", "payload": {"x": NaN}}'
        response = client_a.post("/api/v1/events", body, content_type="application/json")
        assert response.status_code == 400
        assert response.json() == error(
            "malformed_json",
            "the request body is not valid JSON: JSON parse error - Out of range float values are not JSON compliant: 'NaN'",
        )

    def test_number_too_large_for_a_float(self, client_a):
        before = ledger_state()
        body = '{"event_type": "a.b", "payload": {"x": 1e400}}'
        response = client_a.post("/api/v1/events", body, content_type="application/json")
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            "payload: payload.x: numbers must be finite (no NaN or infinity)",
            {"payload": ["payload.x: numbers must be finite (no NaN or infinity)"]},
        )
        assert ledger_state() == before

    def test_payload_nested_deeper_than_100_levels(self, client_a):
        before = ledger_state()
        deepest = "payload.x" + "[0]" * 99
        # Not much deeper: json's decoder shares the recursion limit with the
        # caller's stack, and under pytest-xdist that stack is deeper (at 900
        # levels it answered "too deeply to parse", test_json_too_deep_to_parse's case).
        for depth in (101, 500):
            body = '{"event_type": "a.b", "payload": {"x": ' + "[" * depth + "]" * depth + "}}"
            response = client_a.post(
                "/api/v1/events",
                body,
                content_type="application/json",
                HTTP_IDEMPOTENCY_KEY=f"deep-{depth}",
            )
            assert response.status_code == 400
            assert response.json() == error(
                "invalid",
                f"payload: {deepest}: nested deeper than 100 levels",
                {"payload": [f"{deepest}: nested deeper than 100 levels"]},
            )
        assert ledger_state() == before
        body = '{"event_type": "a.b", "payload": {"x": ' + "[" * 99 + "]" * 99 + "}}"
        assert (
            client_a.post("/api/v1/events", body, content_type="application/json").status_code
            == 201
        )

    @pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/sources"])
    def test_json_too_deep_to_parse(self, client_a, path):
        before = ledger_state()
        body = "[" * 100_000 + "]" * 100_000
        response = client_a.post(path, body, content_type="application/json")
        assert response.status_code == 400
        assert response.json() == error(
            "malformed_json", "the request body is nested too deeply to parse"
        )
        assert ledger_state() == before

    def test_lone_surrogate(self, client_a):
        before = ledger_state()
        body = '{"event_type": "a.b", "payload": {"x": "\\ud800"}}'
        response = client_a.post("/api/v1/events", body, content_type="application/json")
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            "payload: payload.x: text must be valid Unicode (no lone surrogates)",
            {"payload": ["payload.x: text must be valid Unicode (no lone surrogates)"]},
        )
        assert ledger_state() == before

    @pytest.mark.parametrize("body", ["[]", '[{"event_type": "a.b"}]', '"a.b"', "42", "null"])
    def test_body_must_be_an_object(self, client_a, body):
        before = ledger_state()
        response = client_a.post("/api/v1/events", body, content_type="application/json")
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            'send an event object, or {"events": [...]} for a batch',
            {"body": ["expected a JSON object"]},
        )
        assert ledger_state() == before

    def test_empty_body_is_an_empty_object(self, client_a):
        before = ledger_state()
        response = client_a.post("/api/v1/events", "", content_type="application/json")
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            "event_type: This field is required.",
            {"event_type": ["This field is required."]},
        )
        assert ledger_state() == before

    def test_not_json_media_type(self, client_a):
        before = ledger_state()
        response = client_a.post(
            "/api/v1/events", "event_type=a.b", content_type="application/x-www-form-urlencoded"
        )
        assert response.status_code == 415
        assert response.json() == error(
            "unsupported_media_type",
            'Unsupported media type "application/x-www-form-urlencoded" in request.',
        )
        assert ledger_state() == before

    @override_settings(PIPER_MAX_REQUEST_BYTES=200)
    def test_body_over_the_limit(self, client_a):
        before = ledger_state()
        body = json.dumps({"event_type": "a.b", "payload": {"text": "x" * 300}})
        response = client_a.post("/api/v1/events", body, content_type="application/json")
        assert response.status_code == 413
        assert response.json() == error(
            "payload_too_large",
            f"request body is {len(body)} bytes; the limit is 200 bytes. "
            "Split the batch into smaller requests.",
            {"limit_bytes": 200, "received_bytes": len(body)},
        )
        assert ledger_state() == before

    @override_settings(PIPER_MAX_REQUEST_BYTES=200)
    def test_body_at_the_limit_is_accepted(self, client_a):
        body = json.dumps({"event_type": "a.b", "payload": {"text": ""}})
        body = body.replace('""', '"' + "x" * (200 - len(body)) + '"')
        assert len(body.encode()) == 200
        assert (
            client_a.post("/api/v1/events", body, content_type="application/json").status_code
            == 201
        )

    def test_reference_to_a_missing_event(self, client_a):
        post(client_a, {"event_type": "a.b"})
        before = ledger_state()
        missing = str(uuid.uuid4())
        response = post(client_a, {"event_type": "a.b", "correction_of": missing})
        assert response.status_code == 422
        assert response.json() == error(
            "unknown_event_reference",
            f"referenced event {missing} does not exist",
            {"missing_event_ids": [missing]},
        )
        assert ledger_state() == before


def seqs_of(client, params) -> list[int]:
    response = client.get("/api/v1/events", params)
    assert response.status_code == 200, response.json()
    return [e["seq"] for e in response.json()["results"]]


class TestList:
    def test_lists_in_seq_order(self, client_a):
        events = append(client_a.agent, 3)
        response = client_a.get("/api/v1/events")
        assert response.status_code == 200
        assert response.json() == {
            "next": None,
            "previous": None,
            "results": [expected_body(Event.objects.get(pk=e.pk)) for e in events],
        }

    def test_empty(self, client_a):
        assert client_a.get("/api/v1/events").json() == {
            "next": None,
            "previous": None,
            "results": [],
        }

    def test_filter_by_event_type_repeated_and_comma_separated(self, client_a):
        for event_type in ["a.one", "a.two", "a.three"]:
            events_append(agent=client_a.agent, drafts=[EventDraft(event_type=event_type)])

        def seqs(query):
            response = client_a.get(f"/api/v1/events?{query}")
            assert response.status_code == 200, response.json()
            return [e["seq"] for e in response.json()["results"]]

        assert seqs("event_type=a.two") == [2]
        assert seqs("event_type=a.one&event_type=a.three") == [1, 3]
        assert seqs("event_type=a.one,a.three") == [1, 3]
        assert seqs("event_type=a.one,a.two&event_type=a.three") == [1, 2, 3]
        assert seqs("event_type=a.none") == []

    def test_filter_by_session_and_actor(self, client_a):
        events_append(
            agent=client_a.agent,
            drafts=[
                EventDraft(event_type="a.b", session_id="s1", actor="alice"),
                EventDraft(event_type="a.b", session_id="s1", actor="bob"),
                EventDraft(event_type="a.b", session_id="s2", actor="alice"),
            ],
        )
        assert seqs_of(client_a, {"session_id": "s1"}) == [1, 2]
        assert seqs_of(client_a, {"actor": "alice"}) == [1, 3]
        assert seqs_of(client_a, {"session_id": "s1", "actor": "alice"}) == [1]
        assert seqs_of(client_a, {"session_id": "s3"}) == []

    def test_filter_by_valid_time(self, client_a):
        t = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
        drafts = [
            EventDraft(event_type="a.b", occurred_at=t + timedelta(hours=h)) for h in (-2, -1, 0, 1)
        ]
        events_append(agent=client_a.agent, drafts=drafts)
        assert seqs_of(client_a, {"occurred_after": "2026-03-01T12:00:00Z"}) == [3, 4]
        assert seqs_of(client_a, {"occurred_before": "2026-03-01T12:00:00Z"}) == [1, 2]
        window = {
            "occurred_after": "2026-03-01T10:30:00Z",
            "occurred_before": "2026-03-01T12:00:01Z",
        }
        assert seqs_of(client_a, window) == [2, 3]
        assert seqs_of(client_a, {"occurred_after": "2026-03-01T13:00:00+02:00"}) == [2, 3, 4]

    def test_filter_by_record_time(self, client_a):
        # A test runs in one transaction, so its events share one recorded_at:
        # the bounds are checked at that instant (after inclusive, before exclusive).
        recorded = append(client_a.agent, 2)[0].recorded_at
        just_after = recorded + timedelta(microseconds=1)
        assert seqs_of(client_a, {"recorded_after": iso(recorded)}) == [1, 2]
        assert seqs_of(client_a, {"recorded_after": iso(just_after)}) == []
        assert seqs_of(client_a, {"recorded_before": iso(recorded)}) == []
        assert seqs_of(client_a, {"recorded_before": iso(just_after)}) == [1, 2]

    @pytest.mark.parametrize(
        "name", ["occurred_after", "occurred_before", "recorded_after", "recorded_before"]
    )
    def test_bad_timestamp_filter(self, client_a, name):
        response = client_a.get("/api/v1/events", {name: "last tuesday"})
        assert response.status_code == 400
        assert response.json() == error(
            "invalid", f"{name}: {DATETIME_RULE}", {name: [DATETIME_RULE]}
        )

    def test_unknown_query_parameter(self, client_a):
        response = client_a.get("/api/v1/events", {"type": "a.b"})
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            f"type: unknown field; allowed: {QUERY_FIELDS}",
            {"type": [f"unknown field; allowed: {QUERY_FIELDS}"]},
        )

    @pytest.mark.parametrize(
        ("query", "field", "message"),
        [
            ("limit=0", "limit", "Ensure this value is greater than or equal to 1."),
            ("limit=1001", "limit", "Ensure this value is less than or equal to 1000."),
            ("limit=ten", "limit", "A valid integer is required."),
            ("ordering=recorded_at", "ordering", '"recorded_at" is not a valid choice.'),
        ],
    )
    def test_bad_pagination_parameters(self, client_a, query, field, message):
        response = client_a.get(f"/api/v1/events?{query}")
        assert response.status_code == 400
        assert response.json() == error("invalid", f"{field}: {message}", {field: [message]})

    def test_bad_cursor(self, client_a):
        response = client_a.get("/api/v1/events?cursor=not-a-cursor")
        assert response.status_code == 400
        assert response.json() == error(
            "invalid_cursor",
            "cursor is not one this API issued: follow the 'next' or 'previous' link as given",
            {"cursor": ["invalid cursor"]},
        )

    def test_cursor_pagination_returns_each_event_exactly_once(self, client_a):
        append(client_a.agent, 250)
        seen, url, pages = [], "/api/v1/events", 0
        while url:
            response = client_a.get(url)
            assert response.status_code == 200
            seen += [e["seq"] for e in response.json()["results"]]
            url, pages = response.json()["next"], pages + 1
        assert pages == 3  # 100 + 100 + 50
        assert seen == list(range(1, 251))

    def test_limit_and_descending_order(self, client_a):
        append(client_a.agent, 12)
        seen, sizes, url = [], [], "/api/v1/events?limit=5&ordering=-seq"
        while url:
            body = client_a.get(url).json()
            sizes.append(len(body["results"]))
            seen += [e["seq"] for e in body["results"]]
            url = body["next"]
        assert sizes == [5, 5, 2]
        assert seen == list(range(12, 0, -1))

    def test_previous_link_goes_back(self, client_a):
        append(client_a.agent, 6)
        first = client_a.get("/api/v1/events?limit=3").json()
        second = client_a.get(first["next"]).json()
        assert [e["seq"] for e in second["results"]] == [4, 5, 6]
        back = client_a.get(second["previous"]).json()
        assert [e["seq"] for e in back["results"]] == [1, 2, 3]

    def test_appends_during_pagination_are_neither_skipped_nor_repeated(self, client_a):
        append(client_a.agent, 4)
        first = client_a.get("/api/v1/events?limit=3").json()
        append(client_a.agent, 2)
        rest = client_a.get(first["next"]).json()
        assert [e["seq"] for e in first["results"] + rest["results"]] == [1, 2, 3, 4, 5, 6]

    def test_filters_combine_with_pagination(self, client_a):
        drafts = [EventDraft(event_type="a.x" if i % 2 else "a.y") for i in range(10)]
        events_append(agent=client_a.agent, drafts=drafts)
        first = client_a.get("/api/v1/events?event_type=a.x&limit=3").json()
        rest = client_a.get(first["next"]).json()
        assert [e["seq"] for e in first["results"] + rest["results"]] == [2, 4, 6, 8, 10]
        assert rest["next"] is None

    def test_no_n_plus_one(self, client_a, django_assert_num_queries):
        parent = append(client_a.agent, 1)[0]
        append(client_a.agent, 60, parent_event_id=parent.pk, correction_of_id=parent.pk)
        client_a.get("/api/v1/events?limit=1")  # records last_used_at, at most once a minute
        with django_assert_num_queries(2):  # the key, the page
            response = client_a.get("/api/v1/events")
        assert len(response.json()["results"]) == 61


class TestDetail:
    def test_returns_the_event(self, client_a):
        event = append(client_a.agent, 1)[0]
        response = client_a.get(f"/api/v1/events/{event.pk}")
        assert response.status_code == 200
        assert response.json() == expected_body(Event.objects.get(pk=event.pk))

    def test_missing_event(self, client_a):
        missing = uuid.uuid4()
        response = client_a.get(f"/api/v1/events/{missing}")
        assert response.status_code == 404
        assert response.json() == error("not_found", f"event {missing} not found")

    def test_not_a_uuid(self, client_a):
        response = client_a.get("/api/v1/events/42")
        assert response.status_code == 404
        assert response.json() == error("not_found", "no such endpoint: /api/v1/events/42")

    def test_queries(self, client_a, django_assert_num_queries):
        event = append(client_a.agent, 1)[0]
        client_a.get(f"/api/v1/events/{event.pk}")
        with django_assert_num_queries(2):  # the key, the event
            assert client_a.get(f"/api/v1/events/{event.pk}").status_code == 200

    def test_redacted_event(self, client_a):
        event = append(client_a.agent, 1)[0]
        event_redact(agent=client_a.agent, event_id=event.pk, reason="erasure")
        body = client_a.get(f"/api/v1/events/{event.pk}").json()
        assert (body["payload"], body["redacted"], body["payload_hash"], body["hash"]) == (
            {},
            True,
            event.payload_hash,
            event.hash,
        )


class TestSources:
    def test_register_with_content(self, client_a):
        before = Event.objects.count()
        body = {
            "title": "Runbook",
            "uri": "https://example.com/rb",
            "content": "Restart the worker.\n",
        }
        response = client_a.post("/api/v1/sources", body, format="json")
        assert response.status_code == 201
        source = Source.objects.get(pk=response.json()["id"])
        assert response.json() == {
            "id": str(source.pk),
            "title": "Runbook",
            "uri": "https://example.com/rb",
            "content_hash": sha256_hex("Restart the worker.\n"),
            "media_type": "text/plain",
            "content": "Restart the worker.\n",
            "source_event_id": str(source.source_event_id),
            "created_at": iso(source.created_at),
        }
        assert Event.objects.count() == before + 1
        assert Event.objects.get(pk=source.source_event_id).event_type == "source.registered"

    def test_same_content_again_is_200_with_the_same_source(self, client_a):
        first = client_a.post("/api/v1/sources", {"title": "A", "content": "text"}, format="json")
        before = ledger_state()
        again = client_a.post("/api/v1/sources", {"title": "B", "content": "text"}, format="json")
        assert again.status_code == 200
        assert again.json() == first.json()
        assert ledger_state() == before

    def test_register_by_hash(self, client_a):
        digest = sha256_hex("elsewhere")
        response = client_a.post(
            "/api/v1/sources", {"title": "Ext", "content_hash": digest}, format="json"
        )
        assert response.status_code == 201
        assert (response.json()["content_hash"], response.json()["content"]) == (digest, "")

    @pytest.mark.parametrize(
        ("body", "expected"),
        [
            (
                {"title": "T", "content": "text", "content_hash": "0" * 64},
                error(
                    "invalid",
                    "content_hash does not match the SHA-256 of content",
                    {"content_hash": [f"expected {sha256_hex('text')}"]},
                ),
            ),
            (
                {"title": "T"},
                error(
                    "invalid",
                    "send the document's content, or its content_hash as 64 lower-case hex characters",
                    {"content_hash": ["required when content is empty"]},
                ),
            ),
            (
                {"content": "text"},
                error(
                    "invalid",
                    "title: This field is required.",
                    {"title": ["This field is required."]},
                ),
            ),
            (
                {"title": "T", "content": "x", "author": "me"},
                error(
                    "invalid",
                    "author: unknown field; allowed: content, content_hash, media_type, title, uri",
                    {
                        "author": [
                            "unknown field; allowed: content, content_hash, media_type, title, uri"
                        ]
                    },
                ),
            ),
        ],
    )
    def test_bad_input(self, client_a, body, expected):
        before = ledger_state()
        response = client_a.post("/api/v1/sources", body, format="json")
        assert (response.status_code, response.json()) == (400, expected)
        assert ledger_state() == before

    def test_list_and_detail_are_scoped_per_agent(self, client_a, client_b):
        body = {"title": "Doc", "content": "shared text"}
        mine = client_a.post("/api/v1/sources", body, format="json").json()
        theirs = client_b.post("/api/v1/sources", body, format="json").json()
        assert mine["id"] != theirs["id"]
        assert client_a.get("/api/v1/sources").json()["results"] == [mine]
        assert client_b.get("/api/v1/sources").json()["results"] == [theirs]
        assert client_a.get(f"/api/v1/sources/{mine['id']}").json() == mine
        response = client_a.get(f"/api/v1/sources/{theirs['id']}")
        assert response.status_code == 404
        assert response.json() == error("not_found", f"source {theirs['id']} not found")

    def test_list_queries(self, client_a, django_assert_num_queries):
        for i in range(5):
            client_a.post(
                "/api/v1/sources", {"title": f"T{i}", "content": f"text {i}"}, format="json"
            )
        with django_assert_num_queries(2):
            assert len(client_a.get("/api/v1/sources").json()["results"]) == 5

    def test_list_pages_newest_first_each_source_once(self, client_a):
        created = [
            client_a.post(
                "/api/v1/sources", {"title": f"T{i}", "content": f"text {i}"}, format="json"
            ).json()
            for i in range(7)
        ]
        seen, url = [], "/api/v1/sources?limit=3"
        while url:
            page = client_a.get(url).json()
            seen += page["results"]
            url = page["next"]
        assert [s["id"] for s in seen] == [s["id"] for s in reversed(created)]
