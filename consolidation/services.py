"""Every write of consolidation: runs, candidates, decisions — each with its ledger event.

`consolidate()` is what a task or the command calls: it starts a run (or
resumes the agent's running one), takes steps until the run is done or the
time budget is spent, and finishes it. A step is one transaction: it reads
the next episodes after the run's cursor, keeps those consolidation may learn
from (consolidation.trust), extracts statements (consolidation.extraction),
records them as candidates with their evidence, asserts the candidates that
are trusted enough through facts.services (as agent_inference), appends the
`consolidation.*` events, and moves the cursor — all or nothing. So a worker
killed mid-run loses at most the step it was in, and the next task resumes
the run where its cursor stands; running a step twice is impossible (the run
row is locked) and re-reading evidence writes nothing (one event supports a
claim once: a database constraint).

Decisions: `candidate_accept` asserts a proposed candidate whatever its
confidence; `candidate_reject` closes it for good (retracting the fact an
asserted one made, while that version is still believed). A claim rejected
once is not proposed again from the same evidence nor from the same sources.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from episodes.models import Episode, EpisodeStatus
from ledger.models import Event
from ledger.services import EventDraft, event_append, events_append
from piper.errors import Conflict, InvalidInput, NotFound, PiperError
from piper.ids import uuid7
from piper.locks import advisory_xact_locks
from piper.provenance import SourceType
from piper.tenancy.models import Agent

from . import trust
from .extraction import Extractor, Statement, load_extractors
from .models import (
    CandidateEvidence,
    CandidateFact,
    CandidateStatus,
    ConsolidationRun,
    RunKind,
    RunStatus,
)
from .selectors import READS

logger = logging.getLogger(__name__)

RUN_STARTED = "consolidation.run_started"
RUN_FINISHED = "consolidation.run_finished"
RUN_FAILED = "consolidation.run_failed"
CANDIDATE_PROPOSED = "consolidation.candidate_proposed"
CANDIDATE_SUPPORTED = "consolidation.candidate_supported"
CANDIDATE_ASSERTED = "consolidation.candidate_asserted"
CANDIDATE_REJECTED = "consolidation.candidate_rejected"
CANDIDATE_WEAKENED = "consolidation.candidate_weakened"
CANDIDATE_WITHDRAWN = "consolidation.candidate_withdrawn"
EPISODE_RECORDED = "episode.recorded"  # episodes.services.EPISODE_RECORDED
EPISODE_CORRECTED = "episode.corrected"  # episodes.services.EPISODE_CORRECTED
EPISODE_RETRACTED = "episode.retracted"  # episodes.services.EPISODE_RETRACTED
TRACE_RECORDED = "skill.trace_recorded"  # skills.services.traces.TRACE_RECORDED
# Events that withdraw an episode version (the one their correction_of names). A
# facts run reads them with episode.recorded (selectors.READS): a corrected version
# is read as a new episode, and what the version it replaced (or a retracted one)
# supported is withdrawn.
WITHDRAWALS = (EPISODE_CORRECTED, EPISODE_RETRACTED)
ACTOR = "consolidation"
MAX_REASON_CHARS = 2000
TEXT_FIELDS = ("summary", "action", "observation")


def _key(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def normalise(text: str) -> str:
    words = " ".join(str(text).split()).lower()
    return words[4:] if words.startswith("the ") else words


def claim_key(subject: str, predicate: str, value: str) -> str:
    """One claim, however it was written: case, spacing and a leading 'the' aside."""
    return _key(normalise(subject), predicate, normalise(value))


def evidence_key(event_ids: Iterable[uuid.UUID | str]) -> str:
    return _key(*sorted(str(e) for e in event_ids))


def source_key(episode: Episode, source_ref: str) -> str:
    """Who said it: the source type, the actor, and the session (or the source's ref).
    An episode with none of these counts as one anonymous source of its type."""
    where = episode.session_id or source_ref or "-"
    return f"{episode.source_type}|{episode.actor or '-'}|{where}"[:700]


def combined_confidence(per_source: Iterable[float]) -> float:
    """1 - Π(1 - c): independent sources add up; one source repeating itself does not."""
    missing = 1.0
    for c in per_source:
        missing *= 1.0 - max(0.0, min(1.0, c))
    return round(min(0.99, 1.0 - missing), 4)


def _lock_run(agent_id: uuid.UUID, kind: str) -> None:
    advisory_xact_locks(f"consolidation:run:{agent_id}", [kind])


def _lock_claims(agent_id: uuid.UUID, claim_keys: Iterable[str]) -> None:
    """The claims' locks, in one statement in lock order (no deadlock)."""
    advisory_xact_locks(f"consolidation:claim:{agent_id}", claim_keys)


# --------------------------------------------------------------------------- runs


def episode_statistics_refresh(*, after_rows: int | None = None) -> bool:
    """ANALYZE the episodes table when `after_rows` (CONSOLIDATION_ANALYZE_AFTER_ROWS)
    or more rows changed since it was last analyzed; returns whether it did. A run
    reads thousands of an agent's newest rows, and with statistics that do not know
    them the planner expects one row an agent and walks an index of the agent's
    actor for each session's pool."""
    threshold = settings.CONSOLIDATION_ANALYZE_AFTER_ROWS if after_rows is None else after_rows
    table = Episode._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = %s::regclass",
            [table],
        )
        row = cursor.fetchone()
        if row is None or row[0] < threshold:
            return False
        cursor.execute(f'ANALYZE "{table}"')
    logger.info("analyzed %s: %s rows changed since its last analyze", table, row[0])
    return True


