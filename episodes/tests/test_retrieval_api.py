"""GET /api/v1/episodes/search and /api/v1/sources/search: the plumbing, with a
stand-in embedder (HashEmbedder: a vector per text, nothing semantic); what the
vectors mean is tested with the real model in test_retrieval_embeddings.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from episodes import retrieval
from episodes.models import Episode
from episodes.tests.factories import T0, HashEmbedder, SourceFactory, memory_state
from episodes.tests.retrieval_fixtures import record

pytestmark = pytest.mark.django_db

URL = "/api/v1/episodes/search"
SOURCES_URL = "/api/v1/sources/search"


@pytest.fixture(autouse=True)
def embedder(monkeypatch):
    stand_in = HashEmbedder()
    monkeypatch.setattr("piper.embeddings.get_embedder", lambda: stand_in)
    retrieval.forget_statistics()
    return stand_in


def embedded(agent, embedder, **fields) -> Episode:
    episode = record(agent, **fields)
    vector = embedder.vector(Episode.objects.get(pk=episode.pk).embedding_text())
    Episode.objects.filter(pk=episode.pk).update(embedding=vector, embedding_model=embedder.name)
    return Episode.objects.get(pk=episode.pk)


@pytest.fixture
def history(agent_a, embedder):
    return {
        "oom": embedded(
            agent_a,
            embedder,
            summary="ECS task OOM-killed during the nightly batch run",
            session_id="s1",
            actor="ops",
            occurred_at=T0,
        ),
        "retry": embedded(
            agent_a,
            embedder,
            summary="Retried the nightly batch with 4 GB; it passed",
            session_id="s2",
            actor="ops",
            occurred_at=T0 + timedelta(days=1),
        ),
        "lunch": embedded(
            agent_a, embedder, summary="Ordered lunch", session_id="s1", occurred_at=T0
        ),
    }


def test_hits_carry_the_episode_score_and_signals(client_a, history, embedder):
    response = client_a.get(URL, {"q": "nightly batch", "abstain": "false", "limit": 2})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "abstained",
        "evidence_score",
        "threshold",
        "threshold_source",
        "metric",
        "embedding_model",
        "vector_strategy",
        "hits",
        "near_misses",
        "groups",
    }
    assert body["abstained"] is False
    assert body["embedding_model"] == embedder.name
    assert body["threshold"] == retrieval.DEFAULT_ABSTENTION_THRESHOLD
    assert body["threshold_source"] == "default"
    assert body["metric"] == retrieval.EVIDENCE_METRIC
    assert body["vector_strategy"] == "exact"
    assert len(body["hits"]) == 2
    first = body["hits"][0]
    assert first["kind"] == "episode"
    assert first["episode"]["id"] in {str(history["oom"].pk), str(history["retry"].pk)}
    assert first["episode"]["embedded"] is True
    assert "embedding" not in first["episode"]
    assert first["signals"]["text_position"] == 1
    assert isinstance(first["score"], float)
    assert body["near_misses"] == []


def test_groups_are_by_session_in_time_order(client_a, history):
    body = client_a.get(URL, {"q": "nightly batch lunch", "abstain": "false"}).json()
    groups = body["groups"]
    assert [g["session_id"] for g in groups] == ["s1", "s2"]
    assert set(groups[0]["episode_ids"]) == {str(history["oom"].pk), str(history["lunch"].pk)}
    assert groups[1]["episode_ids"] == [str(history["retry"].pk)]
    assert groups[1]["first_occurred_at"] == "2026-03-03T09:00:00Z"


def test_filters_and_entities_reach_the_search(client_a, history):
    body = client_a.get(
        URL,
        {
            "q": "nightly batch",
            "abstain": "false",
            "actor": "ops",
            "session_id": "s2",
            "occurred_after": "2026-03-03T00:00:00Z",
            "occurred_before": "2026-03-04T00:00:00+00:00",
            "entities": "ecs, batch",
        },
    ).json()
    assert [h["episode"]["id"] for h in body["hits"]] == [str(history["retry"].pk)]
    assert body["hits"][0]["signals"]["shared_entities"] == 0


def test_an_abstained_answer_has_near_misses_and_no_hits(client_a, history):
    body = client_a.get(URL, {"q": "when did we migrate to Oracle?"}).json()
    # A hash vector is as far from every other as chance makes it.
    assert body["abstained"] is True
    assert body["hits"] == []
    assert body["groups"] == []
    assert 1 <= len(body["near_misses"]) <= retrieval.NEAR_MISSES
    assert body["evidence_score"] < body["threshold"]


def test_another_agents_episodes_are_not_found(client_a, client_b, history):
    body = client_b.get(URL, {"q": "nightly batch", "abstain": "false"}).json()
    assert (body["hits"], body["near_misses"]) == ([], [])


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({}, "q", "q: This field is required."),
        ({"q": ""}, "q", "q: This field may not be blank."),
        ({"q": "   "}, "q", "q: This field may not be blank."),
        ({"q": "x" * 2001}, "q", "q: Ensure this field has no more than 2000 characters."),
        (
            {"q": "x", "colour": "red"},
            "colour",
            "colour: unknown field; allowed: abstain, actor, entities, environment, goal_id, "
            "limit, occurred_after, occurred_before, outcome, q, session_id, task_id",
        ),
        (
            {"q": "x", "limit": "0"},
            "limit",
            "limit: Ensure this value is greater than or equal to 1.",
        ),
        (
            {"q": "x", "limit": "101"},
            "limit",
            "limit: Ensure this value is less than or equal to 100.",
        ),
        ({"q": "x", "outcome": "won"}, "outcome", 'outcome: "won" is not a valid choice.'),
        (
            {"q": "x", "occurred_after": "2026-03-01T00:00:00"},
            "occurred_after",
            "occurred_after: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
        ),
        ({"q": "x", "abstain": "maybe"}, "abstain", "abstain: Must be a valid boolean."),
    ],
)
def test_bad_queries_are_400(client_a, history, embedder, params, field, message):
    before = memory_state()
    response = client_a.get(URL, params)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"] == message
    assert field in error["details"]
    assert embedder.calls == []
    assert memory_state() == before


def test_a_window_that_ends_before_it_starts_is_400(client_a, embedder):
    response = client_a.get(
        URL,
        {
            "q": "x",
            "occurred_after": "2026-03-05T00:00:00Z",
            "occurred_before": "2026-03-01T00:00:00Z",
        },
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "invalid_time_window",
        "message": "occurred_before: the time window ends before it starts; "
        "occurred_before must not be earlier than occurred_after",
        "details": {"occurred_before": ["must not be earlier than occurred_after"]},
    }
    assert embedder.calls == []


def test_search_needs_a_key(anonymous_client):
    assert anonymous_client.get(URL, {"q": "x"}).status_code == 401
    assert anonymous_client.get(SOURCES_URL, {"q": "x"}).status_code == 401


def test_a_read_only_key_may_search(read_only_client):
    assert read_only_client.get(URL, {"q": "x"}).status_code == 200


# ------------------------------------------------------------------- sources


def test_source_search_finds_chunks(client_a, embedder):
    source = SourceFactory(
        agent=client_a.agent, title="Runbook", content="Promote the replica with pg_ctl promote."
    )
    SourceFactory(agent=client_a.agent, title="Menu", content="Lunch is at noon.")
    body = client_a.get(SOURCES_URL, {"q": "promote replica", "abstain": "false"}).json()
    assert body["hits"][0]["kind"] == "chunk"
    assert body["hits"][0]["chunk"]["source_id"] == str(source.pk)
    assert body["hits"][0]["chunk"]["text"] == "Promote the replica with pg_ctl promote."
    assert body["groups"][0]["source_id"] == str(source.pk)
    only = client_a.get(
        SOURCES_URL, {"q": "promote replica", "source_id": str(source.pk), "abstain": "false"}
    ).json()
    assert {h["chunk"]["source_id"] for h in only["hits"]} == {str(source.pk)}


def test_another_agents_source_is_404(client_a, client_b):
    theirs = SourceFactory(agent=client_b.agent, title="Theirs", content="Secret plans.")
    response = client_a.get(SOURCES_URL, {"q": "plans", "source_id": str(theirs.pk)})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"q": ""}, "q: This field may not be blank."),
        ({"q": "x", "source_id": "nope"}, "source_id: Must be a valid UUID."),
        (
            {"q": "x", "actor": "a"},
            "actor: unknown field; allowed: abstain, limit, q, source_id",
        ),
    ],
)
def test_bad_source_queries_are_400(client_a, params, message):
    response = client_a.get(SOURCES_URL, params)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == message
