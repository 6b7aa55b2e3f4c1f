"""The episodes API: record (one or a batch), list with filters, get, ingest a source,
list its chunks — through HTTP, with exact bodies, tenant isolation and bad input."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from conftest import make_client
from episodes.models import Episode, SourceChunk
from episodes.salience import effective_salience
from episodes.services import episodes_embed
from episodes.tests.factories import T0, EpisodeFactory, HashEmbedder, SourceFactory, memory_state
from ledger.models import Event
from ledger.tests.helpers import error
from piper.tenancy.models import Scope

pytestmark = pytest.mark.django_db


def iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def post(client, path: str, body, **extra):
    return client.post(path, body, format="json", **extra)


def episode_body(episode_id, *, embedding: bool = False) -> dict:
    """The API's representation of a stored episode, built from the row itself."""
    e = Episode.objects.get(pk=episode_id)
    body = {
        "id": str(e.pk),
        "occurred_at": iso(e.occurred_at),
        "session_id": e.session_id,
        "actor": e.actor,
        "environment": e.environment,
        "goal_id": e.goal_id,
        "task_id": e.task_id,
        "summary": e.summary,
        "action": e.action,
        "observation": e.observation,
        "outcome": e.outcome,
        "score": e.score,
        "salience": e.salience,
        # It decays while the test runs: equal to within a second's decay.
        "effective_salience": pytest.approx(
            effective_salience(
                salience=e.salience,
                occurred_at=e.occurred_at,
                last_used_at=e.last_used_at,
                use_count=e.use_count,
                now=timezone.now(),
            ),
            abs=1e-5,
        ),
        "use_count": e.use_count,
        "last_used_at": None if e.last_used_at is None else iso(e.last_used_at),
        "confidence": e.confidence,
        "entities": e.entities,
        "related_ids": [str(r) for r in e.related_ids],
        "source_id": None if e.source_id is None else str(e.source_id),
        "source_type": e.source_type,
        "authority": e.authority,
        "raw_event_id": str(e.raw_event_id),
        "instruction_like": e.instruction_like,
        "canonical_id": None if e.canonical_id is None else str(e.canonical_id),
        "status": e.status,
        "status_reason": e.status_reason,
        "status_changed_at": None if e.status_changed_at is None else iso(e.status_changed_at),
        "supersedes": None if e.supersedes is None else str(e.supersedes),
        "superseded_by": None if e.superseded_by is None else str(e.superseded_by),
        "created_at": iso(e.created_at),
        "embedded": e.embedding is not None,
        "embedding_model": e.embedding_model,
        "embedded_at": iso(e.embedded_at),
    }
    if embedding:
        body["embedding"] = None if e.embedding is None else [float(x) for x in e.embedding]
    return body


def chunk_body(chunk: SourceChunk, *, embedding: bool = False) -> dict:
    c = SourceChunk.objects.get(pk=chunk.pk)
    body = {
        "id": str(c.pk),
        "source_id": str(c.source_id),
        "ordinal": c.ordinal,
        "text": c.text,
        "char_start": c.char_start,
        "char_end": c.char_end,
        "instruction_like": c.instruction_like,
        "created_at": iso(c.created_at),
        "embedded": c.embedding is not None,
        "embedding_model": c.embedding_model,
        "embedded_at": iso(c.embedded_at),
    }
    if embedding:
        body["embedding"] = None if c.embedding is None else [float(x) for x in c.embedding]
    return body


FULL = {
    "occurred_at": "2026-03-02T09:00:00Z",
    "summary": "The nightly batch job ran out of memory halfway through",
    "action": "raised the memory limit to 4 GB",
    "observation": "exit code 137",
    "outcome": "failure",
    "score": 0.2,
    "actor": "ci",
    "environment": "prod-batch",
    "session_id": "s-1",
    "goal_id": "g-1",
    "task_id": "t-1",
    "salience": 0.9,
    "confidence": 0.8,
    "entities": ["Batch Job", "OOM"],
    "source_type": "tool_result",
    "source_ref": "ci://run/42",
}