def consolidation_run_start(
    *, agent: Agent, kind: str = RunKind.FACTS, batch_size: int | None = None
) -> ConsolidationRun | None:
    """The agent's running run of `kind` (to resume), or a new one over the episodes
    recorded after the last cursor; None when there is nothing new to read (no run
    and no event is written then)."""
    if kind not in RunKind.values:
        raise InvalidInput(f"kind must be one of {RunKind.values}", details={"kind": ["invalid"]})
    with transaction.atomic():
        _lock_run(agent.pk, kind)
        running = ConsolidationRun.objects.filter(
            agent=agent, kind=kind, status=RunStatus.RUNNING
        ).first()
        if running is not None:
            return running
        done = (
            ConsolidationRun.objects.filter(agent=agent, kind=kind).aggregate(c=Max("cursor_seq"))[
                "c"
            ]
            or 0
        )
        last = Event.objects.filter(
            agent=agent, event_type__in=READS[kind], seq__gt=done
        ).aggregate(s=Max("seq"))["s"]
        if last is None:
            return None
        if kind in (RunKind.FACTS, RunKind.DUPLICATES):
            episode_statistics_refresh()
        run_id = uuid7()
        batch = batch_size or settings.CONSOLIDATION_BATCH_SIZE
        details: dict = {"batch_size": batch}
        if kind == RunKind.FACTS:
            details["extractors"] = [e.name for e in load_extractors()]
        event = event_append(
            agent=agent,
            event_type=RUN_STARTED,
            payload={
                "run_id": str(run_id),
                "kind": kind,
                "from_seq": done,
                "to_seq": last,
                **details,
            },
            actor=ACTOR,
            source_type=SourceType.AGENT_INFERENCE,
        )
        return ConsolidationRun.objects.create(
            id=run_id,
            agent=agent,
            kind=kind,
            from_seq=done,
            to_seq=last,
            cursor_seq=done,
            details={**details, "collapsed": {"events": 0, "episodes": 0}}
            if kind == RunKind.DUPLICATES
            else {**details, "excluded": {}, "not_asserted": {}},
            source_event=event,
        )


@dataclass
class _Reading:
    """One statement read in one episode's field."""

    episode: Episode
    source_ref: str
    field: str
    extractor: str
    statement: Statement
    key: str = ""

    @property
    def event_id(self) -> uuid.UUID:
        return self.episode.raw_event_id

    @property
    def source(self) -> str:
        return source_key(self.episode, self.source_ref)

    @property
    def confidence(self) -> float:
        return round(self.statement.confidence * float(self.episode.confidence), 4)


@dataclass
class StepResult:
    done: bool
    episodes: int = 0
    proposed: int = 0
    asserted: int = 0
    counts: dict = field(default_factory=dict)


