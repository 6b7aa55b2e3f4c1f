"""Erasure in consolidation: candidate facts read from erased evidence.

A candidate repeats the subject and value it read, and so do its ledger events
and the fact its assertion wrote. When every episode a candidate cites is
erased, the candidate goes — its events, and the facts events of its
assertion, go with the erased ones (expand), so the facts it made are
replayed away. When only some of its evidence goes, the candidate stays on
what survives, and only the links to the erased evidence are cut.

A candidate skill copies its traces (its task, and the skill version it
proposed holds their inputs and outputs as examples): when any trace it cites
is erased, the candidate goes with its events, and so do the skill and
version it proposed (their creation events join the erased ones, and the
skills eraser takes the rows). The other traces stay, as traces.
"""

from __future__ import annotations

import uuid

from django.db.models import Exists, OuterRef, Q
from django.db.models.expressions import RawSQL

from ledger.erasure import ErasureScope, finding
from piper.tenancy.models import Agent

from .models import CandidateEvidence, CandidateFact, CandidateSkill, CandidateSkillTrace
from .selectors import derived_from_events

CANDIDATES = "consolidation_candidates"
EVIDENCE = "consolidation_evidence"
SKILL_CANDIDATES = "consolidation_skill_candidates"
SKILL_EVIDENCE = "consolidation_skill_evidence"


def _wholly_erased(agent: Agent, staged: RawSQL):
    """Candidates citing erased events and nothing else."""
    citing = CandidateEvidence.objects.filter(agent=agent, event_id__in=staged).values(
        "candidate_id"
    )
    surviving = CandidateEvidence.objects.filter(candidate_id=OuterRef("pk")).exclude(
        event_id__in=staged
    )
    return CandidateFact.objects.filter(agent=agent, pk__in=citing).exclude(Exists(surviving))


def _skill_events(agent: Agent, staged: RawSQL) -> set[uuid.UUID]:
    """The events of candidate skills citing an erased trace, and the creation events
    of the skills and versions they proposed."""
    from ledger.models import Event

    candidates = list(
        CandidateSkill.objects.filter(
            agent=agent,
            pk__in=CandidateSkillTrace.objects.filter(agent=agent, event_id__in=staged).values(
                "candidate_id"
            ),
        ).values_list("pk", "skill_id", "version_id")
    )
    if not candidates:
        return set()
    made = Q(
        event_type__startswith="consolidation.skill_candidate_",
        payload__candidate_id__in=[str(c) for c, _, _ in candidates],
    )
    skills = [str(s) for _, s, _ in candidates if s]
    versions = [str(v) for _, _, v in candidates if v]
    if versions:
        made |= Q(event_type="skill.version_created", payload__version_id__in=versions)
    if skills:
        made |= Q(event_type="skill.created", pk__in=_skill_created_events(skills))
    return set(
        Event.objects.filter(agent=agent).filter(made).order_by().values_list("pk", flat=True)
    )


def _skill_created_events(skill_ids: list[str]) -> list[uuid.UUID]:
    from skills.models import Skill

    return list(Skill.objects.filter(pk__in=skill_ids).values_list("source_event_id", flat=True))


def expand(*, agent: Agent, event_ids: set[uuid.UUID], staged: RawSQL) -> set[uuid.UUID]:
    """The events of candidates read only from erased evidence, and the facts
    events their assertions wrote; the events of candidate skills citing an erased
    trace, and of what they proposed."""
    skill_events = _skill_events(agent, staged) - event_ids
    gone = list(_wholly_erased(agent, staged).values_list("pk", flat=True))
    if not gone:
        return skill_events
    cited = list(
        CandidateEvidence.objects.filter(candidate_id__any=gone)
        .order_by()
        .values_list("event_id", flat=True)
    )
    derived = derived_from_events(agent=agent, event_ids=cited)
    wanted = {str(c) for c in gone}
    more = set(derived.fact_event_ids) | set(derived.consolidation_event_ids)
    # derived_from_events answers for every candidate citing those events:
    # keep only what belongs to the wholly erased ones.
    if set(map(str, derived.candidate_ids)) - wanted:
        from ledger.models import Event

        more = set(
            Event.objects.filter(pk__any=list(more))
            .filter(
                Q(payload__candidate_id__in=list(wanted))
                | Q(source_ref__in=[f"consolidation:candidate/{c}" for c in wanted])
            )
            .order_by()
            .values_list("pk", flat=True)
        )
    return (more - event_ids) | skill_events


def erase(scope: ErasureScope) -> None:
    agent, erased = scope.agent, scope.erased_events()
    candidates = CandidateFact.objects.filter(agent=agent).filter(
        Q(source_event_id__in=erased) | Q(decision_event_id__in=erased)
    )
    links = CandidateEvidence.objects.filter(agent=agent, event_id__in=erased)
    scope.note_removed(EVIDENCE, links.order_by("id").values_list("id", flat=True))
    links.delete()
    scope.note_removed(CANDIDATES, candidates.order_by("id").values_list("id", flat=True))
    candidates.delete()
    skill_candidates = CandidateSkill.objects.filter(agent=agent).filter(
        Q(source_event_id__in=erased)
        | Q(decision_event_id__in=erased)
        | Q(
            pk__in=CandidateSkillTrace.objects.filter(agent=agent, event_id__in=erased).values(
                "candidate_id"
            )
        )
    )
    ids = list(skill_candidates.order_by("id").values_list("id", flat=True))
    if ids:
        traces = CandidateSkillTrace.objects.filter(candidate_id__any=ids)
        scope.note_removed(SKILL_EVIDENCE, traces.order_by("id").values_list("id", flat=True))
        traces.delete()
        scope.note_removed(SKILL_CANDIDATES, ids)
        CandidateSkill.objects.filter(pk__any=ids).delete()


def residue(scope: ErasureScope) -> list[dict]:
    agent, erased = scope.agent, scope.erased_events()
    return [
        finding(
            EVIDENCE,
            "made_from_erased_event",
            CandidateEvidence.objects.filter(agent=agent, event_id__in=erased),
        ),
        finding(
            CANDIDATES,
            "made_from_erased_event",
            CandidateFact.objects.filter(agent=agent).filter(
                Q(source_event_id__in=erased) | Q(decision_event_id__in=erased)
            ),
        ),
        finding(
            SKILL_EVIDENCE,
            "made_from_erased_event",
            CandidateSkillTrace.objects.filter(agent=agent, event_id__in=erased),
        ),
        finding(
            SKILL_CANDIDATES,
            "made_from_erased_event",
            CandidateSkill.objects.filter(agent=agent).filter(
                Q(source_event_id__in=erased) | Q(decision_event_id__in=erased)
            ),
        ),
    ]