# -------------------------------------------------------------------------- record


class TestRecord:
    def test_one_episode(self, client_a):
        response = post(client_a, "/api/v1/episodes", FULL)
        assert response.status_code == 201, response.json()
        body = response.json()
        episode = Episode.objects.get()
        assert body == episode_body(episode.pk)
        assert body["entities"] == ["batch job", "oom"]
        assert (body["embedded"], body["embedding_model"], body["embedded_at"]) == (False, "", None)
        assert "embedding" not in body
        event = Event.objects.get(pk=body["raw_event_id"])
        assert (event.event_type, event.agent_id, event.source_ref) == (
            "episode.recorded",
            client_a.agent.pk,
            "ci://run/42",
        )

    def test_the_smallest_episode_takes_the_defaults(self, client_a):
        response = post(
            client_a,
            "/api/v1/episodes",
            {"occurred_at": "2026-03-02T10:00:00+01:00", "action": "x"},
        )
        assert response.status_code == 201
        body = response.json()
        assert body["occurred_at"] == "2026-03-02T09:00:00Z"
        assert (body["outcome"], body["score"], body["salience"], body["confidence"]) == (
            "unknown",
            None,
            0.5,
            1.0,
        )
        assert (body["source_type"], body["authority"]) == ("observation", "system_observation")

    def test_a_batch_is_atomic_and_in_order(self, client_a):
        related = EpisodeFactory(agent=client_a.agent)
        source = SourceFactory(agent=client_a.agent)
        items = [
            {**FULL, "summary": f"step {i}", "related_ids": [str(related.pk)]} for i in range(3)
        ]
        items[1]["source_id"] = str(source.pk)
        response = post(client_a, "/api/v1/episodes", {"episodes": items})
        assert response.status_code == 201, response.json()
        body = response.json()
        assert body["count"] == 3
        assert [e["summary"] for e in body["episodes"]] == ["step 0", "step 1", "step 2"]
        assert body["episodes"] == [episode_body(e["id"]) for e in body["episodes"]]
        assert body["episodes"][1]["source_id"] == str(source.pk)

    def test_a_bad_episode_in_a_batch_writes_nothing(self, client_a):
        before = memory_state()
        items = [FULL, {**FULL, "outcome": "won"}, {**FULL, "salience": 3}]
        response = post(client_a, "/api/v1/episodes", {"episodes": items})
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            'episodes[1].outcome: "won" is not a valid choice.',
            {
                "episodes": {
                    "1": {"outcome": ['"won" is not a valid choice.']},
                    "2": {"salience": ["must be between 0 and 1"]},
                }
            },
        )
        assert memory_state() == before

    def test_a_batch_over_1000_is_413(self, client_a):
        before = memory_state()
        response = post(client_a, "/api/v1/episodes", {"episodes": [FULL] * 1001})
        assert response.status_code == 413
        assert response.json() == error(
            "batch_too_large",
            "a batch holds at most 1,000 episodes; this one has 1,001: split it",
            {"max_episodes": 1000, "received": 1001},
        )
        assert memory_state() == before

    def test_a_batch_of_1000(self, client_a):
        items = [{"occurred_at": "2026-03-02T09:00:00Z", "summary": f"e {i}"} for i in range(1000)]
        response = post(client_a, "/api/v1/episodes", {"episodes": items})
        assert response.status_code == 201
        assert response.json()["count"] == 1000
        assert Episode.objects.filter(agent=client_a.agent).count() == 1000

    @pytest.mark.parametrize(
        ("body", "message", "details"),
        [
            ({"summary": "x"}, "occurred_at: This field is required.", None),
            (
                {"occurred_at": "2026-03-02T09:00:00", "summary": "x"},
                "occurred_at: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z"},
                "summary: an episode needs a summary, an action or an observation",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "x", "mood": "grim"},
                "mood: unknown field; allowed: action, actor, authority, confidence, entities, "
                "environment, goal_id, observation, occurred_at, outcome, parent_event_id, "
                "privacy_class, related_ids, retention_class, salience, score, session_id, "
                "source_id, source_ref, source_type, summary, task_id",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": 5},
                "summary: Not a valid string.",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "x" * 20_001},
                "summary: at most 20,000 characters",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "x", "actor": "a" * 201},
                "actor: at most 200 characters",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "x", "salience": "high"},
                "salience: A valid number is required.",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "x", "confidence": 1.5},
                "confidence: must be between 0 and 1",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "x", "related_ids": ["nope"]},
                "related_ids[0]: Must be a valid UUID.",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "x", "entities": ["e"] * 101},
                "entities: at most 100 names",
                None,
            ),
            (
                {"occurred_at": "2026-03-02T09:00:00Z", "summary": "nul \u0000"},
                "summary: Null characters are not allowed.",
                None,
            ),
        ],
    )
    def test_bad_input_is_400_and_writes_nothing(self, client_a, body, message, details):
        before = memory_state()
        response = post(client_a, "/api/v1/episodes", body)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "invalid"
        assert response.json()["error"]["message"] == message
        assert memory_state() == before

    def test_not_a_json_object(self, client_a):
        response = post(client_a, "/api/v1/episodes", [FULL])
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            'send an episode object, or {"episodes": [...]} for a batch',
            {"body": ["expected a JSON object"]},
        )

    def test_another_agents_related_episode_or_source_is_422(self, client_a, client_b):
        theirs = EpisodeFactory(agent=client_b.agent)
        their_source = SourceFactory(agent=client_b.agent)
        before = memory_state()
        response = post(client_a, "/api/v1/episodes", {**FULL, "related_ids": [str(theirs.pk)]})
        assert response.status_code == 422
        assert response.json() == error(
            "unknown_episode_reference",
            f"related episode {theirs.pk} does not exist",
            {"missing_episode_ids": [str(theirs.pk)]},
        )
        response = post(client_a, "/api/v1/episodes", {**FULL, "source_id": str(their_source.pk)})
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "unknown_source"
        assert memory_state() == before

    def test_a_retry_with_the_same_key_writes_nothing(self, client_a):
        first = post(client_a, "/api/v1/episodes", FULL, HTTP_IDEMPOTENCY_KEY="ep-1")
        assert first.status_code == 201
        before = memory_state()
        again = post(client_a, "/api/v1/episodes", FULL, HTTP_IDEMPOTENCY_KEY="ep-1")
        assert (again.status_code, again.json()) == (201, first.json())
        assert again["Idempotent-Replayed"] == "true"
        assert memory_state() == before
        other = post(
            client_a, "/api/v1/episodes", {**FULL, "summary": "other"}, HTTP_IDEMPOTENCY_KEY="ep-1"
        )
        assert other.status_code == 422
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        assert memory_state() == before

    def test_a_read_only_key_cannot_record(self, client_a):
        reader = make_client("reader", scopes=(Scope.READ,))
        before = memory_state()
        assert post(reader, "/api/v1/episodes", FULL).status_code == 403
        assert memory_state() == before


