"""episodes.erasure with corrected and retracted episodes: erasing any version of an
episode erases all of them, their retraction and their corrections, and a rebuild
does not bring any back."""

import pytest

from episodes.models import Episode
from episodes.services import (
    EPISODE_CORRECTED,
    EPISODE_RETRACTED,
    episode_correct,
    episode_retract,
    rebuild_projection,
)
from episodes.tests.factories import EpisodeFactory, events_of
from forgetting.services.erasure import Selector, erasure_run
from ledger.models import Event
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def versions():
    agent = AgentFactory(name="versions")
    v1 = EpisodeFactory(agent=agent, summary="Alice's laptop was reimaged", entities=["alice"])
    v2 = episode_correct(
        agent=agent, episode_id=v1.pk, changes={"summary": "Alice's laptop was wiped"}
    )
    v3 = episode_correct(agent=agent, episode_id=v2.pk, changes={"outcome": "success"})
    episode_retract(agent=agent, episode_id=v3.pk, reason="it was Bob's laptop")
    kept = EpisodeFactory(agent=agent, summary="Bob's laptop was reimaged", related_ids=[v3.pk])
    return agent, [v1, v2, v3], kept


@pytest.mark.parametrize("which", [0, 1, 2])
def test_erasing_any_version_erases_every_version(versions, which):
    agent, chain, kept = versions
    result = erasure_run(
        agent=agent,
        selector=Selector(event_ids=(chain[which].raw_event_id,)),
        reason="subject access request",
        requested_by="test",
    )
    assert result.receipt.residue_found == 0
    assert list(Episode.objects.filter(agent=agent).values_list("pk", flat=True)) == [kept.pk]
    assert Episode.objects.get(pk=kept.pk).related_ids == []
    withdrawals = events_of(agent, EPISODE_CORRECTED) + events_of(agent, EPISODE_RETRACTED)
    assert len(withdrawals) == 3
    raw = [v.raw_event_id for v in chain]
    assert all(e.redacted_at is not None for e in Event.objects.filter(pk__in=raw))
    assert all(e.redacted_at is not None for e in withdrawals)
    rebuild_projection(agent=agent)
    assert list(Episode.objects.filter(agent=agent).values_list("pk", flat=True)) == [kept.pk]


def test_erasing_by_subject_reaches_the_corrected_versions(versions):
    from facts.services import entity_create

    agent, chain, kept = versions
    entity_create(agent=agent, name="Alice")
    result = erasure_run(
        agent=agent, selector=Selector(subject="alice"), reason="gone", requested_by="test"
    )
    assert result.receipt.residue_found == 0
    assert not Episode.objects.filter(pk__in=[v.pk for v in chain]).exists()
