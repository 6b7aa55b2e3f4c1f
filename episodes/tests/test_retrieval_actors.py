"""A question that names one of the agent's actors: the names are left out of
the query vector (query_analysis), so the episodes whose actor it names are a
list of their own in the fusion (fusion._actor_list). Synthetic vectors stand
in for what the model does without the name: every rollout looks alike to it,
the one the question asks about not the nearest."""

from __future__ import annotations

from datetime import timedelta

import pytest

from episodes.retrieval import episode_search, fusion, query_analysis
from episodes.tests.retrieval_fixtures import T0, record, topic

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(days=14)
LEADS = ["Dana Weiss", "Emile Roux", "Farah Haddad", "Bo Chen", "Ana Lima"]
OTHERS = ["Ivo Brandt", "Goran Petrov", "Hana Sato", "Jun Park"]
QUESTION = "How did the report builder rollout led by Ana Lima go?"


@pytest.fixture(autouse=True)
def _fresh_actors():
    query_analysis.forget_actors()
    yield
    query_analysis.forget_actors()


def _near(rank: int) -> list[float]:
    """Nearer to the query vector (topic 1) the smaller `rank`."""
    return topic(1, mix={2: 0.1 * (rank + 1)})


@pytest.fixture
def rollouts(agent_a):
    """Five rollouts of one service that differ in who led them, and routine work
    of other people on the same service; the vector list puts Ana Lima's rollout last."""
    episodes = {}
    for day, lead in enumerate(LEADS):
        episodes[lead] = record(
            agent_a,
            summary=f"Rolled out release 2.8.8 of the report builder led by {lead}",
            action=f"Deployed 2.8.8 of the report builder to every node led by {lead}",
            observation="The canary stayed healthy for 40 minutes",
            actor=lead,
            session_id=f"rollout-{day}",
            occurred_at=T0 + timedelta(days=day),
            embedding=_near(len(OTHERS) + (day if lead != "Ana Lima" else 10)),
        )
    for rank, other in enumerate(OTHERS):
        record(
            agent_a,
            summary=f"{other} reviewed pull request #{5183 + rank} for the report builder",
            actor=other,
            session_id=f"routine-{rank}",
            occurred_at=T0 + timedelta(days=10, hours=rank),
            embedding=_near(rank),
        )
    return episodes


def test_the_episode_whose_actor_the_question_names_ranks_first(agent_a, rollouts):
    result = episode_search(
        agent=agent_a, query=QUESTION, query_embedding=topic(1), now=NOW, abstain=False
    )
    top = result.hits[0]
    assert top.obj.pk == rollouts["Ana Lima"].pk
    # The vector list alone would not say so: her rollout is its last.
    assert top.signals["vector_position"] == len(result.hits)
    assert (top.signals["named_actor"], top.signals["actors_position"]) == (1, 1)
    others = [h for h in result.hits if h.obj.actor != "Ana Lima"]
    assert {h.signals["named_actor"] for h in others} == {0}
    assert all("actors_position" not in h.signals for h in others)


def test_each_lead_is_told_from_the_others(agent_a, rollouts):
    for lead, episode in rollouts.items():
        question = f"How did the report builder rollout led by {lead} go?"
        result = episode_search(
            agent=agent_a, query=question, query_embedding=topic(1), now=NOW, abstain=False
        )
        assert result.hits[0].obj.pk == episode.pk, lead


def test_without_a_named_actor_there_is_no_actor_list(agent_a, rollouts):
    result = episode_search(
        agent=agent_a,
        query="How did the report builder rollout go?",
        query_embedding=topic(1),
        now=NOW,
        abstain=False,
    )
    assert all(
        "actors_position" not in h.signals and "named_actor" not in h.signals for h in result.hits
    )


def test_the_actor_list_is_a_match_not_a_ranking(agent_a, rollouts):
    """Every episode of the named actor gains the same: its list's first place."""
    record(
        agent_a,
        summary="Ana Lima answered a support ticket about the billing dashboard",
        actor="Ana Lima",
        session_id="routine-ana",
        occurred_at=T0 + timedelta(days=12),
        embedding=topic(40),
    )
    result = episode_search(
        agent=agent_a, query=QUESTION, query_embedding=topic(1), now=NOW, abstain=False
    )
    hers = [h for h in result.hits if h.obj.actor == "Ana Lima"]
    assert len(hers) == 2
    assert {h.signals["actors_position"] for h in hers} == {1}
    assert fusion.SIGNAL_WEIGHTS["actors"] > 0
