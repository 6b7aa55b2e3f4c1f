"""What every route returns and shares: evidence, answers, the question as asked."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from piper.tenancy.models import Agent

from .. import router
from ..models import RetrievalTrace
from .inputs import RecallFilters

CURRENT, SUPERSEDED, CONTESTED, NOT_APPLICABLE = "current", "superseded", "contested", "n/a"


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


class QueryVector:
    """The query's embedding, computed at most once and only if a route needs it."""

    def __init__(self, query: str):
        self.query = query
        self._vector: list[float] | None = None
        self.embedder = None
        # Searches in worker threads (a context call) may ask at once: one embeds.
        self._lock = threading.Lock()

    def get(self) -> list[float]:
        if self._vector is None:
            with self._lock:
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
    vector: QueryVector
    limit: int
    filters: RecallFilters
    context: dict
    scopes: Sequence[str] | None
    now: datetime

    @cached_property
    def named(self) -> list:
        """The agent's entities the question names (facts.search.entities_named_in),
        looked up once for every route and search that asks."""
        from facts.search import entities_named_in

        return entities_named_in(agent=self.agent, text=self.query)


def age_seconds(now: datetime, then: datetime | None) -> int | None:
    return None if then is None else max(0, int((now - then).total_seconds()))
