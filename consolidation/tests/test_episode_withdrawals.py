"""Consolidation and episodes that are retracted or corrected after it read them:
the candidates they supported lose that support (a candidate left with none is
withdrawn and its fact retracted), and a corrected version is consolidated as a
new episode. Through the real services and the Celery task functions."""

from __future__ import annotations

import pytest

from consolidation import tasks
from consolidation.models import CandidateEvidence, CandidateFact, ConsolidationRun
from consolidation.tests.factories import candidates, event_types, said, state
from episodes.services import episode_correct, episode_retract
from facts import selectors as facts_selectors
from facts.models import Entity, Fact, Predicate
from ledger.models import Event
from piper.api.serializers import api_datetime
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent():
    return AgentFactory(name="withdrawer")


def consolidate_task(agent) -> dict:
    """The Celery task, run eagerly: what celery-beat's consolidate_due queues."""
    return tasks.consolidate_agent.apply(args=[str(agent.pk)]).get()


def current(agent, subject: str, predicate: str) -> list[str]:
    entity = Entity.objects.get(agent=agent, name__iexact=subject)
    predicate = Predicate.objects.get(agent=agent, name=predicate)
    return [
        f.object_value
        for f in facts_selectors.facts_current(agent=agent, subject=entity, predicate=predicate)
    ]


def last(agent, event_type: str) -> Event:
    return Event.objects.filter(agent=agent, event_type=event_type).latest("seq")


class TestRetracted:
    def test_a_candidate_whose_only_episode_is_retracted_is_withdrawn_and_its_fact_retracted(
        self, agent
    ):
        episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
        consolidate_task(agent)
        [candidate] = CandidateFact.objects.filter(agent=agent)
        assert (candidate.status, current(agent, "Alice Chen", "location")) == (
            "asserted",
            ["Berlin"],
        )

        episode_retract(agent=agent, episode_id=episode.pk, reason="it was Bern")
        result = consolidate_task(agent)

        run = ConsolidationRun.objects.get(pk=result["run"])
        assert (run.status, run.episodes_read, run.details["withdrawn"]) == (
            "succeeded",
            0,
            {"withdrawn": 1},
        )
        candidate.refresh_from_db()
        assert (candidate.status, candidate.decided_by, candidate.reason) == (
            "withdrawn",
            "consolidation",
            "every supporting episode withdrawn",
        )
        retraction = last(agent, "episode.retracted")
        evidence = CandidateEvidence.objects.get(candidate=candidate)
        assert (evidence.withdrawn_by_id, evidence.withdrawn_at is not None) == (
            retraction.pk,
            True,
        )
        assert current(agent, "Alice Chen", "location") == []
        fact = Fact.objects.get(pk=candidate.fact_id)
        assert fact.superseded_at is not None  # no longer believed
        withdrawn = last(agent, "consolidation.candidate_withdrawn")
        assert withdrawn.payload == {
            "candidate_id": str(candidate.pk),
            "run_id": str(run.pk),
            "withdrawn_event_ids": [str(episode.raw_event_id)],
            "withdrawn_by": [str(retraction.pk)],
            "previous_status": "asserted",
            "status": "withdrawn",
            "confidence": None,
            "sources": 0,
            "retracted_fact_id": str(candidate.fact_id),
        }
        assert candidate.decision_event_id == withdrawn.pk

    def test_a_redelivered_task_withdraws_nothing_twice(self, agent):
        episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync")
        consolidate_task(agent)
        episode_retract(agent=agent, episode_id=episode.pk, reason="wrong person")
        consolidate_task(agent)
        before = state(agent)

        assert consolidate_task(agent) == {"run": None}

        assert state(agent) == before
        assert event_types(agent).count("consolidation.candidate_withdrawn") == 1

    def test_another_source_keeps_the_claim_on_what_it_says(self, agent):
        kept = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
        gone = said(agent, "Alice Chen moved to Berlin.", minutes=1, actor="alice", session_id="s2")
        consolidate_task(agent)
        assert candidates(agent) == [("Alice Chen", "location", "Berlin", "asserted", 2, 2)]

        episode_retract(agent=agent, episode_id=gone.pk, reason="a test message")
        consolidate_task(agent)

        candidate = CandidateFact.objects.get(agent=agent)
        assert (candidate.status, candidate.sources) == ("asserted", 1)
        assert candidate.evidence.filter(withdrawn_at__isnull=True).get().event_id == (
            kept.raw_event_id
        )
        assert current(agent, "Alice Chen", "location") == ["Berlin"]
        weakened = last(agent, "consolidation.candidate_weakened")
        assert (
            weakened.payload["previous_status"],
            weakened.payload["status"],
            weakened.payload["sources"],
            weakened.payload["retracted_fact_id"],
        ) == ("asserted", "asserted", 1, None)

    def test_below_the_bar_without_it_the_candidate_waits_again(self, agent, settings):
        settings.CONSOLIDATION_MIN_SOURCES = 2
        said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
        gone = said(agent, "Alice Chen moved to Berlin.", minutes=1, actor="alice", session_id="s2")
        consolidate_task(agent)
        candidate = CandidateFact.objects.get(agent=agent)
        fact_id = candidate.fact_id
        assert candidate.status == "asserted"

        episode_retract(agent=agent, episode_id=gone.pk, reason="a test message")
        consolidate_task(agent)

        candidate.refresh_from_db()
        assert (candidate.status, candidate.sources, candidate.fact_id, candidate.decided_at) == (
            "proposed",
            1,
            None,
            None,
        )
        assert current(agent, "Alice Chen", "location") == []
        assert last(agent, "consolidation.candidate_weakened").payload["retracted_fact_id"] == (
            str(fact_id)
        )
        # A new source lifts it over the bar again, on the same candidate.
        said(agent, "Alice Chen moved to Berlin.", minutes=2, actor="bob", session_id="s3")
        consolidate_task(agent)
        assert candidates(agent) == [("Alice Chen", "location", "Berlin", "asserted", 2, 3)]
        assert current(agent, "Alice Chen", "location") == ["Berlin"]

    def test_a_person_accepted_claim_stays_asserted_on_what_is_left(self, agent, settings):
        settings.CONSOLIDATION_MIN_SOURCES = 3
        said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
        gone = said(agent, "Alice Chen moved to Berlin.", minutes=1, actor="alice", session_id="s2")
        consolidate_task(agent)
        from consolidation.services import candidate_accept

        candidate = CandidateFact.objects.get(agent=agent)
        candidate_accept(agent=agent, candidate_id=candidate.pk, actor="reviewer")

        episode_retract(agent=agent, episode_id=gone.pk, reason="a test message")
        consolidate_task(agent)

        candidate.refresh_from_db()
        assert (candidate.status, candidate.decided_by, candidate.sources) == (
            "asserted",
            "reviewer",
            1,
        )
        assert current(agent, "Alice Chen", "location") == ["Berlin"]

    def test_retracted_before_any_run_read_it_it_is_never_evidence(self, agent):
        episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync")
        episode_retract(agent=agent, episode_id=episode.pk, reason="never happened")

        consolidate_task(agent)

        assert candidates(agent) == []
        assert "consolidation.candidate_withdrawn" not in event_types(agent)

    def test_the_beat_queues_an_agent_with_a_retraction_after_its_last_run(
        self, agent, monkeypatch
    ):
        episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync")
        consolidate_task(agent)
        tasks.consolidate_agent.apply(args=[str(agent.pk), "duplicates"])
        queued = []
        monkeypatch.setattr(tasks.consolidate_agent, "delay", lambda *a: queued.append(a))
        assert tasks.consolidate_due() == 0

        episode_retract(agent=agent, episode_id=episode.pk, reason="wrong")

        assert tasks.consolidate_due() == 1
        assert queued == [(str(agent.pk), "facts")]


