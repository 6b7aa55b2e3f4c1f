"""The what_happened and source routes: episodes and document chunks, from hybrid search."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

from piper.api.serializers import api_datetime

from .. import router
from .results import NOT_APPLICABLE, Answer, Ask, Evidence, age_seconds


def _search_answer(result, evidence_of: Callable[[Any], Evidence], **details) -> Answer:
    """An episode or chunk search's result as a route's answer: its hits and near
    misses as evidence, the abstention and what decided it."""
    evidence = [evidence_of(hit) for hit in result.hits]
    near = [evidence_of(hit) for hit in result.near_misses]
    return Answer(
        evidence=evidence,
        near_misses=near,
        candidates=[e.trace_entry() for e in evidence + near],
        abstained=result.abstained,
        details={
            "threshold": result.threshold,
            "evidence_score": result.evidence_score,
            "embedding_model": result.embedding_model,
            **details,
        },
    )


def _episode_evidence(hit, now: datetime) -> Evidence:
    return episode_evidence(hit.obj, score=float(hit.score), signals=dict(hit.signals), now=now)


def episode_evidence(episode, *, score: float, signals: dict, now: datetime) -> Evidence:
    text = episode.summary or " ".join(p for p in (episode.action, episode.observation) if p)
    return Evidence(
        kind="episode",
        id=str(episode.pk),
        text=text,
        score=round(score, 6),
        obj=episode,
        signals=signals,
        session_id=episode.session_id,
        occurred_at=episode.occurred_at,
        memory_status={
            "source": {
                "type": episode.source_type,
                "event_id": str(episode.raw_event_id),
                "actor": episode.actor,
                "session_id": episode.session_id,
            },
            "age_seconds": age_seconds(now, episode.occurred_at),
            "authority": episode.authority,
            "currentness": NOT_APPLICABLE,  # an event happened; it is neither current nor superseded
            "confidence": float(episode.confidence),
            "occurred_at": api_datetime(episode.occurred_at),
            "outcome": episode.outcome,
            # Text that tries to instruct the reader: evidence of what was seen, not advice.
            "instruction_like": episode.instruction_like,
        },
    )


def _named_entities(ask: Ask) -> tuple[str, ...]:
    return tuple(sorted({m.alias.lower() for m in ask.named}))


def route_what_happened(ask: Ask) -> Answer:
    from episodes.retrieval import SearchFilters, episode_search

    f = ask.filters
    result = episode_search(
        agent=ask.agent,
        query=ask.query,
        # The question's own vector, which episode search uses when it names none of
        # the agent's actors; computed once for every route that needs it.
        whole_query_embedding=ask.vector.get,
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
    return _search_answer(result, lambda hit: _episode_evidence(hit, ask.now))


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
            "age_seconds": age_seconds(now, source.created_at),
            "authority": event.authority,
            "currentness": NOT_APPLICABLE,  # a document says what it says
            "confidence": float(event.confidence),
            "instruction_like": chunk.instruction_like,
        },
    )


def route_source(ask: Ask) -> Answer:
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
    return _search_answer(
        result,
        lambda hit: _chunk_evidence(hit, sources[hit.obj.source_id], ask.now),
        source_id=str(source_id) if source_id else None,
        source_named=named.title if named is not None else None,
    )
