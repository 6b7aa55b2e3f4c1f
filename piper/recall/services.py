"""Recall: classify the need, ask the right memory through its selectors, trace it.

`recall` answers one question from one route's store — facts (current
values, via the fact texts that propose candidates and the facts selectors
that decide what is current), episodes and source chunks (hybrid retrieval
with abstention), skills (matching), intentions (open commitments) or the
fact graph (paths) — and writes one RetrievalTrace. Every evidence item
carries a `memory_status`: source, age_seconds, authority, currentness
(current / superseded / contested / n/a) and confidence, plus what its kind
adds. A superseded fact is never presented as current.

`recall_feedback` records the agent's word on a trace, with a
`recall.feedback` ledger event in the same transaction.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ledger.services import EventDraft, events_append
from piper.errors import Conflict, InvalidInput, NotFound
from piper.provenance import AUTHORITY_ORDER, authority_rank
from piper.tenancy.models import Agent

from . import about, router
from .models import FailureCode, Outcome, RecallFeedback, RetrievalTrace, Route

MAX_QUERY_CHARS = 2000
MAX_LIMIT = 50
MAX_TRACE_CANDIDATES = 50
MAX_NOTE_CHARS = 2000
NEAR_MISS_PAIRS = 3  # pairs shown as near misses when no fact answers
CANDIDATE_PAIRS = 20  # pairs the fact texts propose before the question's words judge them
FEEDBACK_EVENT = "recall.feedback"
PATH_NAMESPACE = uuid.UUID("6f1d3c1e-5b7a-4f0e-9c43-2f6a1d0b8e57")
CURRENT, SUPERSEDED, CONTESTED, NOT_APPLICABLE = "current", "superseded", "contested", "n/a"


# ----------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class RecallFilters:
    """Narrow a recall. Episodes use all of them (source_id: chunks only)."""

    actor: str | None = None
    environment: str | None = None
    session_id: str | None = None
    goal_id: str | None = None
    task_id: str | None = None
    outcome: str | None = None
    occurred_after: datetime | None = None
    occurred_before: datetime | None = None
    source_id: uuid.UUID | None = None

    def as_dict(self) -> dict[str, Any]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = value.isoformat() if isinstance(value, datetime) else str(value)
        return out


FILTER_NAMES = tuple(f.name for f in fields(RecallFilters))


def _check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput(
            "query must be a non-empty question", details={"query": ["must not be empty"]}
        )
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"query must be at most {MAX_QUERY_CHARS} characters (got {len(query)}); "
            "ask about one thing at a time",
            details={"query": [f"at most {MAX_QUERY_CHARS} characters"]},
        )
    return query.strip()


def _check_filters(filters: RecallFilters | dict | None) -> RecallFilters:
    if filters is None:
        return RecallFilters()
    if isinstance(filters, dict):
        unknown = sorted(set(filters) - set(FILTER_NAMES))
        if unknown:
            raise InvalidInput(
                f"filters.{unknown[0]}: unknown filter; allowed: {', '.join(FILTER_NAMES)}",
                details={"filters": {name: ["unknown filter"] for name in unknown}},
            )
        filters = RecallFilters(**filters)
    for name in ("occurred_after", "occurred_before"):
        moment = getattr(filters, name)
        if moment is not None and timezone.is_naive(moment):
            raise InvalidInput(
                f"filters.{name}: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
                details={"filters": {name: ["naive date-time"]}},
            )
    after, before = filters.occurred_after, filters.occurred_before
    if after is not None and before is not None and before < after:
        raise InvalidInput(
            "filters.occurred_before: the window ends before it starts; "
            "occurred_before must not be earlier than occurred_after",
            code="invalid_window",
            details={"filters": {"occurred_before": ["earlier than occurred_after"]}},
        )
    return filters


def _check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(
            f"limit must be an integer from 1 to {MAX_LIMIT}",
            details={"limit": [f"between 1 and {MAX_LIMIT}"]},
        )
    return limit


# ---------------------------------------------------------------------- results


@dataclass
class Evidence:
    """One piece of evidence: what it is, why to believe it, how well it matched."""

    kind: str  # fact | episode | chunk | skill | intention | path
    id: str
    text: str
    score: float
    memory_status: dict[str, Any]
    obj: Any  # the Fact, Episode, SourceChunk, skills Candidate, Intention or facts Path
    signals: dict[str, Any] = field(default_factory=dict)
    session_id: str = ""
    occurred_at: datetime | None = None

    def trace_entry(self) -> dict[str, Any]:
        entry = {"kind": self.kind, "id": self.id, "score": self.score}
        if self.signals:
            entry["signals"] = self.signals
        return entry


@dataclass
class Answer:
    """What a route's store said."""

    evidence: list[Evidence]
    near_misses: list[Evidence] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)
    abstained: bool | None = None  # None: abstained when there is no evidence
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RecallResult:
    trace: RetrievalTrace
    decision: router.Decision
    evidence: list[Evidence]
    near_misses: list[Evidence]
    groups: list[dict[str, Any]]
    abstained: bool
    latency_ms: float
    details: dict[str, Any]