def consolidation_run_step(
    *, run_id: uuid.UUID, extractors: Sequence[Extractor] | None = None
) -> StepResult:
    """Consolidate the next batch of the run's episodes, in one transaction.

    A run that is no longer running is left alone (done=True). Returns whether
    the run has read everything up to its to_seq (it is then ready to finish).
    """
    extractors = tuple(extractors) if extractors is not None else load_extractors()
    with transaction.atomic():
        # The run's row only (of): a plain FOR UPDATE would lock the joined agent's row
        # too, for the whole step, and every insert of the agent's (a foreign key's
        # KEY SHARE) would wait for the step — and deadlock with it over the ledger
        # chain (scripts/chaos/worker_kill.py).
        run = (
            ConsolidationRun.objects.select_for_update(of=("self",))
            .select_related("agent")
            .filter(pk=run_id)
            .first()
        )
        if run is None or run.status != RunStatus.RUNNING:
            return StepResult(done=True)
        if run.cursor_seq >= run.to_seq:
            return StepResult(done=True)
        batch = int(run.details.get("batch_size") or settings.CONSOLIDATION_BATCH_SIZE)
        # The next `batch` events by the (agent, seq) key, then what they made:
        # filtering episodes by their event's seq sorted every remaining episode of
        # the run at each step (a run over 20,000 episodes read 160 a second).
        read = list(
            Event.objects.filter(
                agent_id=run.agent_id,
                seq__gt=run.cursor_seq,
                seq__lte=run.to_seq,
                event_type__in=READS[run.kind],
            )
            .order_by("seq")
            .values_list("seq", "id", "event_type", "correction_of_id")[:batch]
        )
        cursor = read[-1][0] if len(read) == batch else run.to_seq
        event_ids = [i for _, i, _, _ in read]
        if run.kind == RunKind.SKILLS:
            from skills.models import SkillTrace

            from .skill_candidates import mine_traces

            rows = list(
                SkillTrace.objects.filter(agent_id=run.agent_id, source_event_id__in=event_ids)
                .select_related("source_event")
                .order_by("source_event__seq")
            )
            result = mine_traces(run, rows)
        else:
            columns = [*EPISODE_COLUMNS]
            if run.kind == RunKind.DUPLICATES:
                columns += ["canonical_id", "embedding"]
            rows = list(
                # A retracted or corrected version is no evidence any more (episodes),
                # nor a duplicate: its correction, read as a new episode, stands for it.
                Episode.objects.filter(
                    agent_id=run.agent_id, raw_event_id__in=event_ids, status=EpisodeStatus.ACTIVE
                )
                .select_related("raw_event")
                .only(*columns)
                .order_by("raw_event__seq")
            )
            if run.kind == RunKind.DUPLICATES:
                result = _collapse_duplicates(run, rows)
            else:
                result = _consolidate_episodes(run, rows, extractors)
                # After the batch's own readings: a correction's new version supports
                # its claims before the old version's support is withdrawn.
                _withdraw_evidence(
                    run,
                    {
                        old: event_id
                        for _, event_id, kind, old in read
                        if kind in WITHDRAWALS and old is not None
                    },
                    result.counts,
                )
        counts = result.counts
        details = dict(run.details)
        for section in ("excluded", "not_asserted", "collapsed", "withdrawn"):
            if section not in counts:
                continue
            merged = dict(details.get(section) or {})
            for reason, n in counts.get(section, {}).items():
                merged[reason] = merged.get(reason, 0) + n
            details[section] = merged
        ConsolidationRun.objects.filter(pk=run.pk).update(
            cursor_seq=cursor,
            episodes_read=run.episodes_read + len(rows),
            episodes_excluded=run.episodes_excluded + sum(counts.get("excluded", {}).values()),
            statements_found=run.statements_found + counts.get("statements", 0),
            statements_skipped=run.statements_skipped + counts.get("skipped", 0),
            candidates_proposed=run.candidates_proposed + result.proposed,
            candidates_asserted=run.candidates_asserted + result.asserted,
            steps=run.steps + 1,
            details=details,
            heartbeat_at=timezone.now(),
        )
        result.done = cursor >= run.to_seq
        result.episodes = len(rows)
        return result


EPISODE_COLUMNS = (
    "id",
    "agent_id",
    "occurred_at",
    "session_id",
    "actor",
    "summary",
    "action",
    "observation",
    "confidence",
    "source_type",
    "authority",
    "source_id",
    "instruction_like",
    "raw_event_id",
    "raw_event__seq",
    "raw_event__source_ref",
)


def _collapse_duplicates(run: ConsolidationRun, rows: Sequence[Episode]) -> StepResult:
    """Group the batch's near-duplicates under their canonical episodes (one
    episode.collapsed event a group), counted in the run's details."""
    from episodes.services import episodes_collapse

    from .duplicates import find_duplicates

    groups = find_duplicates(run.agent_id, rows, after_seq=run.cursor_seq)
    for canonical_id, duplicate_ids in groups.items():
        episodes_collapse(
            agent=run.agent,
            canonical_id=canonical_id,
            duplicate_ids=duplicate_ids,
            reason=f"near-duplicates (consolidation run {run.pk})",
            actor=ACTOR,
        )
    collapsed = sum(len(d) for d in groups.values())
    return StepResult(
        done=False, counts={"collapsed": {"events": len(groups), "episodes": collapsed}}
    )


def _readings(
    rows: Sequence[Episode], extractors: Sequence[Extractor], counts: dict
) -> list[_Reading]:
    readings: list[_Reading] = []
    excluded: dict[str, int] = defaultdict(int)
    for episode in rows:
        reason = trust.exclusion(episode)
        if reason is not None:
            excluded[reason] += 1
            continue
        for field_name in TEXT_FIELDS:
            text = getattr(episode, field_name)
            if not text:
                continue
            for extractor in extractors:
                for statement in extractor.extract(text):
                    readings.append(
                        _Reading(
                            episode,
                            episode.raw_event.source_ref,
                            field_name,
                            extractor.name,
                            statement,
                            claim_key(statement.subject, statement.predicate, statement.value),
                        )
                    )
    counts["excluded"] = dict(excluded)
    counts["statements"] = len(readings)
    return readings


