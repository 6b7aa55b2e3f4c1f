"""Fusion: the candidates' lists, their fused score, and the evidence abstention weighs.

Each list ranks the candidates by one signal (`_text_list`, `_vector_list`,
`_recency_list`, `_entity_list`, `_actor_list`) and reciprocal rank fusion adds
SIGNAL_WEIGHTS[list] × contribution / (RRF_K + position): positions, not raw
scores, so signals on different scales combine without calibration. A new
signal is a new function and a weight. A list in FLAT_SIGNALS is a match, not
a ranking: each of its candidates counts as first.

Evidence comes in sessions: an episode's neighbours lend it CONTEXT_WEIGHTS
of their text rank, coverage and similarity (episodes.retrieval.session_context),
and after fusion it gains SESSION_WEIGHT × the best score in its session. The
score is then scaled a little by effective salience (episodes.salience) and
by authority (piper.provenance): among equal matches the used and the
trusted come first, and a precise match still wins.

Abstention compares a candidate's own evidence (its cosine similarity; a row
without an embedding yet, a share of its IDF-weighted coverage) with the
newest calibrated threshold for the embedder, else DEFAULT_ABSTENTION_THRESHOLD.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import connection

from piper.provenance import AUTHORITY_ORDER, authority_rank

from ..salience import effective_salience
from .session_context import session_neighbours, spread, symmetric

if TYPE_CHECKING:
    from .plan import _Spec

# Reciprocal rank fusion: score = Σ SIGNAL_WEIGHTS[s] × contribution / (RRF_K + position
# in s), from 1. 20 rather than the usual 60: top positions count for more (on
# LoCoMo and the calibration set alike).
RRF_K = 20
SIGNAL_WEIGHTS: dict[str, float] = {
    "text": 1.5,
    "vector": 1.0,
    "entities": 0.5,
    "actors": 0.25,
    "recency": 0.05,
}
# "actors": the episodes whose actor the question names, all as first (FLAT_SIGNALS):
# the name is taken out of the query vector, so this is where it counts. Weighed
# low: a question may name the wrong person (LoCoMo's adversarial questions;
# docs/benchmarks.md has the weights tried).
# Lists whose candidates all count as first: an episode's actor either is one
# the question names or it is not; no order among them is the list's to give.
FLAT_SIGNALS = frozenset({"actors"})
# A text match contributes coverage ** TEXT_COVERAGE_POWER of the text weight.
TEXT_COVERAGE_POWER = 2
RECENCY_HALF_LIFE_DAYS = 30.0

# Session context: the share of its best session neighbour's value a candidate
# gains, per value (0 turns it off). Chosen on LoCoMo (docs/experiments.md).
CONTEXT_WEIGHTS: dict[str, float] = {"text_rank": 0.7, "similarity": 0.5, "coverage": 0.7}
# After fusion, an episode gains this × the best fused score in its session
# (itself included): evidence comes in sessions. 0 turns it off.
SESSION_WEIGHT = 0.5
# Then its score is scaled by 1 + SALIENCE_WEIGHT × (effective salience − 0.5):
# within ±10%, enough to order equal matches by salience and use, not to put a
# vaguer match above a precise one. 0 turns it off.
SALIENCE_WEIGHT = 0.2
# Then by 1 + AUTHORITY_WEIGHT × (trust − 0.5), trust 0 (third party) … 1 (operator)
# from the episode's authority: within ±5%, so among near-equal matches the more
# trusted source comes first, and a precise match from a third party still wins.
AUTHORITY_WEIGHT = 0.1

# Abstention. A candidate's evidence is its cosine similarity to the query
# + COVERAGE_WEIGHT × its IDF-weighted share of the query's lexemes (0: any
# weight above it lowered balanced accuracy on the calibration set,
# docs/experiments.md). types.EVIDENCE_METRIC names this formula.
COVERAGE_WEIGHT = 0.0
# A row without an embedding yet: evidence = this × its IDF-weighted coverage.
UNEMBEDDED_COVERAGE_EVIDENCE = 0.8
# Used until `calibrate_abstention` has recorded a threshold for the embedder in
# use: what it chooses on episodes/calibration_set.json for the default
# embedder (docs/episodes.md, abstention).
DEFAULT_ABSTENTION_THRESHOLD = 0.44
NEAR_MISSES = 5


class _Key:
    """What fusion reads of a candidate (spec.key_columns: id, session_id,
    occurred_at; a chunk's id, source_id, ordinal), without a model instance:
    a search weighs ~100 candidates and returns ~10, and a Django instance
    for each would cost more than the fusion. `tiebreak` is
    computed once here instead of on every sort: equal matches put the newer
    episode first (a chunk: document order)."""

    __slots__ = (
        "pk",
        "session_id",
        "occurred_at",
        "source_id",
        "ordinal",
        "salience",
        "use_count",
        "last_used_at",
        "authority",
        "actor",
        "tiebreak",
    )

    def __init__(self, columns: Sequence[str], row: Sequence) -> None:
        self.session_id = self.occurred_at = self.source_id = self.ordinal = None
        self.salience = self.use_count = self.last_used_at = self.authority = None
        self.actor = None
        for column, value in zip(columns, row, strict=True):
            setattr(self, "pk" if column == "id" else column, value)
        if self.occurred_at is not None:
            self.tiebreak = (-self.occurred_at.timestamp(), str(self.pk))
        else:
            self.tiebreak = (str(self.source_id), self.ordinal)


@dataclass
class _Candidate:
    obj: _Key  # the key columns only; the returned hits are loaded whole (hits._full_rows)
    text_rank: float | None
    similarity: float | None
    shared: int | None
    coverage: float | None
    embedded: bool
    signals: dict[str, float | int | None] = field(default_factory=dict)
    score: float = 0.0
    evidence: float | None = None
    # text_rank / similarity / coverage with the session context (what the lists rank by)
    context: dict[str, float | None] = field(default_factory=dict)

    def ranked(self, name: str) -> float | None:
        return self.context[name] if name in self.context else getattr(self, name)


# Each returns the candidates it ranks, best first, and records its signal;
# `_fuse` turns positions into the fused score.


def _text_list(cands: list[_Candidate], **_) -> list[_Candidate]:
    for c in cands:
        c.signals["text_rank"] = None if c.text_rank is None else round(c.text_rank, 6)
    ranked = [c for c in cands if c.ranked("text_rank") is not None]
    return sorted(ranked, key=lambda c: (-round(c.ranked("text_rank"), 9), *c.obj.tiebreak))


def _vector_list(cands: list[_Candidate], **_) -> list[_Candidate]:
    for c in cands:
        c.signals["vector_similarity"] = None if c.similarity is None else round(c.similarity, 6)
    ranked = [c for c in cands if c.ranked("similarity") is not None]
    return sorted(ranked, key=lambda c: (-round(c.ranked("similarity"), 9), *c.obj.tiebreak))


def _recency_list(cands: list[_Candidate], *, now: datetime, **_) -> list[_Candidate]:
    half_life = RECENCY_HALF_LIFE_DAYS * 86_400.0
    for c in cands:
        age = max((now - c.obj.occurred_at).total_seconds(), 0.0)
        c.signals["recency"] = round(math.exp(-math.log(2) * age / half_life), 6)
    return sorted(cands, key=lambda c: (-c.signals["recency"], *c.obj.tiebreak))


def _entity_list(cands: list[_Candidate], **_) -> list[_Candidate]:
    for c in cands:
        c.signals["shared_entities"] = c.shared or 0
    ranked = [c for c in cands if c.shared]
    return sorted(ranked, key=lambda c: (-c.shared, *c.obj.tiebreak))


def _actor_list(cands: list[_Candidate], *, actors: Sequence[str] = (), **_) -> list[_Candidate]:
    """The episodes whose actor the question names (query_analysis.actors_named).
    The names are left out of the query vector, so without this list only the
    full text would tell "the rollout Ana led" from the same rollout led by
    someone else, and a vector match on the rest of the question outweighs it."""
    named = set(actors)
    for c in cands:
        c.signals["named_actor"] = int(c.obj.actor in named)
    return [c for c in cands if c.obj.actor in named]


# The lists each kind of search fuses; an entity list only when entities are
# given, an actor list only when the question names one of the agent's actors.
EPISODE_SIGNALS = {
    "text": _text_list,
    "vector": _vector_list,
    "recency": _recency_list,
    "entities": _entity_list,
    "actors": _actor_list,
}
CHUNK_SIGNALS = {"text": _text_list, "vector": _vector_list}


def _contribution(name: str, c: _Candidate) -> float:
    """How much of its list's weight a candidate's position carries: a text
    match counts by the square of the share of the query it covers, so a row
    sharing one common word with a question does not outrank the semantic
    match."""
    if name == "text":
        return min(c.ranked("coverage") or 0.0, 1.0) ** TEXT_COVERAGE_POWER
    return 1.0


def _fuse(lists: dict[str, list[_Candidate]]) -> None:
    for name, ranked in lists.items():
        weight = SIGNAL_WEIGHTS[name]
        flat = name in FLAT_SIGNALS
        for position, c in enumerate(ranked, start=1):
            position = 1 if flat else position
            c.signals[f"{name}_position"] = position
            c.score += weight * _contribution(name, c) / (RRF_K + position)


def _session_boost(cands: list[_Candidate]) -> None:
    """Each episode with a session gains SESSION_WEIGHT × the best fused score
    among its session's candidates (`session_best` in its signals)."""
    best: dict[str, float] = {}
    for c in cands:
        if c.obj.session_id:
            best[c.obj.session_id] = max(best.get(c.obj.session_id, 0.0), c.score)
    for c in cands:
        if c.obj.session_id:
            c.signals["session_best"] = round(best[c.obj.session_id], 6)
            c.score += SESSION_WEIGHT * best[c.obj.session_id]


def _salience_scale(cands: list[_Candidate], now: datetime) -> None:
    """Scale each fused score by the episode's effective salience (`salience` in
    its signals; see SALIENCE_WEIGHT)."""
    for c in cands:
        value = effective_salience(
            salience=c.obj.salience,
            occurred_at=c.obj.occurred_at,
            last_used_at=c.obj.last_used_at,
            use_count=c.obj.use_count,
            now=now,
        )
        c.signals["salience"] = round(value, 6)
        c.score *= 1.0 + SALIENCE_WEIGHT * (value - 0.5)


def _trust(authority: str | None) -> float:
    """0 for the least trusted level of the default order, 1 for the most."""
    levels = len(AUTHORITY_ORDER)
    rank = authority_rank(authority or "", AUTHORITY_ORDER)
    return 0.0 if rank == 0 else (rank - 1) / (levels - 1)


def _authority_scale(cands: list[_Candidate]) -> None:
    """Scale each fused score by the episode's authority (`trust` in its signals;
    see AUTHORITY_WEIGHT)."""
    for c in cands:
        trust = _trust(c.obj.authority)
        c.signals["trust"] = round(trust, 6)
        c.score *= 1.0 + AUTHORITY_WEIGHT * (trust - 0.5)


def _evidence(c: _Candidate) -> float | None:
    """What abstention compares with the threshold (EVIDENCE_METRIC)."""
    if c.similarity is not None:
        return c.similarity + COVERAGE_WEIGHT * (c.coverage or 0.0)
    if c.coverage is not None:
        return UNEMBEDDED_COVERAGE_EVIDENCE * c.coverage
    return None


def _uses_session_context() -> bool:
    """Whether episodes are read with their session neighbours (a CONTEXT_WEIGHTS above 0)."""
    return any(CONTEXT_WEIGHTS.values())


def _episode_scales(cands: list[_Candidate], now: datetime) -> None:
    """After fusion, for episodes: the session boost, then salience and authority."""
    if SESSION_WEIGHT:
        _session_boost(cands)
    if SALIENCE_WEIGHT:
        _salience_scale(cands, now)
    if AUTHORITY_WEIGHT:
        _authority_scale(cands)


def _with_session_context(
    spec: _Spec,
    cands: list[_Candidate],
    vector: Sequence[float] | None,
    fetched: tuple[dict, dict] | None = None,
) -> list[_Candidate]:
    """The candidates plus their session neighbours (under the same filters:
    `fetched` when the hybrid statement brought them, else read here), each
    with its values spread from its neighbours into `context`."""
    if not cands:
        return cands
    by_id = {c.obj.pk: c for c in cands}
    if fetched is not None:
        neighbours, rows = fetched
    else:
        with connection.cursor() as cursor:
            neighbours, rows = session_neighbours(
                table=spec.table,
                where_sql=spec.live_where_sql,
                params=spec.params,
                ids=list(by_id),
                query_vector=spec.params.get("qv") if vector is not None else None,
                cursor=cursor,
                columns=spec.key_columns,
            )
    for pk, (row, distance) in rows.items():
        if pk in by_id:
            continue
        by_id[pk] = _Candidate(
            obj=_Key(spec.key_columns, row),
            text_rank=None,
            similarity=None if distance is None else 1.0 - distance,
            shared=None,
            coverage=None,
            embedded=distance is not None,
        )
    related = symmetric(neighbours)
    floors = {
        "similarity": min(
            (c.similarity for c in by_id.values() if c.similarity is not None), default=0.0
        )
    }
    for name, weight in CONTEXT_WEIGHTS.items():
        if not weight:
            continue
        values = spread(
            {pk: getattr(c, name) for pk, c in by_id.items()},
            related,
            weight=weight,
            floor=floors.get(name, 0.0),
        )
        for pk, c in by_id.items():
            c.context[name] = values.get(pk)
            if values.get(pk) != getattr(c, name):
                c.signals[f"context_{name}"] = round(values[pk], 6)
    return list(by_id.values())