class _QueryVector:
    """The query's embedding, computed at most once and only if a route needs it."""

    def __init__(self, query: str):
        self.query = query
        self._vector: list[float] | None = None
        self.embedder = None

    def get(self) -> list[float]:
        if self._vector is None:
            from piper.embeddings import get_embedder

            self.embedder = get_embedder()
            self._vector = self.embedder.embed_one(self.query)
        return self._vector

    @property
    def model(self) -> str:
        return self.embedder.name if self.embedder is not None else ""


@dataclass(frozen=True)
class Ask:
    agent: Agent
    query: str
    vector: _QueryVector
    limit: int
    filters: RecallFilters
    context: dict
    scopes: Sequence[str] | None
    now: datetime


def _age(now: datetime, then: datetime | None) -> int | None:
    return None if then is None else max(0, int((now - then).total_seconds()))


def _when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# ------------------------------------------------------------------------ facts


def _fact_text(fact) -> str:
    from facts.search import render, render_value

    value = fact.object_entity.name if fact.object_entity_id else render_value(fact.object_value)
    return render(predicate=fact.predicate.name, subject=fact.subject.name, values=[value])


def _fact_evidence(
    fact, *, score: float, currentness: str, now: datetime, signals=None
) -> Evidence:
    event = fact.source_event
    volatility = fact.predicate.volatility_seconds
    age = _age(now, fact.last_confirmed_at)
    return Evidence(
        kind="fact",
        id=str(fact.pk),
        text=_fact_text(fact),
        score=score,
        obj=fact,
        signals=signals or {},
        memory_status={
            "source": {
                "type": event.source_type,
                "ref": event.source_ref,
                "event_id": str(event.pk),
                "actor": event.actor,
                "session_id": event.session_id,
            },
            "age_seconds": age,
            "authority": fact.authority,
            "currentness": currentness,
            "confidence": float(fact.confidence),
            "status": fact.status,
            "valid_from": _when(fact.valid_from),
            "valid_to": _when(fact.valid_to),
            "recorded_at": _when(fact.recorded_at),
            "needs_recheck": volatility is not None and age > volatility,
            "superseded_by": str(fact.superseded_by_id) if fact.superseded_by_id else None,
            "contested_by": [str(c.pk) for c in fact.open_contests],
        },
    )


def _subject_names(agent: Agent, subject_ids) -> dict[uuid.UUID, list[str]]:
    """Every name (canonical and alias) of each subject, one query."""
    from facts.models import EntityAlias

    names: dict[uuid.UUID, list[str]] = {}
    rows = EntityAlias.objects.filter(agent=agent, entity_id__in=list(subject_ids)).values_list(
        "entity_id", "alias"
    )
    for entity_id, alias in rows:
        names.setdefault(entity_id, []).append(alias)
    return names


def _abstention_reason(verdicts: Sequence[about.Verdict], *, answering: int, weak: int) -> str:
    """Why no fact answered, in one word."""
    if not verdicts:
        return "no_candidate"
    if answering:
        return "nothing_current"  # the pair asked about holds no value now
    if weak:
        return "weak_similarity"  # no subject named, and no text close enough
    if any(v.subject in (about.NAMED, about.PARTIAL) for v in verdicts):
        return "predicate_not_known"  # the subject is known; what is asked of it is not
    return "subject_not_known"


