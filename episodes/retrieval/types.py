"""What a search takes and returns, shared by every part of the package."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from ..models import Episode, SourceChunk

MAX_QUERY_CHARS = 2_000
MAX_LIMIT = 100
# Names the evidence formula (fusion._evidence): calibrations are looked up by
# it, so change it with the formula.
EVIDENCE_METRIC = "cosine"


@dataclass(frozen=True)
class SearchFilters:
    actor: str | None = None
    environment: str | None = None
    session_id: str | None = None
    goal_id: str | None = None
    task_id: str | None = None
    outcome: str | None = None
    occurred_after: datetime | None = None  # inclusive
    occurred_before: datetime | None = None  # exclusive
    entities: tuple[str, ...] = ()  # boosts episodes sharing them (not a hard filter)


@dataclass(frozen=True)
class Hit:
    kind: str  # "episode" | "chunk"
    obj: Episode | SourceChunk
    score: float  # fused score (reciprocal rank fusion)
    signals: dict[str, float | int | None]


@dataclass(frozen=True)
class SearchResult:
    hits: list[Hit]  # best first, at most `limit`; [] when abstained
    abstained: bool
    near_misses: list[Hit]
    threshold: float
    evidence_score: float | None
    embedding_model: str
    # Where the threshold came from: an AbstentionCalibration id, or "default".
    threshold_source: str = "default"
    metric: str = EVIDENCE_METRIC
    # How the vector list was found: "exact", "hnsw", "hnsw+exact" (the index
    # returned too few rows), "actor_graph" (the actor's own graph,
    # episodes.actor_graphs; "actor_graph+exact" as "hnsw+exact"), or "none"
    # (no embedding to compare with).
    vector_strategy: str = "none"
    lexemes: tuple[str, ...] = ()

    def by_session(self) -> list[dict]:
        """The hits grouped for multi-session synthesis.

        Episodes by session_id, chunks by source; each group's hits in time
        (document) order; groups in order of their first hit. Each group:
        {"session_id", "source_id", "first_at", "last_at", "best_score", "hits"}.
        """
        groups: dict[tuple[str, str], list[Hit]] = {}
        for hit in self.hits:
            groups.setdefault(_group_key(hit), []).append(hit)
        out = []
        for (kind, key), hits in groups.items():
            hits = sorted(hits, key=_time_key)
            if kind == "episode":
                first, last = hits[0].obj.occurred_at, hits[-1].obj.occurred_at
            else:
                first = last = None
            out.append(
                {
                    "session_id": key if kind == "episode" else None,
                    "source_id": uuid.UUID(key) if kind == "chunk" else None,
                    "first_at": first,
                    "last_at": last,
                    "best_score": max(h.score for h in hits),
                    "hits": hits,
                }
            )
        out.sort(key=lambda g: (g["first_at"] is None, g["first_at"] or 0, -g["best_score"]))
        return out


def _group_key(hit: Hit) -> tuple[str, str]:
    if hit.kind == "episode":
        return ("episode", hit.obj.session_id)
    return ("chunk", str(hit.obj.source_id))


def _time_key(hit: Hit):
    if hit.kind == "episode":
        return (hit.obj.occurred_at, str(hit.obj.pk))
    return (hit.obj.ordinal, 0)
