"""Retrieval with the real embedding model (slow): meaning without shared words,
and "I don't know" when nothing supports an answer."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from episodes import retrieval
from episodes.models import Episode
from episodes.retrieval import episode_search
from episodes.retrieval.calibration import DEFAULT_DATA, _draft
from episodes.services import EpisodeDraft, episodes_record
from piper.embeddings import get_embedder

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

OOM = "ECS task OOM-killed during the nightly batch run; raised memory to 4 GB"


@pytest.fixture
def memory(agent_a):
    """The calibration set's 40 episodes of an operations agent (the OOM incident a
    month ago among them), embedded with the real model."""
    now = timezone.now()
    data = json.loads(DEFAULT_DATA.read_text())
    drafts = [
        _draft(EpisodeDraft, e, now - timedelta(days=e["days_ago"])) for e in data["episodes"]
    ]
    episodes = episodes_record(agent=agent_a, drafts=drafts)
    embedder = get_embedder()
    for episode, vector in zip(
        episodes, embedder.embed([e.embedding_text() for e in episodes]), strict=True
    ):
        Episode.objects.filter(pk=episode.pk).update(
            embedding=vector, embedding_model=embedder.name, embedded_at=now
        )
    retrieval.forget_statistics()
    return {e.summary: e for e in episodes}


def test_the_batch_job_keeps_dying_finds_last_months_oom_incident(agent_a, memory):
    result = episode_search(agent=agent_a, query="the batch job keeps dying halfway through")
    assert result.abstained is False
    top = result.hits[0]
    assert top.obj.summary == OOM
    assert top.signals["vector_position"] == 1
    assert (timezone.now() - top.obj.occurred_at).days == 31
    assert result.embedding_model == get_embedder().name


def test_a_paraphrase_sharing_no_word_with_the_incident_finds_it(agent_a, memory):
    query = "our overnight processing container ran out of RAM"
    result = episode_search(agent=agent_a, query=query)
    assert result.lexemes == ("overnight", "process", "contain", "ran", "ram")
    assert result.hits[0].obj.summary == OOM
    assert result.hits[0].signals["coverage"] == 0.0


def test_a_question_about_something_that_never_happened_abstains(agent_a, memory):
    result = episode_search(agent=agent_a, query="when did Bob go on parental leave?")
    assert result.abstained is True
    assert result.hits == []
    assert len(result.near_misses) == retrieval.NEAR_MISSES
    assert result.evidence_score < result.threshold
    assert result.threshold_source == "default"


def test_the_api_embeds_the_query_and_finds_the_incident(client_a, memory):
    response = client_a.get(
        "/api/v1/episodes/search", {"q": "the batch job keeps dying halfway through"}
    )
    assert response.status_code == 200
    body = response.json()
    assert body["abstained"] is False
    assert body["hits"][0]["episode"]["summary"] == OOM
    assert body["embedding_model"] == get_embedder().name