def _current_fact(ask: Ask) -> Answer:
    """Fact texts propose (subject, predicate) pairs; a pair answers only if
    the question is about its subject and its predicate (piper.recall.about);
    the facts selectors say what is believed and valid now. The value just
    before it, if any, comes after every current value, marked superseded —
    never as current. With no pair that answers, it abstains: the best pairs'
    values are near misses."""
    from facts import selectors as facts
    from facts.search import entities_named_in, fact_candidates

    named = entities_named_in(agent=ask.agent, text=ask.query)
    candidates = fact_candidates(
        agent=ask.agent,
        query=ask.query,
        query_embedding=ask.vector.get(),
        limit=max(ask.limit, CANDIDATE_PAIRS),
        named=named,
    )
    question = about.Question.of(ask.query, (m.entity.pk for m in named))
    names = _subject_names(ask.agent, {c.fact_text.subject_id for c in candidates})
    implied_floor = settings.PIPER_FACT_IMPLIED_MIN_SIMILARITY
    judged = []
    weak = 0
    for candidate in candidates:
        text = candidate.fact_text
        verdict = about.judge(
            question,
            subject_id=text.subject_id,
            subject_names=names.get(text.subject_id) or [text.subject.name],
            predicate_name=text.predicate.name,
            predicate_description=text.predicate.description,
        )
        accepted = verdict.accepted
        if accepted and verdict.subject == about.IMPLIED:
            # No subject in the question: only a close text answers it.
            similarity = candidate.signals.get("vector_similarity")
            if similarity is None or similarity < implied_floor:
                accepted = False
                weak += 1
        judged.append((candidate, verdict, accepted))
    # What answers, best first: named subjects before implied ones, a stated
    # predicate before a described one; then the candidates' own order.
    order = {id(c): n for n, (c, _, _) in enumerate(judged)}
    answering = sorted(
        (x for x in judged if x[2]), key=lambda x: (x[1].sort_key(), order[id(x[0])])
    )
    rejected = [x for x in judged if not x[2]]

    def lookup(candidate):
        return facts.facts_valid_at_by_ref(
            agent=ask.agent,
            subject_ref=str(candidate.fact_text.subject_id),
            predicate_name=candidate.predicate_name,
            valid_time=ask.now,
        )

    def evidence_of(candidate, verdict, believed) -> list[Evidence]:
        signals = {**candidate.signals, "about": verdict.as_dict()}
        return [
            _fact_evidence(
                fact,
                score=candidate.score,
                currentness=CONTESTED if fact.open_contests else CURRENT,
                now=ask.now,
                signals=signals,
            )
            for fact in believed
        ]

    def ended(candidate, verdict, subject, predicate) -> Evidence | None:
        # The latest believed value whose valid time has ended: what it was before.
        fact = (
            facts.fact_chain(agent=ask.agent, subject=subject, predicate=predicate)
            .filter(facts.BELIEVED, valid_to__lte=ask.now)
            .order_by("-valid_to", "-recorded_at", "id")
            .first()
        )
        if fact is None:
            return None
        return _fact_evidence(
            fact,
            score=round(candidate.score / 2, 6),
            currentness=SUPERSEDED,
            now=ask.now,
            signals={**candidate.signals, "about": verdict.as_dict()},
        )

    traced: dict[int, dict[str, Any]] = {}

    def trace(candidate, verdict, accepted, believed=None) -> None:
        entry = traced.setdefault(
            id(candidate),
            {
                "kind": "fact_text",
                "id": str(candidate.fact_text.pk),
                "subject": candidate.fact_text.subject.name,
                "predicate": candidate.predicate_name,
                "score": candidate.score,
                "signals": candidate.signals,
                "about": verdict.as_dict(),
                "accepted": accepted,
            },
        )
        if believed is not None:
            entry["current"] = [str(f.pk) for f in believed]

    for candidate, verdict, accepted in judged:
        trace(candidate, verdict, accepted)
    current: list[Evidence] = []
    looked_up = []
    for candidate, verdict, accepted in answering:
        if len(current) >= ask.limit:
            break
        subject, predicate, believed = lookup(candidate)
        trace(candidate, verdict, accepted, believed)
        looked_up.append((candidate, verdict, subject, predicate, bool(believed)))
        current += evidence_of(candidate, verdict, believed)
    evidence = current[: ask.limit]
    if evidence:
        # What the kept pairs held before, after the current values, in the
        # room the limit leaves.
        kept = {(e.obj.subject_id, e.obj.predicate_id) for e in evidence}
        history = []
        for candidate, verdict, subject, predicate, has_current in looked_up:
            if len(evidence) + len(history) >= ask.limit:
                break
            if not has_current or (subject.pk, predicate.pk) not in kept:
                continue
            if (before := ended(candidate, verdict, subject, predicate)) is not None:
                history.append(before)
        return Answer(
            evidence=evidence + history,
            candidates=list(traced.values()),
            abstained=False,
            details={"facts": {"named": [m.alias for m in named], "answering": len(answering)}},
        )
    # Nothing answers: the pairs that did (with nothing current) or came
    # nearest, their current or last value each — a near miss, never evidence.
    near: list[Evidence] = []
    room = min(ask.limit, NEAR_MISS_PAIRS)
    nearest = [(c, v) for c, v, _ in answering] + sorted(
        ((c, v) for c, v, _ in rejected), key=lambda x: (x[1].sort_key(), order[id(x[0])])
    )
    for candidate, verdict in nearest[:room]:
        subject, predicate, believed = lookup(candidate)
        trace(candidate, verdict, False, believed)
        if believed:
            near += evidence_of(candidate, verdict, believed)
        elif (before := ended(candidate, verdict, subject, predicate)) is not None:
            near.append(before)
    reason = _abstention_reason([v for _, v, _ in judged], answering=len(answering), weak=weak)
    return Answer(
        evidence=[],
        near_misses=near[:room],
        candidates=list(traced.values()),
        abstained=True,
        details={"facts": {"named": [m.alias for m in named], "abstained_because": reason}},
    )


