"""Every read of consolidation: runs, candidates with their evidence, agents with work due."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from ledger.models import Event
from piper.errors import NotFound
from piper.tenancy.models import Agent

from .models import (
    CandidateEvidence,
    CandidateFact,
    CandidateSkill,
    ConsolidationRun,
    RunKind,
    RunStatus,
)

EPISODE_RECORDED = "episode.recorded"
TRACE_RECORDED = "skill.trace_recorded"
# The ledger events each kind of run reads: a facts run also reads corrections and
# retractions of episodes (services.WITHDRAWALS); a duplicates run reads a correction
# as the new episode it records (a retraction leaves it nothing to group).
READS = {
    RunKind.FACTS: [EPISODE_RECORDED, "episode.corrected", "episode.retracted"],
    RunKind.DUPLICATES: [EPISODE_RECORDED, "episode.corrected"],
    RunKind.SKILLS: [TRACE_RECORDED],
}


def run_list(
    *, agent: Agent, kind: str | None = None, status: str | None = None
) -> QuerySet[ConsolidationRun]:
    runs = ConsolidationRun.objects.filter(agent=agent)
    if kind is not None:
        runs = runs.filter(kind=kind)
    if status is not None:
        runs = runs.filter(status=status)
    return runs


def run_get(*, agent: Agent, run_id: uuid.UUID) -> ConsolidationRun:
    run = ConsolidationRun.objects.filter(agent=agent, pk=run_id).first()
    if run is None:
        raise NotFound(f"consolidation run {run_id} not found")
    return run


def _with_evidence(candidates: QuerySet[CandidateFact]) -> QuerySet[CandidateFact]:
    """Each candidate's evidence, each with the episode it came from (two queries in all;
    an episode that was erased since is None)."""
    evidence = CandidateEvidence.objects.select_related("episode").only(
        "id",
        "candidate_id",
        "episode_id",
        "event_id",
        "source_key",
        "field",
        "extractor",
        "rule",
        "confidence",
        "occurred_at",
        "withdrawn_at",
        "withdrawn_by_id",
        "episode__id",
        "episode__summary",
        "episode__action",
        "episode__observation",
        "episode__actor",
        "episode__session_id",
        "episode__source_type",
    )
    return candidates.prefetch_related(
        Prefetch("evidence", queryset=evidence.order_by("occurred_at", "id"))
    )


def candidate_list(
    *,
    agent: Agent,
    status: str | None = None,
    predicate: str | None = None,
    subject: str | None = None,
    run_id: uuid.UUID | None = None,
) -> QuerySet[CandidateFact]:
    candidates = CandidateFact.objects.filter(agent=agent)
    if status is not None:
        candidates = candidates.filter(status=status)
    if predicate is not None:
        candidates = candidates.filter(predicate=predicate)
    if subject is not None:
        candidates = candidates.filter(subject__iexact=subject)
    if run_id is not None:
        candidates = candidates.filter(run_id=run_id)
    return _with_evidence(candidates)


def candidate_get(*, agent: Agent, candidate_id: uuid.UUID) -> CandidateFact:
    candidate = _with_evidence(CandidateFact.objects.filter(agent=agent, pk=candidate_id)).first()
    if candidate is None:
        raise NotFound(f"candidate {candidate_id} not found")
    return candidate


def agents_due(*, kind: str, stale_seconds: int) -> list[uuid.UUID]:
    """Active agents with episodes (traces, for kind skills) recorded after their last cursor and no run in
    progress, or with a running run whose last step is older than `stale_seconds`
    (its worker died: it is to be resumed). Oldest agent first."""
    stale = timezone.now() - timedelta(seconds=stale_seconds)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT a.id FROM {Agent._meta.db_table} AS a
             WHERE a.is_active
               AND (
                 EXISTS (
                   SELECT 1 FROM {ConsolidationRun._meta.db_table} AS r
                    WHERE r.agent_id = a.id AND r.kind = %(kind)s AND r.status = %(running)s
                      AND r.heartbeat_at < %(stale)s)
                 OR (
                   NOT EXISTS (
                     SELECT 1 FROM {ConsolidationRun._meta.db_table} AS r
                      WHERE r.agent_id = a.id AND r.kind = %(kind)s AND r.status = %(running)s)
                   AND EXISTS (
                     SELECT 1 FROM {Event._meta.db_table} AS e
                      WHERE e.agent_id = a.id AND e.event_type = ANY(%(reads)s)
                        AND e.seq > coalesce((
                          SELECT max(r.cursor_seq) FROM {ConsolidationRun._meta.db_table} AS r
                           WHERE r.agent_id = a.id AND r.kind = %(kind)s), 0))))
             ORDER BY a.id
            """,
            {
                "kind": kind,
                "running": RunStatus.RUNNING,
                "stale": stale,
                "reads": READS[kind],
            },
        )
        return [row[0] for row in cursor.fetchall()]


@dataclass(frozen=True)
class Derived:
    """What consolidation made from some evidence: the candidates citing it, every ledger
    event those candidates wrote (proposed, supported, asserted, rejected), and the facts
    events their assertions appended (source_ref consolidation:candidate/<id>)."""

    candidate_ids: list[uuid.UUID]
    consolidation_event_ids: list[uuid.UUID]
    fact_event_ids: list[uuid.UUID]


def derived_from_events(*, agent: Agent, event_ids: list[uuid.UUID]) -> Derived:
    """For an erasure: everything consolidation derived from these ledger events (episode
    events, typically), so the purge can take the copies too — a candidate repeats the
    subject and value it read, and so do its events and the fact it asserted."""
    candidate_ids = sorted(
        set(
            CandidateEvidence.objects.filter(agent=agent, event_id__in=event_ids).values_list(
                "candidate_id", flat=True
            )
        )
    )
    if not candidate_ids:
        return Derived([], [], [])
    names = [str(c) for c in candidate_ids]
    consolidation_events = sorted(
        Event.objects.filter(
            agent=agent,
            event_type__startswith="consolidation.candidate_",
            payload__candidate_id__in=names,
        ).values_list("id", flat=True)
    )
    fact_events = sorted(
        Event.objects.filter(
            agent=agent,
            event_type__startswith="facts.",
            source_ref__in=[f"consolidation:candidate/{c}" for c in names],
        ).values_list("id", flat=True)
    )
    return Derived(candidate_ids, consolidation_events, fact_events)


def candidate_skill_list(
    *, agent: Agent, status: str | None = None, run_id: uuid.UUID | None = None
) -> QuerySet[CandidateSkill]:
    candidates = CandidateSkill.objects.filter(agent=agent)
    if status is not None:
        candidates = candidates.filter(status=status)
    if run_id is not None:
        candidates = candidates.filter(run_id=run_id)
    return candidates.prefetch_related("evidence")


def candidate_skill_get(*, agent: Agent, candidate_id: uuid.UUID) -> CandidateSkill:
    candidate = (
        CandidateSkill.objects.filter(agent=agent, pk=candidate_id)
        .prefetch_related("evidence")
        .first()
    )
    if candidate is None:
        raise NotFound(f"candidate skill {candidate_id} not found")
    return candidate