class TestCorrected:
    def test_the_corrected_text_is_consolidated_and_the_old_claim_withdrawn(self, agent):
        episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
        consolidate_task(agent)

        corrected = episode_correct(
            agent=agent,
            episode_id=episode.pk,
            changes={"summary": "Alice Chen moved to Lisbon."},
            reason="typo in the city",
        )
        consolidate_task(agent)

        assert candidates(agent) == [
            ("Alice Chen", "location", "Berlin", "withdrawn", 1, 1),
            ("Alice Chen", "location", "Lisbon", "asserted", 1, 1),
        ]
        assert current(agent, "Alice Chen", "location") == ["Lisbon"]
        lisbon = CandidateFact.objects.get(agent=agent, value="Lisbon")
        assert list(lisbon.evidence.values_list("episode_id", "event_id")) == [
            (corrected.pk, corrected.raw_event_id)
        ]
        berlin = CandidateFact.objects.get(agent=agent, value="Berlin")
        assert berlin.evidence.get().withdrawn_by_id == corrected.raw_event_id

    def test_a_correction_that_keeps_the_claim_keeps_it_on_the_new_version(self, agent):
        episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
        consolidate_task(agent)
        candidate = CandidateFact.objects.get(agent=agent)
        fact_id = candidate.fact_id

        corrected = episode_correct(
            agent=agent, episode_id=episode.pk, changes={"action": "read the HR directory"}
        )
        consolidate_task(agent)

        candidate.refresh_from_db()
        assert (candidate.status, candidate.sources, candidate.fact_id) == ("asserted", 1, fact_id)
        assert list(
            candidate.evidence.filter(withdrawn_at__isnull=True).values_list("event_id", flat=True)
        ) == [corrected.raw_event_id]
        assert current(agent, "Alice Chen", "location") == ["Berlin"]
        assert "consolidation.candidate_withdrawn" not in event_types(agent)

    def test_corrected_before_any_run_only_the_new_version_is_read(self, agent):
        episode = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync")
        episode_correct(
            agent=agent, episode_id=episode.pk, changes={"summary": "Alice Chen moved to Lisbon."}
        )

        consolidate_task(agent)

        assert candidates(agent) == [("Alice Chen", "location", "Lisbon", "asserted", 1, 1)]


def test_the_api_shows_which_evidence_was_withdrawn_and_by_what(client_a):
    agent = client_a.agent
    kept = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
    gone = said(agent, "Alice Chen moved to Berlin.", minutes=1, actor="alice", session_id="s2")
    consolidate_task(agent)
    retraction = episode_retract(agent=agent, episode_id=gone.pk, reason="a test message")
    consolidate_task(agent)
    candidate = CandidateFact.objects.get(agent=agent)

    body = client_a.get(f"/api/v1/consolidation/candidates/{candidate.pk}").json()

    withdrawn_at = CandidateEvidence.objects.get(event_id=gone.raw_event_id).withdrawn_at
    assert (body["status"], body["sources"]) == ("asserted", 1)
    assert [
        (e["event_id"], e["withdrawn_at"], e["withdrawn_by_event_id"]) for e in body["evidence"]
    ] == [
        (str(kept.raw_event_id), None, None),
        (
            str(gone.raw_event_id),
            api_datetime(withdrawn_at),
            str(last(agent, "episode.retracted").pk),
        ),
    ]
    assert retraction.status == "retracted"