# ---------------------------------------------------------------- episodes & co.


def _episode_evidence(hit, now: datetime) -> Evidence:
    episode = hit.obj
    text = episode.summary or " ".join(p for p in (episode.action, episode.observation) if p)
    return Evidence(
        kind="episode",
        id=str(episode.pk),
        text=text,
        score=round(float(hit.score), 6),
        obj=episode,
        signals=dict(hit.signals),
        session_id=episode.session_id,
        occurred_at=episode.occurred_at,
        memory_status={
            "source": {
                "type": episode.source_type,
                "event_id": str(episode.raw_event_id),
                "actor": episode.actor,
                "session_id": episode.session_id,
            },
            "age_seconds": _age(now, episode.occurred_at),
            "authority": episode.authority,
            "currentness": NOT_APPLICABLE,  # an event happened; it is neither current nor superseded
            "confidence": float(episode.confidence),
            "occurred_at": _when(episode.occurred_at),
            "outcome": episode.outcome,
        },
    )


def _named_entities(ask: Ask) -> tuple[str, ...]:
    from facts.search import entities_named_in

    return tuple(
        sorted({m.alias.lower() for m in entities_named_in(agent=ask.agent, text=ask.query)})
    )


def _what_happened(ask: Ask) -> Answer:
    from episodes.query_analysis import analyse_query
    from episodes.retrieval import SearchFilters, episode_search

    f = ask.filters
    # Episode search embeds the question without the agent's actor names (they weigh
    # on the vector, not on what sets episodes apart); the question's own vector is
    # reused only when it names none.
    named_actors = bool(analyse_query(agent_id=ask.agent.pk, query=ask.query).actors_named)
    result = episode_search(
        agent=ask.agent,
        query=ask.query,
        query_embedding=None if named_actors else ask.vector.get(),
        filters=SearchFilters(
            actor=f.actor,
            environment=f.environment,
            session_id=f.session_id,
            goal_id=f.goal_id,
            task_id=f.task_id,
            outcome=f.outcome,
            occurred_after=f.occurred_after,
            occurred_before=f.occurred_before,
            entities=_named_entities(ask),
        ),
        limit=ask.limit,
        now=ask.now,
    )
    evidence = [_episode_evidence(hit, ask.now) for hit in result.hits]
    near = [_episode_evidence(hit, ask.now) for hit in result.near_misses]
    return Answer(
        evidence=evidence,
        near_misses=near,
        candidates=[e.trace_entry() for e in evidence + near],
        abstained=result.abstained,
        details={
            "threshold": result.threshold,
            "evidence_score": result.evidence_score,
            "embedding_model": result.embedding_model,
        },
    )


_DOC_NAMED = (
    re.compile(r"\baccording to (?:the |our |my |that |this )?(?P<doc>[^,?.;:!]+)"),
    re.compile(
        r"\bwhat (?:did|does|do) (?:the |our |my |that |this )?(?P<doc>[^,?.;:!]+?) "
        rf"{router.SAYS}\b"
    ),
    re.compile(r"\b(?:in|from) (?:the |our |my |that |this )(?P<doc>[^,?.;:!]+)"),
)


