"""Session context in episode search: neighbours join the candidates and lend their signals."""

import uuid
from datetime import timedelta

import pytest

from episodes import retrieval
from episodes.retrieval import SearchFilters, episode_search, fetch, fusion
from episodes.retrieval.session_context import spread, symmetric

from .retrieval_fixtures import T0, record, set_embedding, topic

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(days=1)
NOWHERE = topic(300)


@pytest.fixture(autouse=True)
def _fresh_statistics():
    retrieval.forget_statistics()
    yield
    retrieval.forget_statistics()


A, B, C, D = (uuid.UUID(int=i) for i in range(1, 5))


def test_spread_adds_a_share_of_the_best_neighbour():
    related = symmetric({A: [B], C: [B, D]})
    assert related == {A: {B}, B: {A, C}, C: {B, D}, D: {C}}
    values = {A: 1.0, B: None, C: 0.4, D: 0.2}
    assert spread(values, related, weight=0.5) == {
        A: 1.0,  # its neighbour B has no value
        B: 0.5,  # none of its own: half of A's (the better of A and C)
        C: 0.4 + 0.5 * 0.2,  # B has none, D 0.2
        D: 0.2 + 0.5 * 0.4,
    }


def test_spread_measures_above_the_floor_and_keeps_none_without_neighbours():
    related = symmetric({A: [B]})
    assert spread({A: 0.3, B: 0.5, C: None}, related, weight=0.5, floor=0.2) == {
        A: pytest.approx(0.3 + 0.5 * (0.5 - 0.2)),
        B: pytest.approx(0.5 + 0.5 * (0.3 - 0.2)),
        C: None,
    }
    # a neighbour at or below the floor lends nothing
    assert spread({A: 0.3, B: 0.1}, related, weight=0.5, floor=0.2) == {
        A: 0.3,
        B: pytest.approx(0.1 + 0.05),
    }


def _conversation(agent):
    """Two sessions; the answer to "what fixed the deploy" shares no word with it."""
    turns = [
        ("s1", "ops", "Did you ever get the flaky deploy working again?"),
        ("s1", "dev", "Yes: pinning the resolver in the base image solved it."),
        ("s1", "ops", "Great, thanks for the update."),
        ("s2", "ops", "Lunch at noon on Thursday?"),
        ("s2", "dev", "Sure, the usual place."),
    ]
    return [
        record(
            agent,
            summary=text,
            actor=actor,
            session_id=session,
            occurred_at=T0 + timedelta(minutes=i),
        )
        for i, (session, actor, text) in enumerate(turns)
    ]


def _search(agent, query, **kwargs):
    return episode_search(
        agent=agent, query=query, query_embedding=NOWHERE, now=NOW, abstain=False, **kwargs
    )


def test_the_turn_after_a_matching_one_joins_the_hits_through_its_context(agent_a):
    question, answer, thanks, *_ = _conversation(agent_a)
    result = _search(agent_a, "flaky deploy")
    # the answer matches no word: it is found as the question's neighbour, and
    # only the adjacent turn is (the thanks is two turns away)
    assert [h.obj.pk for h in result.hits] == [question.pk, answer.pk]
    own, lent = result.hits[0].signals, result.hits[1].signals
    assert (lent["text_rank"], lent["coverage"], lent["evidence"]) == (None, None, None)
    weights = fusion.CONTEXT_WEIGHTS
    assert lent["context_text_rank"] == pytest.approx(
        weights["text_rank"] * own["text_rank"], abs=1e-6
    )
    assert lent["context_coverage"] == pytest.approx(weights["coverage"] * own["coverage"])
    assert "context_text_rank" not in own  # its neighbour had nothing to lend


def test_neighbours_obey_the_filters(agent_a):
    question, answer, thanks, *_ = _conversation(agent_a)
    result = _search(agent_a, "flaky deploy", filters=SearchFilters(actor="ops"))
    ids = [h.obj.pk for h in result.hits]
    # dev's answer is not an ops episode: the question's neighbour under the filter is the thanks
    assert answer.pk not in ids
    assert ids == [question.pk, thanks.pk]


