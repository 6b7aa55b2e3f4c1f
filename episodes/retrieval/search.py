"""The entry points: `episode_search` and `chunk_search`.

Each validates its inputs, embeds the query if the caller did not, fetches
the candidates (fetch), fuses them (fusion), decides whether to abstain, and
loads the hits (hits).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from django.utils import timezone

from piper import generations
from piper.errors import InvalidInput
from piper.tenancy.models import Agent

from ..models import Outcome
from .fetch import _fetch
from .fusion import (
    CHUNK_SIGNALS,
    EPISODE_SIGNALS,
    NEAR_MISSES,
    _Candidate,
    _episode_scales,
    _evidence,
    _fuse,
    _uses_session_context,
    _with_session_context,
)
from .hits import _canonical_hits, _episodes_by_id, _full_rows
from .plan import _chunk_spec, _episode_spec, _Spec
from .query_analysis import analyse_query, query_vector
from .types import MAX_LIMIT, MAX_QUERY_CHARS, Hit, SearchFilters, SearchResult

if TYPE_CHECKING:
    from piper.embeddings import Embedder

# Each list offers this many candidates per requested hit (at least MIN_CANDIDATES).
CANDIDATES_PER_HIT = 3
MIN_CANDIDATES = 30
MAX_CANDIDATES = 300


def _checked(
    *,
    query: str,
    limit: int,
    query_embedding: Sequence[float] | None,
    filters: SearchFilters | None = None,
) -> tuple[str, Embedder]:
    """The query, stripped, and the process embedder, once every input is valid.
    InvalidInput names the first that is not, in this order: the query, the
    limit, the filters, the embedding's length."""
    from piper.embeddings import get_embedder

    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("q: the query must not be empty", details={"q": ["required"]})
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"q: at most {MAX_QUERY_CHARS:,} characters; shorten the query",
            details={"q": [f"{len(query):,} characters sent"]},
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(
            f"limit: must be an integer from 1 to {MAX_LIMIT}", details={"limit": [str(limit)]}
        )
    if filters is not None:
        _check_filters(filters)
    embedder = get_embedder()
    if query_embedding is not None and len(query_embedding) != embedder.dimension:
        raise InvalidInput(
            f"query_embedding: must have {embedder.dimension} numbers",
            details={"query_embedding": [f"{len(query_embedding)} given"]},
        )
    return query.strip(), embedder


def _check_filters(filters: SearchFilters) -> None:
    from ..selectors import time_window_check

    for name in ("occurred_after", "occurred_before"):
        moment = getattr(filters, name)
        if moment is not None and timezone.is_naive(moment):
            raise InvalidInput(
                f"{name}: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
                details={name: ["naive date-time"]},
            )
    time_window_check(filters.occurred_after, filters.occurred_before)
    if filters.outcome is not None and filters.outcome not in Outcome.values:
        raise InvalidInput(
            f"outcome: must be one of {Outcome.values}", details={"outcome": [filters.outcome]}
        )


def _search(
    *,
    spec: _Spec,
    agent: Agent,
    query: str,
    vector: Sequence[float],
    embedder: Embedder,
    entities: Sequence[str],
    limit: int,
    now: datetime | None,
    abstain: bool,
    signals: dict[str, Callable[..., list[_Candidate]]],
    actors: Sequence[str] = (),
) -> SearchResult:
    k = min(max(limit * CANDIDATES_PER_HIT, MIN_CANDIDATES), MAX_CANDIDATES)
    context = spec.kind == "episode" and _uses_session_context()
    fetched = _fetch(spec, agent, query, vector, entities, k, embedder.name, context)
    cands = fetched.cands
    if context:
        cands = _with_session_context(spec, cands, vector, fetched.context)

    now = now or timezone.now()
    lists = {}
    for name, signal in signals.items():
        if (name == "entities" and not entities) or (name == "actors" and not actors):
            continue
        lists[name] = signal(cands, now=now, actors=actors)
    _fuse(lists)
    if spec.kind == "episode":
        _episode_scales(cands, now)
    for c in cands:
        c.evidence = _evidence(c)
        c.signals["coverage"] = None if c.coverage is None else round(c.coverage, 6)
        c.signals["evidence"] = None if c.evidence is None else round(c.evidence, 6)
        c.signals["embedded"] = int(c.embedded)
    cands.sort(key=lambda c: (-round(c.score, 12), *c.obj.tiebreak))

    evidence = max((c.evidence for c in cands if c.evidence is not None), default=None)
    abstained = abstain and (evidence is None or evidence < fetched.threshold)
    shown = min(limit, NEAR_MISSES) if abstained else limit
    if spec.kind == "episode":
        hits = _canonical_hits(spec, cands, shown)
    else:
        hits = [
            Hit(spec.kind, obj, round(c.score, 6), c.signals)
            for c, obj in _full_rows(spec, cands[:shown])
        ]
    return SearchResult(
        hits=[] if abstained else hits,
        abstained=abstained,
        near_misses=hits if abstained else [],
        threshold=fetched.threshold,
        evidence_score=None if evidence is None else round(evidence, 6),
        embedding_model=embedder.name,
        threshold_source=fetched.threshold_source,
        vector_strategy=fetched.strategy,
        lexemes=fetched.lexemes,
    )