# ---------------------------------------------------------------------------- read


@pytest.fixture
def history(client_a, client_b):
    """Five episodes of agent a over a week, and one of agent b that a must never see."""
    a = client_a.agent
    episodes = {
        "oom": EpisodeFactory(
            agent=a,
            occurred_at=datetime(2026, 3, 1, 2, 0, tzinfo=UTC),
            summary="batch job OOM",
            actor="ci",
            environment="prod",
            session_id="s-1",
            goal_id="g-1",
            task_id="t-1",
            outcome="failure",
        ),
        "retry": EpisodeFactory(
            agent=a,
            occurred_at=datetime(2026, 3, 1, 3, 0, tzinfo=UTC),
            summary="batch job retried",
            actor="ci",
            environment="prod",
            session_id="s-1",
            goal_id="g-1",
            task_id="t-2",
            outcome="success",
        ),
        "deploy": EpisodeFactory(
            agent=a,
            occurred_at=datetime(2026, 3, 3, 12, 0, tzinfo=UTC),
            summary="deployed the web app",
            actor="alice",
            environment="staging",
            session_id="s-2",
            outcome="success",
        ),
        "review": EpisodeFactory(
            agent=a,
            occurred_at=datetime(2026, 3, 5, 9, 0, tzinfo=UTC),
            summary="code review",
            actor="alice",
            session_id="s-3",
        ),
        "same_time": EpisodeFactory(
            agent=a,
            occurred_at=datetime(2026, 3, 5, 9, 0, tzinfo=UTC),
            summary="at the same moment",
            actor="bob",
        ),
        "theirs": EpisodeFactory(
            agent=client_b.agent,
            occurred_at=datetime(2026, 3, 2, tzinfo=UTC),
            summary="batch job OOM",
            actor="ci",
        ),
    }
    return episodes