def _source_named(ask: Ask):
    """The one registered document whose title the question names, if any."""
    from ledger.selectors import source_list

    text = router.normalise(ask.query)
    for pattern in _DOC_NAMED:
        match = pattern.search(text)
        if not match:
            continue
        doc = match.group("doc").strip()
        for words in (doc, " ".join(doc.split()[:-1])):  # "the runbook says …", "… runbook"
            if len(words) < 3:
                continue
            found = list(source_list(agent=ask.agent).filter(title__icontains=words)[:2])
            if len(found) == 1:
                return found[0]
    return None


def _chunk_evidence(hit, source, now: datetime) -> Evidence:
    chunk = hit.obj
    event = source.source_event
    return Evidence(
        kind="chunk",
        id=str(chunk.pk),
        text=chunk.text,
        score=round(float(hit.score), 6),
        obj=chunk,
        signals=dict(hit.signals),
        memory_status={
            "source": {
                "type": event.source_type,
                "ref": source.uri,
                "event_id": str(event.pk),
                "source_id": str(source.pk),
                "title": source.title,
            },
            "age_seconds": _age(now, source.created_at),
            "authority": event.authority,
            "currentness": NOT_APPLICABLE,  # a document says what it says
            "confidence": float(event.confidence),
        },
    )


def _source(ask: Ask) -> Answer:
    from episodes.retrieval import chunk_search
    from ledger.selectors import source_list

    source_id = ask.filters.source_id
    named = None
    if source_id is None:
        named = _source_named(ask)
        source_id = named.pk if named is not None else None
    result = chunk_search(
        agent=ask.agent,
        query=ask.query,
        query_embedding=ask.vector.get(),
        source_id=source_id,
        limit=ask.limit,
    )
    hits = list(result.hits) + list(result.near_misses)
    sources = (
        source_list(agent=ask.agent)
        .filter(pk__in={h.obj.source_id for h in hits})
        .select_related("source_event")
        .defer("content", "source_event__payload")
        .in_bulk()
    )
    evidence = [_chunk_evidence(h, sources[h.obj.source_id], ask.now) for h in result.hits]
    near = [_chunk_evidence(h, sources[h.obj.source_id], ask.now) for h in result.near_misses]
    return Answer(
        evidence=evidence,
        near_misses=near,
        candidates=[e.trace_entry() for e in evidence + near],
        abstained=result.abstained,
        details={
            "threshold": result.threshold,
            "evidence_score": result.evidence_score,
            "embedding_model": result.embedding_model,
            "source_id": str(source_id) if source_id else None,
            "source_named": named.title if named is not None else None,
        },
    )


# ----------------------------------------------------------------------- skills


def _skill_evidence(candidate, version, now: datetime) -> Evidence:
    from skills.selectors import rate

    v = candidate.version
    status = {
        "source": {"type": "skill", "ref": v.skill.name, "event_id": None},
        "age_seconds": None,
        "authority": None,
        "currentness": CURRENT if v.status == "validated" else NOT_APPLICABLE,
        "confidence": None,
        "status": v.status,
        "similarity": candidate.similarity,
        "reasons": candidate.reasons,
    }
    if version is not None:
        event = version.source_event
        status.update(
            source={
                "type": event.source_type,
                "ref": v.skill.name,
                "event_id": str(event.pk),
            },
            age_seconds=_age(now, version.created_at),
            authority=event.authority,
            # How often it worked lately: what a validated skill's confidence is.
            confidence=rate(version.recent_successes or 0, version.recent_total or 0),
            last_used_at=_when(version.last_used_at),
            executions=version.executions_total,
        )
    return Evidence(
        kind="skill",
        id=str(v.pk),
        text=v.purpose,
        score=candidate.score,
        obj=candidate,
        signals={"similarity": candidate.similarity, "trigger": candidate.trigger.strength},
        memory_status=status,
    )


def _how_to(ask: Ask) -> Answer:
    from skills import selectors as skills

    result = skills.skill_match(
        agent=ask.agent,
        task=ask.query,
        context=ask.context,
        scopes=ask.scopes,
        limit=ask.limit,
    )
    evidence = []
    for candidate in result.applicable:
        version = skills.version_get(agent=ask.agent, version_id=candidate.version.pk)
        evidence.append(_skill_evidence(candidate, version, ask.now))
    near = [_skill_evidence(c, None, ask.now) for c in result.near_misses]
    return Answer(
        evidence=evidence,
        near_misses=near,
        candidates=[e.trace_entry() for e in evidence + near],
    )