def _consolidate_episodes(
    run: ConsolidationRun, rows: Sequence[Episode], extractors: Sequence[Extractor]
) -> StepResult:
    counts: dict = {}
    result = StepResult(done=False, counts=counts)
    readings = _readings(rows, extractors, counts)
    counts["skipped"] = 0
    if not readings:
        return result
    agent = run.agent
    by_claim: dict[str, list[_Reading]] = defaultdict(list)
    for reading in readings:
        by_claim[reading.key].append(reading)
    _lock_claims(agent.pk, by_claim)

    # What already supports each claim, and which sources a rejection closed.
    used: set[tuple[str, uuid.UUID]] = set()
    rejected_sources: set[tuple[str, str]] = set()
    for key, event_id, source, status in CandidateEvidence.objects.filter(
        agent=agent, claim_key__in=list(by_claim)
    ).values_list("claim_key", "event_id", "source_key", "candidate__status"):
        used.add((key, event_id))
        if status == CandidateStatus.REJECTED:
            rejected_sources.add((key, source))
    fresh: dict[str, list[_Reading]] = {}
    for key, group in by_claim.items():
        best: dict[uuid.UUID, _Reading] = {}
        for reading in group:
            if (key, reading.event_id) in used or (key, reading.source) in rejected_sources:
                counts["skipped"] += 1
                continue
            held = best.get(reading.event_id)
            if held is None or reading.confidence > held.confidence:
                best[reading.event_id] = reading
        if best:
            fresh[key] = list(best.values())
    if not fresh:
        return result

    live = [CandidateStatus.PROPOSED, CandidateStatus.ASSERTED]
    open_candidates = {
        c.claim_key: c
        for c in CandidateFact.objects.select_for_update().filter(
            agent=agent, claim_key__in=list(fresh), status__in=live
        )
    }
    prior: dict[uuid.UUID, list[tuple[str, float, datetime, uuid.UUID]]] = defaultdict(list)
    for candidate_id, source, confidence, occurred_at, event_id in CandidateEvidence.objects.filter(
        candidate__in=[c.pk for c in open_candidates.values()], withdrawn_at__isnull=True
    ).values_list("candidate_id", "source_key", "confidence", "occurred_at", "event_id"):
        prior[candidate_id].append((source, confidence, occurred_at, event_id))

    drafts: list[EventDraft] = []
    plans: list[tuple[CandidateFact, list[_Reading], bool]] = []
    for key, group in fresh.items():
        candidate = open_candidates.get(key)
        is_new = candidate is None
        first = min(group, key=lambda r: (r.episode.occurred_at, str(r.event_id)))
        if is_new:
            s = first.statement
            candidate = CandidateFact(
                id=uuid7(),
                agent=agent,
                run=run,
                subject=s.subject[:300],
                predicate=s.predicate,
                value=s.value[:500],
                claim_key=key,
                extractor=first.extractor,
            )
        support = [(r.source, r.confidence, r.episode.occurred_at, r.event_id) for r in group]
        support += prior.get(candidate.pk, [])
        per_source: dict[str, float] = {}
        for source, confidence, _, _ in support:
            per_source[source] = max(per_source.get(source, 0.0), confidence)
        candidate.confidence = combined_confidence(per_source.values())
        candidate.sources = len(per_source)
        candidate.valid_from = min(at for _, _, at, _ in support)
        candidate.evidence_key = evidence_key(e for _, _, _, e in support)
        drafts.append(
            EventDraft(
                event_type=CANDIDATE_PROPOSED if is_new else CANDIDATE_SUPPORTED,
                payload={
                    "candidate_id": str(candidate.pk),
                    "run_id": str(run.pk),
                    "subject": candidate.subject,
                    "predicate": candidate.predicate,
                    "value": candidate.value,
                    "confidence": candidate.confidence,
                    "sources": candidate.sources,
                    "valid_from": candidate.valid_from.isoformat(),
                    "evidence": [
                        {
                            "episode_id": str(r.episode.pk),
                            "event_id": str(r.event_id),
                            "field": r.field,
                            "extractor": r.extractor,
                            "rule": r.statement.rule,
                            "confidence": r.confidence,
                        }
                        for r in sorted(group, key=lambda r: r.episode.raw_event.seq)
                    ],
                },
                actor=ACTOR,
                source_type=SourceType.AGENT_INFERENCE,
                confidence=candidate.confidence,
            )
        )
        plans.append((candidate, group, is_new))
    events = events_append(agent=agent, drafts=drafts)
    new_rows, changed = [], []
    for (candidate, _, is_new), event in zip(plans, events, strict=True):
        if is_new:
            candidate.source_event = event
            new_rows.append(candidate)
        else:
            changed.append(candidate)
    CandidateFact.objects.bulk_create(new_rows)
    if changed:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {CandidateFact._meta.db_table} c"
                " SET confidence = v.confidence, sources = v.sources,"
                "     valid_from = v.valid_from, evidence_key = v.evidence_key"
                " FROM unnest(%s::uuid[], %s::float8[], %s::int[], %s::timestamptz[], %s::text[])"
                "      AS v(id, confidence, sources, valid_from, evidence_key)"
                " WHERE c.id = v.id",
                [
                    [c.pk for c in changed],
                    [c.confidence for c in changed],
                    [c.sources for c in changed],
                    [c.valid_from for c in changed],
                    [c.evidence_key for c in changed],
                ],
            )
    CandidateEvidence.objects.bulk_create(
        [
            CandidateEvidence(
                candidate=candidate,
                agent=agent,
                claim_key=candidate.claim_key,
                episode_id=r.episode.pk,
                event_id=r.event_id,
                source_key=r.source,
                field=r.field,
                extractor=r.extractor,
                rule=r.statement.rule,
                confidence=r.confidence,
                occurred_at=r.episode.occurred_at,
            )
            for candidate, group, _ in plans
            for r in group
        ]
    )
    result.proposed = len(plans)
    # New evidence for an asserted claim asserts it again: the fact gains the evidence
    # (and its last confirmation), or is contested if a stronger claim holds now.
    ready = [c for c, _, _ in plans if c.status == CandidateStatus.ASSERTED or _trusted_enough(c)]
    not_asserted: dict[str, int] = defaultdict(int)
    asserted = _assert(agent, ready, decided_by=ACTOR, not_asserted=not_asserted)
    below = len(plans) - len(ready)
    if below:
        not_asserted["below_threshold"] += below
    counts["not_asserted"] = dict(not_asserted)
    result.asserted = len(asserted)
    return result