def ids(response) -> list[str]:
    assert response.status_code == 200, response.json()
    return [e["id"] for e in response.json()["results"]]


class TestList:
    def test_newest_first_and_never_another_agents(self, client_a, history):
        same_time = sorted([history["review"], history["same_time"]], key=lambda e: e.pk)
        expected = [
            str(e.pk)
            for e in [*reversed(same_time), history["deploy"], history["retry"], history["oom"]]
        ]
        response = client_a.get("/api/v1/episodes")
        assert ids(response) == expected
        assert response.json()["results"] == [episode_body(i) for i in expected]
        assert str(history["theirs"].pk) not in ids(
            client_a.get("/api/v1/episodes", {"actor": "ci"})
        )

    @pytest.mark.parametrize(
        ("params", "names"),
        [
            ({"actor": "ci"}, ["retry", "oom"]),
            ({"environment": "staging"}, ["deploy"]),
            ({"session_id": "s-1"}, ["retry", "oom"]),
            ({"goal_id": "g-1", "task_id": "t-1"}, ["oom"]),
            ({"outcome": "success"}, ["deploy", "retry"]),
            ({"outcome": "success", "actor": "ci"}, ["retry"]),
            ({"occurred_after": "2026-03-01T03:00:00Z"}, ["same_time|review", "deploy", "retry"]),
            ({"occurred_before": "2026-03-01T03:00:00Z"}, ["oom"]),
            (
                {
                    "occurred_after": "2026-03-01T00:00:00Z",
                    "occurred_before": "2026-03-04T00:00:00Z",
                },
                ["deploy", "retry", "oom"],
            ),
            (
                {
                    "occurred_after": "2026-03-01T03:00:00Z",
                    "occurred_before": "2026-03-01T03:00:00Z",
                },
                [],
            ),
            ({"actor": "nobody"}, []),
        ],
    )
    def test_filters(self, client_a, history, params, names):
        expected = []
        for name in names:
            if name == "same_time|review":
                pair = sorted([history["review"], history["same_time"]], key=lambda e: e.pk)
                expected += [str(e.pk) for e in reversed(pair)]
            else:
                expected.append(str(history[name].pk))
        assert ids(client_a.get("/api/v1/episodes", params)) == expected

    def test_a_window_that_ends_before_it_starts_is_400(self, client_a, history):
        response = client_a.get(
            "/api/v1/episodes",
            {"occurred_after": "2026-03-05T00:00:00Z", "occurred_before": "2026-03-01T00:00:00Z"},
        )
        assert response.status_code == 400
        assert response.json() == error(
            "invalid_time_window",
            "occurred_before: the time window ends before it starts; occurred_before must not "
            "be earlier than occurred_after",
            {"occurred_before": ["must not be earlier than occurred_after"]},
        )

    @pytest.mark.parametrize(
        ("params", "message"),
        [
            ({"outcome": "won"}, 'outcome: "won" is not a valid choice.'),
            (
                {"occurred_after": "yesterday"},
                "occurred_after: Datetime has wrong format. Use "
                "one of these formats instead: YYYY-MM-DDThh:mm[:ss[.uuuuuu]][+HH:MM|-HH:MM|Z].",
            ),
            (
                {"occurred_after": "2026-03-01T00:00:00"},
                "occurred_after: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
            ),
            (
                {"colour": "red"},
                "colour: unknown field; allowed: actor, cursor, environment, "
                "goal_id, include_embedding, limit, occurred_after, occurred_before, outcome, "
                "session_id, status, task_id",
            ),
            ({"limit": "0"}, "limit: Ensure this value is greater than or equal to 1."),
            (
                {"cursor": "garbage"},
                "cursor is not one this API issued: follow the 'next' or 'previous' link as given",
            ),
        ],
    )
    def test_bad_queries_are_400(self, client_a, history, params, message):
        response = client_a.get("/api/v1/episodes", params)
        assert response.status_code == 400
        assert response.json()["error"]["message"] == message

    def test_cursor_pagination_walks_every_episode_once(self, client_a, history):
        seen, url, pages = [], "/api/v1/episodes?limit=2", 0
        while url:
            response = client_a.get(url)
            seen += ids(response)
            url = response.json()["next"]
            pages += 1
        assert pages == 3
        assert seen == ids(client_a.get("/api/v1/episodes"))
        assert len(seen) == len(set(seen)) == 5

    def test_a_page_takes_a_fixed_number_of_queries(
        self, client_a, history, django_assert_num_queries
    ):
        for i in range(20):
            EpisodeFactory(agent=client_a.agent, summary=f"more {i}")
        with django_assert_num_queries(3):  # the key, its last_used_at stamp, the page
            response = client_a.get("/api/v1/episodes", {"limit": 25})
        assert len(ids(response)) == 25

    def test_the_vector_only_when_asked(self, client_a, history):
        episodes_embed(episode_ids=[history["oom"].pk], embedder=HashEmbedder())
        plain = client_a.get("/api/v1/episodes", {"actor": "ci"}).json()["results"]
        assert [("embedding" in e, e["embedded"], e["embedding_model"]) for e in plain] == [
            (False, False, ""),
            (False, True, "test/hash-embedder"),
        ]
        full = client_a.get(
            "/api/v1/episodes", {"actor": "ci", "include_embedding": "true"}
        ).json()["results"]
        assert full == [
            episode_body(history["retry"].pk, embedding=True),
            episode_body(history["oom"].pk, embedding=True),
        ]
        assert full[0]["embedding"] is None
        assert full[1]["embedding"] == HashEmbedder().vector(history["oom"].embedding_text())