# ------------------------------------------------------------------- intentions

_URGENCY = {"due": 1.0, "executing": 0.9, "active": 0.6, "blocked": 0.4}
_ROUTE_WORDS = {
    "what", "when", "where", "which", "who", "how", "the", "and", "for", "with", "about",
    "that", "this", "have", "has", "was", "were", "are", "is", "did", "does", "do", "am",
    "supposed", "remind", "reminder", "reminders", "promise", "promised", "todo", "todos",
    "need", "needs", "should", "must", "next", "pending", "due", "today", "tomorrow", "now",
    "my", "our", "me", "you", "your", "list", "still", "task", "tasks", "thing", "things",
}  # fmt: skip


def _words(text: str) -> set[str]:
    """Content words, cut to five letters (a poor man's stem: invoice/invoices)."""
    return {
        w[:5]
        for w in re.findall(r"[a-z0-9]+", text.lower())
        if len(w) > 2 and w not in _ROUTE_WORDS
    }


def _what_to_do(ask: Ask) -> Answer:
    """Open commitments — due first — with what the question names lifted."""
    from intentions.selectors import intention_list

    open_statuses = list(_URGENCY)
    intentions = list(
        intention_list(agent=ask.agent, statuses=open_statuses)
        .select_related("source_event")
        .defer("source_event__payload")[:500]
    )
    asked = _words(ask.query)
    scored = []
    for intention in intentions:
        relevance = len(asked & _words(intention.description)) / len(asked) if asked else 0.0
        urgency = _URGENCY[intention.status]
        if intention.due_at is not None and intention.due_at <= ask.now:
            urgency = min(1.0, urgency + 0.2)
        score = round(0.6 * relevance + 0.4 * urgency, 4)
        scored.append((score, intention.priority, intention, relevance, urgency))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2].due_at or ask.now, str(s[2].pk)))
    evidence = []
    for score, _, intention, relevance, urgency in scored[: ask.limit]:
        event = intention.source_event
        evidence.append(
            Evidence(
                kind="intention",
                id=str(intention.pk),
                text=intention.description,
                score=score,
                obj=intention,
                signals={"relevance": round(relevance, 4), "urgency": round(urgency, 4)},
                memory_status={
                    "source": {
                        "type": event.source_type,
                        "ref": event.source_ref,
                        "event_id": str(event.pk),
                        "session_id": intention.source_session,
                    },
                    "age_seconds": _age(ask.now, intention.created_at),
                    "authority": event.authority,
                    "currentness": CURRENT,  # open: cancelled and completed ones never come back
                    "confidence": float(event.confidence),
                    "status": intention.status,
                    "due_at": _when(intention.due_at),
                    "trigger_type": intention.trigger_type,
                    "priority": intention.priority,
                },
            )
        )
    return Answer(evidence=evidence, candidates=[e.trace_entry() for e in evidence])


# ------------------------------------------------------------------------ graph


def _path_evidence(path, score: float, now: datetime) -> Evidence:
    from facts.search import humanize

    steps = [path.entities[0].name]
    for fact, entity in zip(path.facts, path.entities[1:], strict=True):
        steps.append(f"—{humanize(fact.predicate.name)}→ {entity.name}")
    order = AUTHORITY_ORDER
    weakest = min(path.facts, key=lambda f: authority_rank(f.authority, order))
    confidence = 1.0
    for fact in path.facts:
        confidence *= float(fact.confidence)
    contested = any(fact.open_contests for fact in path.facts)
    fact_ids = [str(f.pk) for f in path.facts]
    return Evidence(
        kind="path",
        id=str(uuid.uuid5(PATH_NAMESPACE, ",".join(fact_ids))),
        text=" ".join(steps),
        score=score,
        obj=path,
        signals={"hops": len(path.facts)},
        memory_status={
            "source": {
                "type": "fact_graph",
                "facts": fact_ids,
                "event_ids": [str(f.source_event_id) for f in path.facts],
            },
            "age_seconds": max(_age(now, f.last_confirmed_at) for f in path.facts),
            "authority": weakest.authority,  # a chain is as strong as its weakest link
            "currentness": CONTESTED if contested else CURRENT,
            "confidence": round(confidence, 6),
            "hops": len(path.facts),
        },
    )