def _withdraw_evidence(
    run: ConsolidationRun, withdrawn: dict[uuid.UUID, uuid.UUID], counts: dict
) -> None:
    """The episode versions recorded by the keys of `withdrawn` were retracted or
    corrected (by the events they map to): they support nothing any more.

    Their evidence rows are marked withdrawn (kept: an event supports a claim once,
    ever). Each live candidate they supported is weighed again on what is left
    (consolidation.candidate_weakened): with nothing left it is withdrawn
    (consolidation.candidate_withdrawn, final), and one consolidation asserted that
    is no longer trusted enough goes back to proposed; either way the fact it
    asserted is retracted while that version is still believed. A candidate a
    person accepted keeps its status on what is left. Idempotent: withdrawn
    evidence is not withdrawn again."""
    if not withdrawn:
        return
    agent = run.agent
    evidence = list(
        CandidateEvidence.objects.filter(
            agent=agent, event_id__in=list(withdrawn), withdrawn_at__isnull=True
        ).values_list("id", "candidate_id", "claim_key", "event_id")
    )
    if not evidence:
        return
    _lock_claims(agent.pk, {e[2] for e in evidence})
    now = timezone.now()
    by_event = defaultdict(list)
    for pk, _, _, event_id in evidence:
        by_event[withdrawn[event_id]].append(pk)
    for by, ids in by_event.items():
        CandidateEvidence.objects.filter(pk__in=ids).update(withdrawn_at=now, withdrawn_by_id=by)
    gone: dict[uuid.UUID, list[str]] = defaultdict(list)
    for _, candidate_id, _, event_id in evidence:
        gone[candidate_id].append(str(event_id))
    candidates = CandidateFact.objects.select_for_update().filter(
        pk__in=list(gone), status__in=[CandidateStatus.PROPOSED, CandidateStatus.ASSERTED]
    )
    outcome: dict[str, int] = defaultdict(int)
    for candidate in candidates.order_by("pk"):
        left = list(
            CandidateEvidence.objects.filter(
                candidate=candidate, withdrawn_at__isnull=True
            ).values_list("source_key", "confidence", "occurred_at", "event_id")
        )
        previous = candidate.status
        if left:
            per_source: dict[str, float] = {}
            for source, confidence, _, _ in left:
                per_source[source] = max(per_source.get(source, 0.0), confidence)
            candidate.confidence = combined_confidence(per_source.values())
            candidate.sources = len(per_source)
            candidate.valid_from = min(at for _, _, at, _ in left)
            candidate.evidence_key = evidence_key(e for _, _, _, e in left)
            status = previous
            if (
                previous == CandidateStatus.ASSERTED
                and candidate.decided_by == ACTOR
                and not _trusted_enough(candidate)
            ):
                status = CandidateStatus.PROPOSED
        else:
            status = CandidateStatus.WITHDRAWN
        retracted = (
            _retract_fact(agent, candidate, f"its evidence was withdrawn ({status})")
            if previous == CandidateStatus.ASSERTED and status != CandidateStatus.ASSERTED
            else None
        )
        event = event_append(
            agent=agent,
            event_type=CANDIDATE_WITHDRAWN
            if status == CandidateStatus.WITHDRAWN
            else CANDIDATE_WEAKENED,
            payload={
                "candidate_id": str(candidate.pk),
                "run_id": str(run.pk),
                "withdrawn_event_ids": sorted(gone[candidate.pk]),
                "withdrawn_by": sorted({str(withdrawn[uuid.UUID(e)]) for e in gone[candidate.pk]}),
                "previous_status": previous,
                "status": status,
                "confidence": candidate.confidence if left else None,
                "sources": candidate.sources if left else 0,
                "retracted_fact_id": retracted,
            },
            actor=ACTOR,
            source_type=SourceType.AGENT_INFERENCE,
        )
        fields = ["status"]
        if left:
            fields += ["confidence", "sources", "valid_from", "evidence_key"]
        if status == CandidateStatus.PROPOSED and previous == CandidateStatus.ASSERTED:
            # Back to waiting for evidence: no fact, no decision.
            candidate.fact_id, candidate.fact_outcome = None, ""
            candidate.decided_by, candidate.decided_at, candidate.decision_event = "", None, None
            fields += ["fact_id", "fact_outcome", "decided_by", "decided_at", "decision_event"]
        if status == CandidateStatus.WITHDRAWN:
            candidate.decided_by, candidate.decided_at = ACTOR, now
            candidate.decision_event, candidate.reason = event, "every supporting episode withdrawn"
            fields += ["decided_by", "decided_at", "decision_event", "reason"]
        candidate.status = status
        candidate.save(update_fields=fields)
        outcome[status if status != previous else "weakened"] += 1
    counts["withdrawn"] = dict(outcome)