def episode_search(
    *,
    agent: Agent,
    query: str,
    query_embedding: list[float] | None = None,
    whole_query_embedding: Callable[[], list[float]] | None = None,
    filters: SearchFilters | None = None,
    limit: int = 10,
    now: datetime | None = None,
    abstain: bool = True,
) -> SearchResult:
    """This agent's episodes that best answer `query`, best first (see episodes.retrieval).

    Filters are hard conditions on every candidate list; `filters.entities`
    only boosts. The query vector is `query_embedding` (from the process
    embedder's model) when given; else query_analysis.query_vector's: the
    query embedded without the names of the agent's actors, or
    `whole_query_embedding()` (the whole query's vector, which a caller such
    as recall may already have) when it names none. `now` anchors recency
    (default: the current time). With `abstain`, a result whose best evidence
    is below the threshold has no hits and up to NEAR_MISSES near misses.
    Raises InvalidInput for an empty query or one over MAX_QUERY_CHARS, a limit
    outside 1..MAX_LIMIT, an unknown outcome, a naive time, a window that
    ends before it starts, or a query_embedding of another length than the model's.
    """
    from ..services import normalise_entities

    filters = filters or SearchFilters()
    query, embedder = _checked(
        query=query, limit=limit, query_embedding=query_embedding, filters=filters
    )
    generations.current(agent.pk)  # after an erasure, the cached counts and names go
    analysis = analyse_query(agent_id=agent.pk, query=query)
    if query_embedding is None:
        query_embedding = query_vector(
            agent_id=agent.pk,
            query=query,
            embedder=embedder,
            whole=whole_query_embedding,
            analysis=analysis,
        )
    return _search(
        spec=_episode_spec(agent, filters),
        agent=agent,
        query=query,
        vector=query_embedding,
        embedder=embedder,
        entities=normalise_entities(filters.entities),
        limit=limit,
        now=now,
        abstain=abstain,
        signals=EPISODE_SIGNALS,
        actors=analysis.actors_named,
    )


def chunk_search(
    *,
    agent: Agent,
    query: str,
    query_embedding: list[float] | None = None,
    source_id: uuid.UUID | None = None,
    limit: int = 10,
    abstain: bool = True,
) -> SearchResult:
    """This agent's source chunks (of one source, with `source_id`) that best
    answer `query`: full text and vector fused as in episode_search, without
    recency or entities; the whole query is embedded unless `query_embedding`
    is given. Same errors and abstention."""
    query, embedder = _checked(query=query, limit=limit, query_embedding=query_embedding)
    generations.current(agent.pk)  # after an erasure, the cached counts go (as above)
    return _search(
        spec=_chunk_spec(agent, source_id),
        agent=agent,
        query=query,
        vector=query_embedding if query_embedding is not None else embedder.embed_one(query),
        embedder=embedder,
        entities=(),
        limit=limit,
        now=None,
        abstain=abstain,
        signals=CHUNK_SIGNALS,
    )


def answered_groups(*, agent: Agent, canonical_ids: set[uuid.UUID]) -> set[uuid.UUID]:
    """Of these canonical episodes, those whose group a search answers with one
    version (the canonical, or its last correction): their collapsed duplicates
    are not shown on their own. A group whose answer was retracted is not among
    them; its duplicates speak for themselves."""
    if not canonical_ids:
        return set()
    return set(_episodes_by_id(_episode_spec(agent, SearchFilters()), set(canonical_ids)))
