"""Every write of candidate skills: mining a run's traces, proposing, rejecting.

`mine_traces` is a consolidation step of kind `skills` (it runs inside the
step's transaction, the run row locked). It keeps the traces consolidation
may learn from (consolidation.trust.trace_exclusion), groups them by procedure
shape (consolidation.skill_mining), adds each as evidence to its shape's one
CandidateSkill, and when a collecting candidate reaches
CONSOLIDATION_SKILL_MIN_TRACES traces with different inputs, proposes it: a
new skill whose first version (a candidate, its examples queued for the
sandbox) carries the traces as provenance. Re-reading a trace writes nothing
(one event supports a candidate once: a database constraint); a rejected
shape is never proposed again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.services import event_append
from piper.errors import Conflict, InvalidInput, NotFound, PiperError
from piper.ids import uuid7
from piper.locks import advisory_xact_locks
from piper.provenance import SourceType
from piper.tenancy.models import Agent

from . import skill_mining, trust
from .models import (
    CandidateSkill,
    CandidateSkillStatus,
    CandidateSkillTrace,
    ConsolidationRun,
)

logger = logging.getLogger(__name__)

SKILL_OPENED = "consolidation.skill_candidate_opened"
SKILL_SUPPORTED = "consolidation.skill_candidate_supported"
SKILL_PROPOSED = "consolidation.skill_candidate_proposed"
SKILL_REJECTED = "consolidation.skill_candidate_rejected"
ACTOR = "consolidation"
MAX_REASON_CHARS = 2000
MAX_PROVENANCE = 100  # skills.services.definitions.MAX_PROVENANCE


def _inputs_key(inputs: dict) -> str:
    text = json.dumps(inputs, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _lock_shapes(agent_id: uuid.UUID, keys: Sequence[str]) -> None:
    advisory_xact_locks(f"consolidation:skill:{agent_id}", keys)


def skill_name(shape: skill_mining.Shape) -> str:
    """Unique per shape (its key), readable by its tools."""
    return f"learned: {' → '.join(shape.tools)} ({shape.key[:10]})"[:200]


def mine_traces(run: ConsolidationRun, traces: Sequence) -> dict:
    """One step's traces into candidate skills. Returns the step's counts."""
    from .services import StepResult

    counts: dict = {"excluded": {}, "statements": 0, "skipped": 0, "not_asserted": {}}
    result = StepResult(done=False, counts=counts)
    excluded: dict[str, int] = defaultdict(int)
    by_shape: dict[str, tuple[skill_mining.Shape, list]] = {}
    for trace in traces:
        reason = trust.trace_exclusion(trace)
        if reason is None:
            try:
                shape = skill_mining.shape_of(trace.inputs, trace.steps, trace.output)
            except skill_mining.NotReplayable:
                reason = "not_replayable"
        if reason is not None:
            excluded[reason] += 1
            continue
        by_shape.setdefault(shape.key, (shape, []))[1].append(trace)
    counts["excluded"] = dict(excluded)
    counts["statements"] = sum(len(group) for _, group in by_shape.values())
    if not by_shape:
        return result
    agent = run.agent
    _lock_shapes(agent.pk, sorted(by_shape))
    known = {
        c.shape_key: c
        for c in CandidateSkill.objects.select_for_update().filter(
            agent=agent, shape_key__in=list(by_shape)
        )
    }
    used: set[tuple[uuid.UUID, uuid.UUID]] = set(
        CandidateSkillTrace.objects.filter(candidate__in=list(known.values())).values_list(
            "candidate_id", "event_id"
        )
    )
    not_proposed: dict[str, int] = defaultdict(int)
    for key, (shape, group) in by_shape.items():
        candidate = known.get(key)
        if candidate is not None and candidate.status == CandidateSkillStatus.REJECTED:
            counts["skipped"] += len(group)
            continue
        if candidate is not None:
            fresh = [t for t in group if (candidate.pk, t.source_event_id) not in used]
            counts["skipped"] += len(group) - len(fresh)
            group = fresh
        if not group:
            continue
        candidate = _support(run, candidate, shape, group)
        result.proposed += 1
        if (
            candidate.status == CandidateSkillStatus.COLLECTING
            and candidate.distinct_inputs >= settings.CONSOLIDATION_SKILL_MIN_TRACES
        ):
            refused = _propose(candidate, shape, decided_by=ACTOR)
            if refused is None:
                result.asserted += 1
            else:
                not_proposed[refused] += 1
    counts["not_asserted"] = dict(not_proposed)
    return result


def _support(
    run: ConsolidationRun, candidate: CandidateSkill | None, shape: skill_mining.Shape, group
) -> CandidateSkill:
    """Open the shape's candidate (or take the known one) and add the traces."""
    agent = run.agent
    is_new = candidate is None
    if is_new:
        candidate = CandidateSkill(
            id=uuid7(),
            agent=agent,
            run=run,
            shape_key=shape.key,
            tools=shape.tools,
            task=group[0].task[:4000],
        )
    rows = [
        CandidateSkillTrace(
            candidate=candidate,
            agent=agent,
            trace=trace,
            event_id=trace.source_event_id,
            inputs_key=_inputs_key(trace.inputs),
            occurred_at=trace.source_event.occurred_at,
        )
        for trace in group
    ]
    prior = (
        set()
        if is_new
        else set(
            CandidateSkillTrace.objects.filter(candidate=candidate).values_list(
                "inputs_key", flat=True
            )
        )
    )
    candidate.traces += len(rows)
    candidate.distinct_inputs = len(prior | {r.inputs_key for r in rows})
    event = event_append(
        agent=agent,
        event_type=SKILL_OPENED if is_new else SKILL_SUPPORTED,
        payload={
            "candidate_id": str(candidate.pk),
            "run_id": str(run.pk),
            "shape_key": shape.key,
            "tools": shape.tools,
            "trace_ids": [str(t.pk) for t in group],
            "traces": candidate.traces,
            "distinct_inputs": candidate.distinct_inputs,
        },
        actor=ACTOR,
        source_type=SourceType.AGENT_INFERENCE,
    )
    if is_new:
        candidate.source_event = event
        candidate.save(force_insert=True)
    else:
        CandidateSkill.objects.filter(pk=candidate.pk).update(
            traces=candidate.traces, distinct_inputs=candidate.distinct_inputs
        )
    CandidateSkillTrace.objects.bulk_create(rows)
    return candidate