def _retract_fact(agent: Agent, candidate: CandidateFact, why: str) -> str | None:
    """Retract the fact version the candidate asserted while it is still believed
    (a later version someone else made is left alone); its id, or None."""
    from facts.models import Fact, FactStatus
    from facts.services import Provenance, fact_retract

    believed = Fact.objects.filter(
        agent=agent,
        pk=candidate.fact_id,
        superseded_at__isnull=True,
        status__in=[FactStatus.ACTIVE, FactStatus.CONTESTED],
    ).exists()
    if not believed:
        return None
    fact_retract(
        agent=agent,
        fact_id=candidate.fact_id,
        reason=f"consolidation candidate {candidate.pk}: {why}",
        provenance=Provenance(source_type=SourceType.AGENT_INFERENCE, actor=ACTOR),
    )
    return str(candidate.fact_id)


def _trusted_enough(candidate: CandidateFact) -> bool:
    return (
        candidate.sources >= settings.CONSOLIDATION_MIN_SOURCES
        and candidate.confidence >= settings.CONSOLIDATION_MIN_CONFIDENCE
    )


def _assert(
    agent: Agent,
    candidates: Sequence[CandidateFact],
    *,
    decided_by: str,
    not_asserted: dict[str, int] | None = None,
) -> list[CandidateFact]:
    """Assert the candidates as agent_inference facts: all in one facts_assert per
    MAX_BATCH (one ledger append, one commit hook), and when the facts service
    refuses a batch, each candidate in its own savepoint, so a refused claim leaves
    the others and stays proposed with the reason."""
    from facts.services import MAX_BATCH, ClaimInput, Provenance, facts_assert

    def claim(candidate: CandidateFact) -> ClaimInput:
        return ClaimInput(
            subject=candidate.subject,
            predicate=candidate.predicate,
            value=candidate.value,
            valid_from=candidate.valid_from,
            provenance=Provenance(
                source_type=SourceType.AGENT_INFERENCE,
                source_ref=f"consolidation:candidate/{candidate.pk}",
                confidence=candidate.confidence,
                actor=ACTOR,
            ),
        )

    done: list[tuple[CandidateFact, object]] = []
    for begin in range(0, len(candidates), MAX_BATCH):
        batch = list(candidates[begin : begin + MAX_BATCH])
        try:
            with transaction.atomic():
                applied = facts_assert(agent=agent, claims=[claim(c) for c in batch])
        except PiperError:
            pass  # find the refused ones, one by one
        else:
            done += zip(batch, applied, strict=True)
            continue
        for candidate in batch:
            try:
                with transaction.atomic():
                    [applied_one] = facts_assert(agent=agent, claims=[claim(candidate)])
            except PiperError as exc:
                # e.g. the predicate relates entities, or holds numbers: a person should look.
                logger.info("candidate %s not asserted: %s", candidate.pk, exc.message)
                candidate.reason = f"not asserted: {exc.message}"[:MAX_REASON_CHARS]
                CandidateFact.objects.filter(pk=candidate.pk).update(reason=candidate.reason)
                if not_asserted is not None:
                    not_asserted[exc.code] = not_asserted.get(exc.code, 0) + 1
                continue
            done.append((candidate, applied_one))
    if not done:
        return []
    events = events_append(
        agent=agent,
        drafts=[
            EventDraft(
                event_type=CANDIDATE_ASSERTED,
                payload={
                    "candidate_id": str(candidate.pk),
                    "fact_id": str(applied.fact.pk),
                    "outcome": applied.outcome,
                    "decided_by": decided_by,
                },
                actor=decided_by,
                source_type=SourceType.AGENT_INFERENCE,
            )
            for candidate, applied in done
        ],
    )
    now = timezone.now()
    for (candidate, applied), event in zip(done, events, strict=True):
        candidate.status = CandidateStatus.ASSERTED
        candidate.fact_id = applied.fact.pk
        candidate.fact_outcome = applied.outcome
        candidate.decided_by = decided_by
        candidate.decided_at = now
        candidate.decision_event = event
        candidate.reason = ""
    # One UPDATE … FROM unnest: bulk_update's CASE per row and column cost more
    # than the facts it records (a fifth of a consolidation step).
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {CandidateFact._meta.db_table} c"
            " SET status = %s, decided_by = %s, decided_at = %s, reason = '',"
            "     fact_id = v.fact_id, fact_outcome = v.outcome, decision_event_id = v.event_id"
            " FROM unnest(%s::uuid[], %s::uuid[], %s::text[], %s::uuid[])"
            "      AS v(id, fact_id, outcome, event_id)"
            " WHERE c.id = v.id",
            [
                CandidateStatus.ASSERTED,
                decided_by,
                now,
                [c.pk for c, _ in done],
                [c.fact_id for c, _ in done],
                [c.fact_outcome for c, _ in done],
                [c.decision_event_id for c, _ in done],
            ],
        )
    return [c for c, _ in done]


