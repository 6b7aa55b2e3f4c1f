"""POST /api/v1/recall, GET /api/v1/recall/{id}, POST /api/v1/recall/{id}/feedback:
every route end to end, the response shape, isolation, idempotency and bad input."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from conftest import make_client
from episodes.services import EpisodeDraft, episodes_embed, episodes_record, source_ingest
from facts.tests.api_helpers import AGE
from piper.tenancy.models import Scope
from recall.models import RecallFeedback, RetrievalTrace
from recall.tests.helpers import commitments, deployment_window, org_chart, written

pytestmark = pytest.mark.django_db

URL = "/api/v1/recall"
ROUTE_KEYS = {
    "chosen",
    "explicit",
    "method",
    "rule",
    "matched",
    "scores",
    "nearest",
    "fallback",
    "overridden",
}
STATUS_KEYS = {"source", "age_seconds", "authority", "currentness", "confidence"}


def ask(client, body: dict, **headers):
    return client.post(URL, body, format="json", headers=headers)


def ok(response, status: int = 201) -> dict:
    assert response.status_code == status, response.content
    return response.json()


def check_shape(body: dict) -> None:
    assert set(body) == {
        "id",
        "route",
        "abstained",
        "evidence",
        "near_misses",
        "groups",
        "details",
        "latency_ms",
    }
    assert set(body["route"]) == ROUTE_KEYS
    for item in body["evidence"] + body["near_misses"]:
        assert set(item) == {
            "kind",
            "id",
            "text",
            "score",
            "signals",
            "memory_status",
            item["kind"],
        }
        assert set(item["memory_status"]) >= STATUS_KEYS
        assert item["memory_status"]["currentness"] in {"current", "superseded", "contested", "n/a"}


# ------------------------------------------------------------------- each route


@pytest.mark.slow
def test_current_fact(client_a):
    deployment_window(client_a.agent)
    body = ok(ask(client_a, {"query": "When is our deployment window now?"}))
    check_shape(body)
    assert (body["route"]["chosen"], body["route"]["rule"], body["abstained"]) == (
        "current_fact",
        "current_fact.now",
        False,
    )
    assert [(e["fact"]["value"], e["memory_status"]["currentness"]) for e in body["evidence"]] == [
        ("Tuesday 14:00", "current"),
        ("Monday 10:00", "superseded"),
    ]
    current = body["evidence"][0]
    assert current["fact"]["memory_status"]["status"] == "active"
    assert current["memory_status"]["age_seconds"] == AGE
    assert current["memory_status"]["authority"] == "user_statement"


@pytest.mark.slow
def test_recall_runs_on_the_agents_simulated_clock(client_a):
    """The engine's now for an agent (piper.tenancy.clock) is recall's now: which
    value is valid, and every age, are measured from it."""
    from intentions.services.engine import clock_clear, clock_set

    agent = client_a.agent
    deployment_window(agent)  # Monday 10:00 in 2024, Tuesday 14:00 from 2025 on
    [episode] = episodes_record(
        agent=agent,
        drafts=[
            EpisodeDraft(
                occurred_at=datetime(2024, 6, 1, 9, 0, tzinfo=UTC),
                summary="The nightly export ran out of memory halfway through and was killed",
                session_id="night-1",
            )
        ],
    )
    episodes_embed(episode_ids=[episode.pk])
    clock_set(agent=agent, now=datetime(2024, 6, 2, 9, 0, tzinfo=UTC))
    body = ok(ask(client_a, {"query": "When is our deployment window now?"}))
    assert [(e["fact"]["value"], e["memory_status"]["currentness"]) for e in body["evidence"]] == [
        ("Monday 10:00", "current")  # in June 2024; Tuesday's was not valid yet
    ]
    body = ok(
        ask(
            client_a,
            {"query": "Did the nightly export run out of memory?", "route": "what_happened"},
        )
    )
    [found] = [e for e in body["evidence"] + body["near_misses"] if e["id"] == str(episode.pk)]
    assert found["memory_status"]["age_seconds"] == 86400  # a day before the simulated now
    clock_clear(agent=agent)
    body = ok(ask(client_a, {"query": "When is our deployment window now?"}))
    assert body["evidence"][0]["fact"]["value"] == "Tuesday 14:00"


@pytest.mark.slow
def test_what_happened(client_a):
    agent = client_a.agent
    episodes = episodes_record(
        agent=agent,
        drafts=[
            EpisodeDraft(
                occurred_at=datetime(2026, 10, 3, 2, 0, tzinfo=UTC),
                summary="The nightly export ran out of memory halfway through and was killed",
                action="ran the nightly export job",
                observation="OOM killer stopped the worker at 51%",
                outcome="failure",
                session_id="night-1",
                actor="export-bot",
            ),
            EpisodeDraft(
                occurred_at=datetime(2026, 10, 4, 9, 0, tzinfo=UTC),
                summary="Raised the export worker memory limit to 8 GB; the export completed",
                outcome="success",
                session_id="night-2",
                actor="alice",
            ),
            EpisodeDraft(
                occurred_at=datetime(2026, 9, 1, 12, 0, tzinfo=UTC),
                summary="Lunch order placed for the team offsite",
                session_id="misc",
            ),
        ],
    )
    episodes_embed(episode_ids=[e.pk for e in episodes])
    body = ok(ask(client_a, {"query": "Have I seen the export run out of memory before?"}))
    check_shape(body)
    assert (body["route"]["chosen"], body["route"]["rule"], body["abstained"]) == (
        "what_happened",
        "what_happened.have_i_seen",
        False,
    )
    # Both export episodes come before the lunch order (ranking is episodes.retrieval's).
    ids = [e["id"] for e in body["evidence"]]
    assert {ids[0], ids[1]} == {str(episodes[0].pk), str(episodes[1].pk)}
    assert str(episodes[2].pk) not in ids[:2]
    oom = next(e for e in body["evidence"] if e["id"] == str(episodes[0].pk))
    assert oom["kind"] == "episode"
    assert oom["memory_status"] == {
        "source": {
            "type": "observation",
            "event_id": str(episodes[0].raw_event_id),
            "actor": "export-bot",
            "session_id": "night-1",
        },
        "age_seconds": oom["memory_status"]["age_seconds"],
        "authority": "system_observation",
        "currentness": "n/a",
        "confidence": 1.0,
        "occurred_at": "2026-10-03T02:00:00Z",
        "outcome": "failure",
        "instruction_like": False,
        "privacy_class": "internal",
    }
    assert oom["episode"]["summary"] == episodes[0].summary
    groups = {g["session_id"]: g["evidence"] for g in body["groups"]}
    assert groups["night-1"] == [str(episodes[0].pk)]
    assert groups["night-2"] == [str(episodes[1].pk)]
    assert set(body["details"]) >= {"threshold", "evidence_score", "embedding_model"}


@pytest.mark.slow
def test_what_happened_abstains_on_what_never_happened(client_a):
    episodes = episodes_record(
        agent=client_a.agent,
        drafts=[
            EpisodeDraft(
                occurred_at=datetime(2026, 10, 3, tzinfo=UTC),
                summary="Rotated the staging database password",
                session_id="s1",
            )
        ],
    )
    episodes_embed(episode_ids=[e.pk for e in episodes])
    body = ok(ask(client_a, {"query": "What happened when the office flooded last winter?"}))
    assert (body["route"]["chosen"], body["abstained"], body["evidence"]) == (
        "what_happened",
        True,
        [],
    )
    assert RetrievalTrace.objects.get(pk=body["id"]).abstained is True


@pytest.mark.slow
def test_source(client_a):
    from episodes.models import SourceChunk
    from episodes.services import chunks_embed

    source, _ = source_ingest(
        agent=client_a.agent,
        title="Payments runbook",
        content=(
            "Restarting the payments worker.\n\n"
            "The payments worker may be restarted at most three times per hour. "
            "After the third restart, page the on-call engineer instead.\n\n"
            "Backups run nightly at 02:00 UTC."
        ),
    )
    source_ingest(
        agent=client_a.agent,
        title="Office guide",
        content="The office kitchen closes at 18:00. Restart the coffee machine by unplugging it.",
    )
    chunks_embed(chunk_ids=list(SourceChunk.objects.values_list("pk", flat=True)))
    body = ok(
        ask(client_a, {"query": "According to the payments runbook, how often may I restart it?"})
    )
    check_shape(body)
    assert (body["route"]["chosen"], body["route"]["rule"], body["abstained"]) == (
        "source",
        "source.according_to",
        False,
    )
    assert body["details"]["source_named"] == "Payments runbook"
    assert {e["memory_status"]["source"]["title"] for e in body["evidence"]} == {"Payments runbook"}
    assert "three times per hour" in body["evidence"][0]["text"]
    assert body["evidence"][0]["chunk"]["source_id"] == str(source.pk)
    assert body["evidence"][0]["memory_status"]["currentness"] == "n/a"


@pytest.mark.slow
def test_how_to(client_a):
    from skills.tests.factories import validated

    version = validated(agent=client_a.agent)
    body = ok(
        ask(
            client_a,
            {
                "query": "How do I compute the checksum of an invoice record?",
                "context": {"env": {"os": "linux"}},
            },
        )
    )
    check_shape(body)
    assert (body["route"]["chosen"], body["route"]["rule"], body["abstained"]) == (
        "how_to",
        "how_to.how_do_i",
        False,
    )
    [skill] = body["evidence"]
    assert (skill["kind"], skill["id"], skill["skill"]["skill_name"]) == (
        "skill",
        str(version.pk),
        "invoice-checksum",
    )
    status = skill["memory_status"]
    assert (status["currentness"], status["status"], status["confidence"]) == (
        "current",
        "validated",
        1.0,
    )
    # Outside the skill's preconditions it is only a near miss, with the reason.
    body = ok(
        ask(
            client_a,
            {
                "query": "How do I compute the checksum of an invoice record?",
                "context": {"env": {"os": "windows"}},
            },
        )
    )
    assert (body["abstained"], body["evidence"]) == (True, [])
    assert [r["type"] for r in body["near_misses"][0]["memory_status"]["reasons"]] == [
        "precondition_failed"
    ]


def test_what_to_do(client_a):
    made = commitments(client_a.agent)
    body = ok(ask(client_a, {"query": "What am I supposed to do?"}))
    check_shape(body)
    assert body["route"]["chosen"] == "what_to_do"
    assert [(e["id"], e["intention"]["status"]) for e in body["evidence"]] == [
        (str(made["due"].pk), "due"),
        (str(made["active"].pk), "active"),
    ]


def test_multi_hop(client_a):
    org_chart(client_a.agent)
    body = ok(ask(client_a, {"query": "How is Alice related to Berlin?"}))
    check_shape(body)
    [path] = body["evidence"]
    assert (path["kind"], path["text"]) == ("path", "Alice —works at→ Acme —based in→ Berlin")
    assert [e["name"] for e in path["path"]["entities"]] == ["Alice", "Acme", "Berlin"]
    assert [f["predicate"] for f in path["path"]["facts"]] == ["works_at", "based_in"]


# ----------------------------------------------------------- trace and feedback


def test_the_trace_is_readable_by_its_agent_only(client_a, client_b):
    made = commitments(client_a.agent)
    body = ok(ask(client_a, {"query": "What am I supposed to do?", "limit": 1}))
    trace = ok(client_a.get(f"{URL}/{body['id']}"), 200)
    assert trace == {
        "id": body["id"],
        "query": "What am I supposed to do?",
        "route": body["route"],
        "filters": {},
        "candidates": [
            {
                "kind": "intention",
                "id": str(made["due"].pk),
                "score": 0.4,
                "signals": {"relevance": 0.0, "urgency": 1.0},
            }
        ],
        "returned": [{"kind": "intention", "id": str(made["due"].pk), "score": 0.4}],
        "abstained": False,
        "latency_ms": body["latency_ms"],
        "embedding_model": "",
        "created_at": trace["created_at"],
        "feedback": None,
    }
    missing = client_b.get(f"{URL}/{body['id']}")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert str(made["due"].pk) not in missing.content.decode()


def test_feedback(client_a, client_b):
    made = commitments(client_a.agent)
    body = ok(ask(client_a, {"query": "What am I supposed to do?"}))
    before = written()
    other = client_b.post(f"{URL}/{body['id']}/feedback", {"outcome": "success"}, format="json")
    assert other.status_code == 404
    assert written() == before

    sent = ok(
        client_a.post(
            f"{URL}/{body['id']}/feedback",
            {"used": [str(made["due"].pk)], "outcome": "failure", "failure_code": "U0"},
            format="json",
        )
    )
    feedback = RecallFeedback.objects.get(trace_id=body["id"])
    assert sent == {
        "id": str(feedback.pk),
        "trace": body["id"],
        "used": [str(made["due"].pk)],
        "outcome": "failure",
        "failure_code": "U0",
        "note": "",
        "stale": False,
        "source_event_id": str(feedback.source_event_id),
        "created_at": sent["created_at"],
    }
    assert ok(client_a.get(f"{URL}/{body['id']}"), 200)["feedback"] == sent
    again = client_a.post(f"{URL}/{body['id']}/feedback", {"outcome": "success"}, format="json")
    assert (again.status_code, again.json()["error"]["code"]) == (409, "feedback_exists")


def test_idempotent_recall_and_feedback(client_a):
    commitments(client_a.agent)
    first = ok(ask(client_a, {"query": "What am I supposed to do?"}, **{"Idempotency-Key": "r1"}))
    replay = ask(client_a, {"query": "What am I supposed to do?"}, **{"Idempotency-Key": "r1"})
    assert (replay.status_code, replay["Idempotent-Replayed"], replay.json()) == (
        201,
        "true",
        first,
    )
    assert RetrievalTrace.objects.count() == 1
    url = f"{URL}/{first['id']}/feedback"
    sent = ok(
        client_a.post(url, {"outcome": "success"}, format="json", headers={"Idempotency-Key": "f1"})
    )
    replayed = client_a.post(
        url, {"outcome": "success"}, format="json", headers={"Idempotency-Key": "f1"}
    )
    assert (replayed.status_code, replayed.json()) == (201, sent)
    assert RecallFeedback.objects.count() == 1


def test_scopes(db):
    reader = make_client("reader", scopes=(Scope.READ,))
    body = ok(ask(reader, {"query": "What am I supposed to do?"}))  # recall is a read
    refused = reader.post(f"{URL}/{body['id']}/feedback", {"outcome": "success"}, format="json")
    assert refused.status_code == 403
    assert RecallFeedback.objects.count() == 0


# --------------------------------------------------------------------- bad input


ALLOWED = "current_fact, what_happened, how_to, what_to_do, source, multi_hop, auto"


@pytest.mark.parametrize(
    "body, message",
    [
        ({"query": ""}, "query must be a non-empty question"),
        ({"query": "  "}, "query must be a non-empty question"),
        (
            {"query": "x" * 2001},
            "query must be at most 2000 characters (got 2001); ask about one thing at a time",
        ),
        ({}, "query: This field is required."),
        ({"query": 5}, "query: Not a valid string."),
        (
            {"query": "what now?", "route": "facts"},
            f'route: "facts" is not a route; allowed: {ALLOWED}',
        ),
        (
            {
                "query": "what happened?",
                "filters": {
                    "occurred_after": "2026-02-01T00:00:00Z",
                    "occurred_before": "2026-01-01T00:00:00Z",
                },
            },
            "filters.occurred_before: the window ends before it starts: not before occurred_after",
        ),
        (
            {"query": "what now?", "colour": "red"},
            "colour: unknown field; allowed: context, filters, limit, query, route",
        ),
        (
            {"query": "what now?", "filters": {"colour": "red"}},
            "filters.colour: unknown field; allowed: actor, environment, goal_id, occurred_after, "
            "occurred_before, outcome, session_id, source_id, task_id",
        ),
        (
            {"query": "what now?", "limit": 0},
            "limit: Ensure this value is greater than or equal to 1.",
        ),
        ({"query": "what now?", "context": [1]}, "context: must be a JSON object"),
        (
            {"query": "what happened?", "filters": {"occurred_after": "2026-02-01T00:00:00"}},
            "filters.occurred_after: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
        ),
    ],
)
def test_bad_input_is_a_clear_400_and_writes_nothing(client_a, body, message):
    before = written()
    response = ask(client_a, body)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["message"] == message
    assert written() == before


@pytest.mark.parametrize(
    "body, status, message",
    [
        ({"outcome": "great"}, 400, 'outcome: "great" is not a valid choice.'),
        (
            {"outcome": "success", "failure_code": "R1"},
            400,
            "failure_code: a success has no failure code; send failure or partial",
        ),
        ({"outcome": "success", "used": ["nope"]}, 400, None),
        (
            {"outcome": "success", "extra": 1},
            400,
            "extra: unknown field; allowed: failure_code, note, outcome, stale, used",
        ),
    ],
)
def test_bad_feedback_is_a_clear_4xx_and_writes_nothing(client_a, body, status, message):
    commitments(client_a.agent)
    trace = ok(ask(client_a, {"query": "What am I supposed to do?"}))
    before = written()
    response = client_a.post(f"{URL}/{trace['id']}/feedback", body, format="json")
    assert response.status_code == status, response.content
    if message is None:
        message = "used: nope is not evidence this recall returned"
    assert response.json()["error"]["message"] == message
    assert written() == before


def test_feedback_for_an_unknown_recall_is_a_404(client_a):
    before = written()
    response = client_a.post(
        f"{URL}/{uuid.uuid4()}/feedback", {"outcome": "success"}, format="json"
    )
    assert response.status_code == 404
    assert written() == before


# ------------------------------------------------------------------- clearance


@pytest.mark.slow
def test_a_key_reads_up_to_its_clearance_and_is_told_what_was_withheld(client_a):
    """A sensitive episode is recalled for a key cleared for it, withheld (and
    counted) for one that is not; the trace keeps nothing the key could not read."""
    from piper.tenancy.services import api_key_create

    agent = client_a.agent
    [sensitive, ordinary] = episodes_record(
        agent=agent,
        drafts=[
            EpisodeDraft(
                occurred_at=datetime(2026, 10, 3, 2, 0, tzinfo=UTC),
                summary="The payroll export for the board included salary bands per person",
                privacy_class="sensitive",
            ),
            EpisodeDraft(
                occurred_at=datetime(2026, 10, 4, 2, 0, tzinfo=UTC),
                summary="The payroll export finished and was uploaded to the finance share",
            ),
        ],
    )
    episodes_embed(episode_ids=[sensitive.pk, ordinary.pk])
    body = {"query": "What happened with the payroll export?", "route": "what_happened"}

    plain = ok(ask(client_a, body))  # the default clearance is personal
    shown = {e["id"] for e in plain["evidence"] + plain["near_misses"]}
    assert str(sensitive.pk) not in shown and str(ordinary.pk) in shown
    assert plain["details"]["withheld"] == 1
    trace = RetrievalTrace.objects.get(pk=plain["id"])
    assert str(sensitive.pk) not in str(trace.candidates) + str(trace.returned)

    _, raw = api_key_create(agent=agent, name="hr", scopes=["read", "write"], clearance="sensitive")
    cleared = make_client.__globals__["AgentClient"](agent, raw, None)
    full = ok(ask(cleared, body))
    found = {e["id"]: e for e in full["evidence"] + full["near_misses"]}
    assert found[str(sensitive.pk)]["memory_status"]["privacy_class"] == "sensitive"
    assert "withheld" not in full["details"]