def _supporting(candidate: CandidateSkill) -> list[skill_mining.TraceSeen]:
    from skills.models import SkillTrace

    ids = CandidateSkillTrace.objects.filter(candidate=candidate).values_list("trace_id", flat=True)
    return [
        skill_mining.TraceSeen(str(t.source_event_id), t.task, t.inputs, t.output)
        for t in SkillTrace.objects.filter(agent_id=candidate.agent_id, pk__in=list(ids)).order_by(
            "id"
        )
    ]


def _propose(
    candidate: CandidateSkill, shape: skill_mining.Shape, *, decided_by: str
) -> str | None:
    """Create the candidate skill version; None when done, else the refusal's code (the
    candidate keeps collecting, with the reason)."""
    from skills.services.definitions import VersionInput, skill_create

    seen = _supporting(candidate)
    fields = skill_mining.definition(shape, seen)
    provenance = [uuid.UUID(t.event_id) for t in skill_mining.distinct_inputs(seen)]
    try:
        with transaction.atomic():
            skill, version = skill_create(
                agent=candidate.agent,
                name=skill_name(shape),
                data=VersionInput(**fields, provenance_events=provenance[:MAX_PROVENANCE]),
                actor=decided_by,
            )
    except PiperError as exc:
        logger.info("candidate skill %s not proposed: %s", candidate.pk, exc.message)
        candidate.reason = f"not proposed: {exc.message}"[:MAX_REASON_CHARS]
        CandidateSkill.objects.filter(pk=candidate.pk).update(reason=candidate.reason)
        return exc.code
    candidate.decision_event = event_append(
        agent=candidate.agent,
        event_type=SKILL_PROPOSED,
        payload={
            "candidate_id": str(candidate.pk),
            "skill_id": str(skill.pk),
            "version_id": str(version.pk),
            "traces": candidate.traces,
            "distinct_inputs": candidate.distinct_inputs,
            "decided_by": decided_by,
        },
        actor=decided_by,
        source_type=SourceType.AGENT_INFERENCE,
    )
    candidate.status = CandidateSkillStatus.PROPOSED
    candidate.skill_id, candidate.version_id = skill.pk, version.pk
    candidate.decided_by, candidate.decided_at, candidate.reason = decided_by, timezone.now(), ""
    candidate.save(
        update_fields=[
            "status",
            "skill_id",
            "version_id",
            "decided_by",
            "decided_at",
            "reason",
            "decision_event",
        ]
    )
    return None


def candidate_skill_reject(
    *, agent: Agent, candidate_id: uuid.UUID, reason: str, actor: str = ""
) -> CandidateSkill:
    """Close a candidate skill for good: its shape is never proposed again. A proposed
    one's version is retired if it was not validated yet (a validated version earned
    its place through executions and is left to the skills lifecycle). InvalidInput
    without a reason; Conflict (already_rejected) for a rejected one."""
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(
            f"reason: say why, in 1-{MAX_REASON_CHARS} characters",
            details={"reason": ["required"]},
        )
    from skills.models import SkillVersion, VersionStatus
    from skills.services.lifecycle import version_retire

    with transaction.atomic():
        key = (
            CandidateSkill.objects.filter(agent=agent, pk=candidate_id)
            .values_list("shape_key", flat=True)
            .first()
        )
        if key is None:
            raise NotFound(f"candidate skill {candidate_id} not found")
        _lock_shapes(agent.pk, [key])
        candidate = CandidateSkill.objects.select_for_update().get(pk=candidate_id)
        if candidate.status == CandidateSkillStatus.REJECTED:
            raise Conflict(
                f"candidate skill {candidate_id} is already rejected", code="already_rejected"
            )
        retired = None
        if candidate.version_id is not None:
            status = (
                SkillVersion.objects.filter(agent=agent, pk=candidate.version_id)
                .values_list("status", flat=True)
                .first()
            )
            if status in (VersionStatus.CANDIDATE, VersionStatus.EXPERIMENTAL):
                version_retire(
                    agent=agent,
                    version_id=candidate.version_id,
                    reason=f"candidate skill {candidate.pk} rejected: {reason}"[:500],
                    actor=actor or "api",
                )
                retired = str(candidate.version_id)
        decided_by = actor or "api"
        candidate.decision_event = event_append(
            agent=agent,
            event_type=SKILL_REJECTED,
            payload={
                "candidate_id": str(candidate.pk),
                "previous_status": candidate.status,
                "reason": reason,
                "retired_version_id": retired,
                "decided_by": decided_by,
            },
            actor=decided_by,
            source_type=SourceType.AGENT_INFERENCE,
        )
        candidate.status = CandidateSkillStatus.REJECTED
        candidate.reason, candidate.decided_by = reason, decided_by
        candidate.decided_at = timezone.now()
        candidate.save(
            update_fields=["status", "reason", "decided_by", "decided_at", "decision_event"]
        )
        return candidate