def consolidation_run_finish(*, run_id: uuid.UUID) -> ConsolidationRun:
    """Close a run that has read everything (a no-op for one already closed)."""
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        if run.status != RunStatus.RUNNING:
            return run
        if run.cursor_seq < run.to_seq:
            raise Conflict(
                f"run {run.pk} has not read up to seq {run.to_seq} yet (cursor {run.cursor_seq})",
                code="run_unfinished",
            )
        return _close(run, RunStatus.SUCCEEDED, RUN_FINISHED)


def consolidation_run_fail(*, run_id: uuid.UUID, error: str) -> ConsolidationRun:
    """Mark a run failed (its cursor keeps what its steps committed); a no-op if closed."""
    with transaction.atomic():
        run = ConsolidationRun.objects.select_for_update().get(pk=run_id)
        if run.status != RunStatus.RUNNING:
            return run
        run.error = error[:MAX_REASON_CHARS]
        return _close(run, RunStatus.FAILED, RUN_FAILED)


def _close(run: ConsolidationRun, status: str, event_type: str) -> ConsolidationRun:
    finished = timezone.now()
    run.status = status
    run.finished_at = finished
    run.duration_ms = max(0, int((finished - run.started_at).total_seconds() * 1000))
    run.finish_event = event_append(
        agent=run.agent,
        event_type=event_type,
        payload={
            "run_id": str(run.pk),
            "status": status,
            "cursor_seq": run.cursor_seq,
            "episodes_read": run.episodes_read,
            "episodes_excluded": run.episodes_excluded,
            "statements_found": run.statements_found,
            "statements_skipped": run.statements_skipped,
            "candidates_proposed": run.candidates_proposed,
            "candidates_asserted": run.candidates_asserted,
            "duration_ms": run.duration_ms,
            "error": run.error,
        },
        actor=ACTOR,
        source_type=SourceType.AGENT_INFERENCE,
    )
    run.save(update_fields=["status", "finished_at", "duration_ms", "finish_event", "error"])
    return run


def consolidate(
    *,
    agent: Agent,
    kind: str = RunKind.FACTS,
    batch_size: int | None = None,
    time_budget: float | None = None,
    progress: Callable[[ConsolidationRun, StepResult], None] | None = None,
) -> ConsolidationRun | None:
    """Start (or resume) the agent's run and step it until done or `time_budget` seconds
    have passed; finish it when done. Returns the run (still running if the budget ran
    out: call again to go on), or None when there was nothing to read."""
    run = consolidation_run_start(agent=agent, kind=kind, batch_size=batch_size)
    if run is None:
        return None
    deadline = None if time_budget is None else time.monotonic() + time_budget
    extractors = load_extractors()
    try:
        while True:
            step = consolidation_run_step(run_id=run.pk, extractors=extractors)
            if progress is not None:
                progress(run, step)
            if step.done:
                run = consolidation_run_finish(run_id=run.pk)
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
    except Exception as exc:
        consolidation_run_fail(run_id=run.pk, error=f"{type(exc).__name__}: {exc}")
        raise
    run.refresh_from_db()
    return run