def _multi_hop(ask: Ask) -> Answer:
    """Paths of current relations between the things the question names
    (either direction), or from the one thing it names."""
    from facts import selectors as facts
    from facts.search import entities_named_in

    named = entities_named_in(agent=ask.agent, text=ask.query)
    entities = [m.entity for m in named]
    paths = []
    if len(entities) >= 2:
        for a, b in ((entities[0], entities[1]), (entities[1], entities[0])):
            paths += facts.graph_paths(
                agent=ask.agent, start=a, end=b, max_hops=3, valid_time=ask.now, limit=ask.limit
            )
    elif entities:
        paths = facts.graph_paths(
            agent=ask.agent, start=entities[0], max_hops=2, valid_time=ask.now, limit=ask.limit
        )
    paths.sort(key=lambda p: (len(p.facts), [e.name for e in p.entities]))
    evidence = [_path_evidence(p, round(1.0 / len(p.facts), 4), ask.now) for p in paths]
    evidence = evidence[: ask.limit]
    return Answer(
        evidence=evidence,
        candidates=[e.trace_entry() for e in evidence],
        details={"entities": [{"id": str(m.entity.pk), "name": m.alias} for m in named]},
    )


# Where a classified question goes when its route's store had no candidate at all.
FALLBACK: dict[str, str] = {
    Route.CURRENT_FACT: Route.WHAT_HAPPENED,
    Route.MULTI_HOP: Route.WHAT_HAPPENED,
}

HANDLERS: dict[str, Callable[[Ask], Answer]] = {
    Route.CURRENT_FACT: _current_fact,
    Route.WHAT_HAPPENED: _what_happened,
    Route.HOW_TO: _how_to,
    Route.WHAT_TO_DO: _what_to_do,
    Route.SOURCE: _source,
    Route.MULTI_HOP: _multi_hop,
}


# ------------------------------------------------------------------------ recall


def group_by_session(evidence: Sequence[Evidence]) -> list[dict[str, Any]]:
    """Episodes grouped by session, each group in time order; groups in order
    of their best evidence."""
    groups: dict[str, dict[str, Any]] = {}
    for e in evidence:
        if e.kind != "episode":
            continue
        group = groups.setdefault(e.session_id, {"session_id": e.session_id, "items": []})
        group["items"].append(e)
    out = []
    for group in groups.values():
        items = sorted(group["items"], key=lambda e: (e.occurred_at, e.id))
        out.append(
            {
                "session_id": group["session_id"],
                "evidence": [e.id for e in items],
                "first_at": _when(items[0].occurred_at),
                "last_at": _when(items[-1].occurred_at),
                "best_score": max(e.score for e in items),
            }
        )
    return out


def recall(
    *,
    agent: Agent,
    query: str,
    route: str = router.AUTO,
    limit: int = 10,
    filters: RecallFilters | dict | None = None,
    context: dict | None = None,
    scopes: Sequence[str] | None = None,
    now: datetime | None = None,
) -> RecallResult:
    """Answer `query` from the memory its route names, and trace it.

    `route` is one of router.ALLOWED: "auto" classifies (rules, then the
    embedding prototypes when no rule matches); any other value is taken as
    given. A classified current_fact or multi_hop question whose store had no
    candidate at all is answered from episodes instead (decision.fallback).
    Raises InvalidInput for an empty or huge query, an unknown route,
    a limit outside 1..50, an unknown filter or a window that ends before it
    starts — before anything is written. Writes exactly one RetrievalTrace.
    Abstains ("no supporting memory") when the store has no evidence above
    its threshold; near misses are then the best of what it had. `now`
    defaults to the agent's clock (intentions.clock.now_for: simulated for a
    battery agent, else the wall clock).
    """
    started = time.perf_counter()
    query = _check_query(query)
    route = router.check_route(route)
    limit = _check_limit(limit)
    filters = _check_filters(filters)
    if context is not None and not isinstance(context, dict):
        raise InvalidInput("context must be a JSON object", details={"context": ["not an object"]})
    if now is None:
        # The engine's now for this agent: its simulated clock (the battery's),
        # else the wall clock. Ages, recency and "valid now" are measured from it.
        from intentions.clock import now_for

        now = now_for(agent.pk)
    vector = _QueryVector(query)
    if route == router.AUTO:
        decision = router.classify_by_rules(query)
        if decision is None:
            decision = router.classify_by_prototypes(vector.get(), vector.embedder)
    else:
        decision = router.explicit(route)
    ask = Ask(agent, query, vector, limit, filters, context or {}, scopes, now)
    answer = HANDLERS[decision.route](ask)
    fallback = FALLBACK.get(decision.route)
    if fallback and not decision.explicit and not answer.candidates:
        # A classified route whose store had nothing at all to consider: what
        # happened is the broadest memory (the question may be about a
        # conversation, not a recorded fact). An explicit route is never overridden.
        answer = HANDLERS[fallback](ask)
        decision = dataclasses.replace(decision, fallback=fallback)
    abstained = answer.abstained if answer.abstained is not None else not answer.evidence
    # An abstaining store's evidence is only ever a near miss.
    evidence = [] if abstained else answer.evidence
    near = (answer.evidence if abstained else []) + answer.near_misses
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    trace = RetrievalTrace.objects.create(
        agent=agent,
        query=query,
        route=decision.route,
        explicit=decision.explicit,
        decision=decision.as_dict() | {"details": answer.details},
        filters=filters.as_dict(),
        candidates=answer.candidates[:MAX_TRACE_CANDIDATES],
        returned=[{"kind": e.kind, "id": e.id, "score": e.score} for e in evidence],
        abstained=abstained,
        latency_ms=latency_ms,
        embedding_model=vector.model,
    )
    return RecallResult(
        trace=trace,
        decision=decision,
        evidence=evidence,
        near_misses=near[:limit],
        groups=group_by_session(evidence),
        abstained=abstained,
        latency_ms=latency_ms,
        details=answer.details,
    )


