"""Erasing the episodes a candidate fact was read from takes the candidate and
the fact it asserted; erasing some of them keeps it on what survives; nothing
comes back on the next run or a rebuild."""

from __future__ import annotations

import pytest

from consolidation.models import CandidateEvidence, CandidateFact
from consolidation.services import consolidate
from consolidation.tests.factories import said
from facts.models import Fact
from facts.services import rebuild_projection
from facts.tests.test_projection import snapshot
from forgetting.services.erasure import Selector, erasure_run
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def erase(agent, *episodes):
    return erasure_run(
        agent=agent,
        selector=Selector(event_ids=tuple(e.raw_event_id for e in episodes)),
        reason="test",
        requested_by="test",
    )


def test_erasing_every_source_of_a_candidate_takes_it_and_its_fact():
    agent = AgentFactory()
    moved = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync")
    said(agent, "OPS-12 is assigned to Priya.", minutes=2, actor="triage")
    consolidate(agent=agent)
    assert Fact.objects.filter(agent=agent, object_value="Berlin").exists()

    result = erase(agent, moved)

    assert result.receipt.residue_found == 0, [f for f in result.residue if f["found"]]
    assert result.counts["consolidation_candidates"] == 1
    assert not CandidateFact.objects.filter(agent=agent, value="Berlin").exists()
    assert not Fact.objects.filter(agent=agent, object_value="Berlin").exists()
    assert Fact.objects.filter(agent=agent, object_value="Priya").exists()  # not asked
    live = snapshot(agent=agent)
    rebuild_projection(agent=agent)
    assert snapshot(agent=agent) == live
    assert consolidate(agent=agent) is None  # nothing to read again
    assert not CandidateFact.objects.filter(agent=agent, value="Berlin").exists()


def test_erasing_one_of_two_sources_keeps_the_candidate_on_the_other():
    agent = AgentFactory()
    first = said(agent, "Alice Chen moved to Berlin.", actor="hr-sync", session_id="s1")
    second = said(agent, "Alice Chen moved to Berlin.", minutes=5, actor="payroll", session_id="s2")
    consolidate(agent=agent)
    candidate = CandidateFact.objects.get(agent=agent, value="Berlin")
    assert candidate.evidence.count() == 2

    result = erase(agent, first)

    assert result.receipt.residue_found == 0
    assert list(
        CandidateEvidence.objects.filter(candidate=candidate).values_list("event_id", flat=True)
    ) == [second.raw_event_id]
    assert Fact.objects.filter(
        agent=agent, object_value="Berlin", superseded_at__isnull=True
    ).exists()