# ----------------------------------------------------------------------- decisions


def _locked_candidate(agent: Agent, candidate_id: uuid.UUID) -> CandidateFact:
    key = (
        CandidateFact.objects.filter(agent=agent, pk=candidate_id)
        .values_list("claim_key", flat=True)
        .first()
    )
    if key is None:
        raise NotFound(f"candidate {candidate_id} not found")
    _lock_claims(agent.pk, [key])
    return CandidateFact.objects.select_for_update().get(pk=candidate_id)


def candidate_accept(*, agent: Agent, candidate_id: uuid.UUID, actor: str = "") -> CandidateFact:
    """Assert a proposed candidate now, whatever its confidence, as an agent_inference
    fact. Conflict (not_proposed) if it was already asserted or rejected; the facts
    service's refusal (e.g. a predicate that relates entities) comes through as is."""
    with transaction.atomic():
        candidate = _locked_candidate(agent, candidate_id)
        if candidate.status != CandidateStatus.PROPOSED:
            raise Conflict(
                f"candidate {candidate_id} is {candidate.status}, not proposed",
                code="not_proposed",
                details={"status": candidate.status},
            )
        from facts.services import ClaimInput, Provenance, fact_assert

        applied = fact_assert(
            agent=agent,
            claim=ClaimInput(
                subject=candidate.subject,
                predicate=candidate.predicate,
                value=candidate.value,
                valid_from=candidate.valid_from,
                provenance=Provenance(
                    source_type=SourceType.AGENT_INFERENCE,
                    source_ref=f"consolidation:candidate/{candidate.pk}",
                    confidence=candidate.confidence,
                    actor=actor or ACTOR,
                ),
            ),
        )
        decided_by = actor or "api"
        candidate.decision_event = event_append(
            agent=agent,
            event_type=CANDIDATE_ASSERTED,
            payload={
                "candidate_id": str(candidate.pk),
                "fact_id": str(applied.fact.pk),
                "outcome": applied.outcome,
                "decided_by": decided_by,
            },
            actor=decided_by,
            source_type=SourceType.AGENT_INFERENCE,
        )
        candidate.status = CandidateStatus.ASSERTED
        candidate.fact_id = applied.fact.pk
        candidate.fact_outcome = applied.outcome
        candidate.decided_by = decided_by
        candidate.decided_at = timezone.now()
        candidate.reason = ""
        candidate.save(
            update_fields=[
                "status",
                "fact_id",
                "fact_outcome",
                "decided_by",
                "decided_at",
                "decision_event",
                "reason",
            ]
        )
        return candidate


def candidate_reject(
    *, agent: Agent, candidate_id: uuid.UUID, reason: str, actor: str = ""
) -> CandidateFact:
    """Close a candidate for good. An asserted one's fact version is retracted if it is
    still believed (a later version made by someone else is left alone). The claim is
    never proposed again from this candidate's evidence or sources. InvalidInput without
    a reason; Conflict (already_rejected) for a rejected one."""
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON_CHARS:
        raise InvalidInput(
            f"reason: say why, in 1-{MAX_REASON_CHARS} characters",
            details={"reason": ["required"]},
        )
    from facts.models import Fact, FactStatus
    from facts.services import Provenance, fact_retract

    with transaction.atomic():
        candidate = _locked_candidate(agent, candidate_id)
        if candidate.status == CandidateStatus.REJECTED:
            raise Conflict(f"candidate {candidate_id} is already rejected", code="already_rejected")
        retracted = None
        if candidate.status == CandidateStatus.ASSERTED:
            believed = Fact.objects.filter(
                agent=agent,
                pk=candidate.fact_id,
                superseded_at__isnull=True,
                status__in=[FactStatus.ACTIVE, FactStatus.CONTESTED],
            ).exists()
            if believed:
                fact_retract(
                    agent=agent,
                    fact_id=candidate.fact_id,
                    reason=f"consolidation candidate {candidate.pk} rejected: {reason}",
                    provenance=Provenance(
                        source_type=SourceType.AGENT_INFERENCE, actor=actor or "api"
                    ),
                )
                retracted = str(candidate.fact_id)
        decided_by = actor or "api"
        candidate.decision_event = event_append(
            agent=agent,
            event_type=CANDIDATE_REJECTED,
            payload={
                "candidate_id": str(candidate.pk),
                "previous_status": candidate.status,
                "reason": reason,
                "retracted_fact_id": retracted,
                "decided_by": decided_by,
            },
            actor=decided_by,
            source_type=SourceType.AGENT_INFERENCE,
        )
        candidate.status = CandidateStatus.REJECTED
        candidate.reason = reason
        candidate.decided_by = decided_by
        candidate.decided_at = timezone.now()
        candidate.save(
            update_fields=["status", "reason", "decided_by", "decided_at", "decision_event"]
        )
        return candidate