def test_neighbours_are_read_again_when_the_exact_scan_replaces_the_candidates(
    agent_a, monkeypatch
):
    """The hybrid statement brings the neighbours of its candidates; when the graph
    walk finds too few and the exact scan changes the candidates, they are read
    again on their own, and the answer is the exact plan's."""
    turns = _conversation(agent_a)
    for i, turn in enumerate(turns):
        set_embedding(turn, topic(i))
    question, answer = turns[0], turns[1]
    expected = _search(agent_a, "flaky deploy")
    assert expected.vector_strategy == "exact"
    assert answer.pk in [h.obj.pk for h in expected.hits]
    # As if the agent's rows had been counted far above the exact-scan limit.
    monkeypatch.setattr(fetch, "_cached_filtered_count", lambda key: 10**6)

    result = _search(agent_a, "flaky deploy")

    assert result.vector_strategy == "hnsw+exact"
    assert [(h.obj.pk, h.signals) for h in result.hits] == [
        (h.obj.pk, h.signals) for h in expected.hits
    ]
    lent = next(h.signals for h in result.hits if h.obj.pk == answer.pk)
    assert lent["context_text_rank"] > 0  # lent by the question, its neighbour
    assert question.pk in [h.obj.pk for h in result.hits]


def test_episodes_without_a_session_have_no_neighbours(agent_a):
    record(agent_a, summary="the flaky deploy again", occurred_at=T0)
    other = record(agent_a, summary="unrelated note", occurred_at=T0 + timedelta(minutes=1))
    result = _search(agent_a, "flaky deploy")
    assert other.pk not in [h.obj.pk for h in result.hits]


def test_context_off_leaves_the_neighbours_out(agent_a, monkeypatch):
    question, answer, *_ = _conversation(agent_a)
    monkeypatch.setattr(
        fusion, "CONTEXT_WEIGHTS", {"text_rank": 0.0, "similarity": 0.0, "coverage": 0.0}
    )
    result = _search(agent_a, "flaky deploy")
    assert [h.obj.pk for h in result.hits] == [question.pk]


def test_abstention_compares_the_episodes_own_evidence(agent_a):
    """A neighbour's context ranks it; it does not make the search more confident."""
    _conversation(agent_a)
    with_context = _search(agent_a, "flaky deploy")
    own = max(h.signals["evidence"] for h in with_context.hits if h.signals["evidence"] is not None)
    assert with_context.evidence_score == own
    for hit in with_context.hits:
        if hit.signals["text_rank"] is None:
            assert hit.signals["evidence"] is None or hit.signals["evidence"] <= own


def test_an_episode_gains_a_share_of_its_sessions_best_score(agent_a, monkeypatch):
    monkeypatch.setattr(fusion, "SALIENCE_WEIGHT", 0.0)  # the boost alone
    monkeypatch.setattr(fusion, "AUTHORITY_WEIGHT", 0.0)
    monkeypatch.setattr(
        fusion, "CONTEXT_WEIGHTS", {"text_rank": 0.0, "similarity": 0.0, "coverage": 0.0}
    )
    _conversation(agent_a)
    lone = record(agent_a, summary="resolver notes", occurred_at=T0 + timedelta(hours=1))
    result = _search(agent_a, "resolver deploy")
    by_summary = {h.obj.summary: h for h in result.hits}
    best = max(h.signals.get("session_best") or 0 for h in result.hits)
    question = by_summary["Did you ever get the flaky deploy working again?"]
    answer = by_summary["Yes: pinning the resolver in the base image solved it."]
    # both s1 turns carry s1's best fused score; the sessionless row carries none
    assert question.signals["session_best"] == answer.signals["session_best"] == best
    assert "session_best" not in by_summary[lone.summary].signals
    weight = fusion.SESSION_WEIGHT
    assert weight > 0
    monkeypatch.setattr(fusion, "SESSION_WEIGHT", 0.0)
    unboosted = {h.obj.summary: h.score for h in _search(agent_a, "resolver deploy").hits}
    assert answer.score == pytest.approx(unboosted[answer.obj.summary] + weight * best, abs=1e-5)
    assert by_summary[lone.summary].score == pytest.approx(unboosted[lone.summary], abs=1e-6)