# ---------------------------------------------------------------------- feedback


def recall_feedback(
    *,
    agent: Agent,
    trace_id: uuid.UUID,
    used: Sequence[str] = (),
    outcome: str,
    failure_code: str | None = None,
    note: str = "",
) -> RecallFeedback:
    """Record which of a trace's evidence the agent used and how it went, with
    a `recall.feedback` ledger event in the same transaction.

    Another agent's trace is NotFound (nothing written). InvalidInput for an
    unknown outcome or failure code, a failure code on a success, or `used`
    ids the trace did not return. Conflict (feedback_exists) when the trace
    already has feedback: one word per recall.
    """
    if outcome not in Outcome.values:
        raise InvalidInput(
            f"outcome must be one of {', '.join(Outcome.values)}",
            details={"outcome": [f"one of: {', '.join(Outcome.values)}"]},
        )
    code = failure_code or ""
    if code and code not in FailureCode.values:
        raise InvalidInput(
            f"failure_code must be one of {', '.join(FailureCode.values)}",
            details={"failure_code": [f"one of: {', '.join(FailureCode.values)}"]},
        )
    if code and outcome == Outcome.SUCCESS:
        raise InvalidInput(
            "failure_code: a success has no failure code; send failure or partial",
            details={"failure_code": ["only with outcome failure or partial"]},
        )
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        raise InvalidInput(
            f"note must be text of at most {MAX_NOTE_CHARS} characters",
            details={"note": [f"at most {MAX_NOTE_CHARS} characters"]},
        )
    used = [str(u) for u in used]
    with transaction.atomic():
        trace = RetrievalTrace.objects.select_for_update().filter(agent=agent, pk=trace_id).first()
        if trace is None:
            raise NotFound(f"recall {trace_id} not found")
        returned = {item["id"] for item in trace.returned}
        unknown = [u for u in used if u not in returned]
        if unknown:
            raise InvalidInput(
                f"used: {unknown[0]} is not evidence this recall returned",
                details={"used": [f"not returned by recall {trace_id}: {', '.join(unknown)}"]},
            )
        if RecallFeedback.objects.filter(trace=trace).exists():
            raise Conflict(
                f"recall {trace_id} already has feedback; each recall takes one",
                code="feedback_exists",
            )
        [event] = events_append(
            agent=agent,
            drafts=[
                EventDraft(
                    event_type=FEEDBACK_EVENT,
                    payload={
                        "trace_id": str(trace.pk),
                        "route": trace.route,
                        "used": used,
                        "outcome": outcome,
                        "failure_code": code,
                        "note": note,
                    },
                )
            ],
        )
        return RecallFeedback.objects.create(
            agent=agent,
            trace=trace,
            used=used,
            outcome=outcome,
            failure_code=code,
            note=note,
            source_event=event,
        )