class TestDetail:
    def test_one_episode(self, client_a, history):
        episode = history["deploy"]
        response = client_a.get(f"/api/v1/episodes/{episode.pk}")
        assert (response.status_code, response.json()) == (200, episode_body(episode.pk))
        with_vector = client_a.get(f"/api/v1/episodes/{episode.pk}", {"include_embedding": "1"})
        assert with_vector.json() == episode_body(episode.pk, embedding=True)

    def test_another_agents_episode_is_404(self, client_a, client_b, history):
        theirs = history["theirs"]
        response = client_a.get(f"/api/v1/episodes/{theirs.pk}")
        assert response.status_code == 404
        assert response.json() == error("not_found", f"episode {theirs.pk} not found")
        assert client_b.get(f"/api/v1/episodes/{theirs.pk}").status_code == 200
        missing = uuid.uuid4()
        assert client_a.get(f"/api/v1/episodes/{missing}").json() == error(
            "not_found", f"episode {missing} not found"
        )

    def test_requires_a_key(self, anonymous_client, history):
        response = anonymous_client.get(f"/api/v1/episodes/{history['oom'].pk}")
        assert response.status_code == 401


# ------------------------------------------------------- retract and correct


class TestRetractAndCorrect:
    def test_retract_then_read_it_by_id(self, client_a):
        episode = EpisodeFactory(agent=client_a.agent, summary="A test alarm fired")
        url = f"/api/v1/episodes/{episode.pk}/retract"
        response = post(client_a, url, {"reason": "it was a drill"})
        assert response.status_code == 200, response.json()
        assert response.json() == episode_body(episode.pk)
        assert (response.json()["status"], response.json()["status_reason"]) == (
            "retracted",
            "it was a drill",
        )
        assert client_a.get(f"/api/v1/episodes/{episode.pk}").json() == episode_body(episode.pk)
        assert ids(client_a.get("/api/v1/episodes")) == []
        assert ids(client_a.get("/api/v1/episodes", {"status": "retracted"})) == [str(episode.pk)]
        again = post(client_a, url, {"reason": "again"})
        assert again.status_code == 409
        assert again.json() == error(
            "not_current",
            f"episode {episode.pk} was retracted, it is not the current version",
            {"status": "retracted", "superseded_by": ""},
        )

    def test_correct_answers_the_new_version(self, client_a):
        episode = EpisodeFactory(agent=client_a.agent, summary="The export failed on db-7")
        response = post(
            client_a,
            f"/api/v1/episodes/{episode.pk}/correct",
            {"summary": "The export failed on db-2", "outcome": "failure", "reason": "typo"},
        )
        assert response.status_code == 201, response.json()
        new_id = response.json()["id"]
        assert response.json() == episode_body(new_id)
        assert (response.json()["supersedes"], response.json()["summary"]) == (
            str(episode.pk),
            "The export failed on db-2",
        )
        old = client_a.get(f"/api/v1/episodes/{episode.pk}").json()
        assert (old["status"], old["superseded_by"], old["status_reason"], old["summary"]) == (
            "corrected",
            new_id,
            "typo",
            "The export failed on db-7",
        )
        assert ids(client_a.get("/api/v1/episodes")) == [new_id]
        assert set(ids(client_a.get("/api/v1/episodes", {"status": "all"}))) == {
            new_id,
            str(episode.pk),
        }
        stale = post(client_a, f"/api/v1/episodes/{episode.pk}/correct", {"summary": "x"})
        assert stale.status_code == 409
        assert stale.json()["error"]["details"] == {"status": "corrected", "superseded_by": new_id}

    def test_a_retry_with_the_same_key_replays_and_writes_nothing(self, client_a):
        episode = EpisodeFactory(agent=client_a.agent)
        for path, body in (
            ("correct", {"summary": "fixed"}),
            ("retract", {"reason": "never happened"}),
        ):
            target = episode.pk if path == "correct" else Episode.objects.get(status="active").pk
            url = f"/api/v1/episodes/{target}/{path}"
            first = post(client_a, url, body, HTTP_IDEMPOTENCY_KEY=f"k-{path}")
            assert first.status_code in (200, 201), first.json()
            before = memory_state()
            again = post(client_a, url, body, HTTP_IDEMPOTENCY_KEY=f"k-{path}")
            assert (again.status_code, again.json()) == (first.status_code, first.json())
            assert again["Idempotent-Replayed"] == "true"
            assert memory_state() == before

    @pytest.mark.parametrize(
        ("path", "body", "status", "code", "details"),
        [
            ("retract", {}, 400, "invalid", {"reason": ["This field is required."]}),
            (
                "retract",
                {"reason": ""},
                400,
                "invalid",
                {"reason": ["This field may not be blank."]},
            ),
            ("retract", {"reason": "x", "when": "now"}, 400, "invalid", None),
            ("correct", {}, 400, "nothing_changed", None),
            ("correct", {"summary": "as it was"}, 400, "nothing_changed", None),
            ("correct", {"session_id": "s-9"}, 400, "invalid", None),
            ("correct", {"outcome": "bogus"}, 400, "invalid", None),
            ("correct", {"summary": "", "action": ""}, 400, "invalid", None),
            ("correct", {"summary": 7}, 400, "invalid", None),
        ],
    )
    def test_bad_input_writes_nothing(self, client_a, path, body, status, code, details):
        episode = EpisodeFactory(agent=client_a.agent, summary="as it was")
        before = memory_state()
        response = post(client_a, f"/api/v1/episodes/{episode.pk}/{path}", body)
        assert response.status_code == status, response.json()
        assert response.json()["error"]["code"] == code
        if details is not None:
            assert response.json()["error"]["details"] == details
        assert memory_state() == before

    @pytest.mark.parametrize(
        ("path", "body"), [("retract", {"reason": "x"}), ("correct", {"summary": "x"})]
    )
    def test_another_agents_or_an_unknown_episode_is_404(self, client_a, client_b, path, body):
        theirs = EpisodeFactory(agent=client_b.agent)
        before = memory_state()
        for episode_id in (theirs.pk, uuid.uuid4()):
            response = post(client_a, f"/api/v1/episodes/{episode_id}/{path}", body)
            assert response.status_code == 404
            assert response.json() == error("not_found", f"episode {episode_id} not found")
        assert memory_state() == before

    def test_a_read_only_key_cannot_retract_or_correct(self, db):
        reader = make_client("reader", scopes=(Scope.READ,))
        episode = EpisodeFactory(agent=reader.agent)
        before = memory_state()
        for path, body in (("retract", {"reason": "x"}), ("correct", {"summary": "x"})):
            response = post(reader, f"/api/v1/episodes/{episode.pk}/{path}", body)
            assert response.status_code == 403
        assert memory_state() == before


# ------------------------------------------------------------------------- sources

DOC = "\n\n".join(
    " ".join(f"Paragraph {p} sentence {s} explains one step of the runbook." for s in range(12))
    for p in range(3)
)


class TestSourceIngest:
    def test_ingest_and_list_the_chunks(self, client_a):
        body = {"title": "Runbook", "content": DOC, "uri": "wiki://runbook", "actor": "ops"}
        response = post(client_a, "/api/v1/sources/ingest", body)
        assert response.status_code == 201, response.json()
        answer = response.json()
        source_id = answer["source"]["id"]
        chunks = list(SourceChunk.objects.filter(source_id=source_id).order_by("ordinal"))
        assert answer["created"] is True
        assert answer["chunks"] == len(chunks) == 3
        assert set(answer["source"]) == {
            "id",
            "title",
            "uri",
            "content_hash",
            "media_type",
            "source_event_id",
            "created_at",
        }
        assert (answer["source"]["title"], answer["source"]["uri"]) == ("Runbook", "wiki://runbook")
        listed = client_a.get(f"/api/v1/sources/{source_id}/chunks")
        assert listed.status_code == 200
        assert listed.json() == {
            "next": None,
            "previous": None,
            "results": [chunk_body(c) for c in chunks],
        }
        assert [c["text"] for c in listed.json()["results"]] == [
            DOC[c.char_start : c.char_end] for c in chunks
        ]
        # The ledger's own view of the source.
        assert client_a.get(f"/api/v1/sources/{source_id}").json()["content"] == DOC

    def test_the_same_content_again_is_200_and_writes_nothing(self, client_a):
        first = post(client_a, "/api/v1/sources/ingest", {"title": "Runbook", "content": DOC})
        before = memory_state()
        again = post(client_a, "/api/v1/sources/ingest", {"title": "Other", "content": DOC})
        assert again.status_code == 200
        assert again.json() == {**first.json(), "created": False}
        assert memory_state() == before

    def test_chunk_pages_and_vectors(self, client_a):
        source = SourceFactory(agent=client_a.agent, content=DOC)
        chunks = list(SourceChunk.objects.filter(source=source).order_by("ordinal"))
        from episodes.services import chunks_embed

        chunks_embed(chunk_ids=[chunks[0].pk], embedder=HashEmbedder())
        first = client_a.get(f"/api/v1/sources/{source.pk}/chunks", {"limit": 2})
        assert [c["ordinal"] for c in first.json()["results"]] == [0, 1]
        second = client_a.get(first.json()["next"])
        assert [c["ordinal"] for c in second.json()["results"]] == [2]
        full = client_a.get(
            f"/api/v1/sources/{source.pk}/chunks", {"include_embedding": "true"}
        ).json()["results"]
        assert full == [chunk_body(c, embedding=True) for c in chunks]
        assert [c["embedded"] for c in full] == [True, False, False]

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ({"content": DOC}, "title: This field is required."),
            ({"title": "T"}, "content: This field is required."),
            ({"title": "T", "content": ""}, "content: This field may not be blank."),
            (
                {"title": "T", "content": "  \n "},
                "content: send the document's text; to register a document by its hash alone, "
                "use POST /api/v1/sources",
            ),
            ({"title": "T", "content": DOC, "uri": "u" * 501}, "uri: at most 500 characters"),
            (
                {"title": "T", "content": DOC, "content_hash": "0" * 64},
                "content_hash: unknown field; allowed: actor, content, media_type, privacy_class, retention_class, title, uri",
            ),
            ({"title": 3, "content": DOC}, "title: Not a valid string."),
        ],
    )
    def test_bad_input_is_400_and_writes_nothing(self, client_a, body, message):
        before = memory_state()
        response = post(client_a, "/api/v1/sources/ingest", body)
        assert response.status_code == 400
        assert response.json()["error"]["message"] == message
        assert memory_state() == before

    def test_another_agents_source_is_404(self, client_a, client_b):
        theirs = SourceFactory(agent=client_b.agent, content=DOC)
        response = client_a.get(f"/api/v1/sources/{theirs.pk}/chunks")
        assert response.status_code == 404
        assert response.json() == error("not_found", f"source {theirs.pk} not found")
        assert len(client_b.get(f"/api/v1/sources/{theirs.pk}/chunks").json()["results"]) == 3

    def test_the_same_document_for_two_agents_is_two_sources(self, client_a, client_b):
        a = post(client_a, "/api/v1/sources/ingest", {"title": "Doc", "content": DOC}).json()
        b = post(client_b, "/api/v1/sources/ingest", {"title": "Doc", "content": DOC}).json()
        assert (a["created"], b["created"]) == (True, True)
        assert a["source"]["id"] != b["source"]["id"]
        a_chunks = client_a.get(f"/api/v1/sources/{a['source']['id']}/chunks").json()["results"]
        assert {c["source_id"] for c in a_chunks} == {a["source"]["id"]}
        assert client_a.get(f"/api/v1/sources/{b['source']['id']}/chunks").status_code == 404


def test_the_episode_endpoints_are_in_the_schema(client_a):
    schema = client_a.get("/api/schema/", {"format": "json"}).json()
    assert {
        "/api/v1/episodes",
        "/api/v1/episodes/{episode_id}",
        "/api/v1/sources/ingest",
        "/api/v1/sources/{source_id}/chunks",
    } <= set(schema["paths"])
    assert set(schema["paths"]["/api/v1/episodes"]) == {"get", "post"}
    assert schema["paths"]["/api/v1/episodes"]["get"]["operationId"] == "v1_episodes_list"


def test_occurred_at_keeps_its_instant(client_a):
    response = post(
        client_a, "/api/v1/episodes", {**FULL, "occurred_at": "2026-03-02T09:00:00.123456Z"}
    )
    assert Episode.objects.get(pk=response.json()["id"]).occurred_at == T0.replace(
        microsecond=123456
    )
