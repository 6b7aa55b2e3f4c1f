"""Facts (bitemporal, with provenance), entities, predicates and graph paths."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._base import ApiModel


class EntityRef(ApiModel):
    id: str
    name: str


class EntitySummary(ApiModel):
    id: str
    name: str
    entity_type: str


class Entity(ApiModel):
    id: str
    name: str
    entity_type: str
    aliases: list[str]
    created_at: datetime
    source_event_id: str


class EntityMatch(ApiModel):
    entity: EntitySummary | None = None
    alias: str
    similarity: float


class EntitySearch(ApiModel):
    results: list[EntityMatch]


class Provenance(ApiModel):
    event_id: str
    source_type: str
    source_ref: str
    actor: str
    session_id: str


class MemoryStatus(ApiModel):
    source: Provenance | None = None
    authority: str
    confidence: float
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    superseded_at: datetime | None
    last_confirmed_at: datetime
    age_seconds: int
    needs_recheck: bool
    status: str
    origin: str
    supersedes: str | None
    superseded_by: str | None
    contests: str | None
    contested_by: list[str]
    instruction_like: bool


class Fact(ApiModel):
    id: str
    subject: EntityRef | None = None
    predicate: str
    value: Any
    object_entity: EntityRef | None = None
    memory_status: MemoryStatus | None = None


class FactWrite(ApiModel):
    outcome: str
    fact: Fact | None = None
    superseded: list[str]
    resolved_contests: list[str]


class FactReceipt(ApiModel):
    outcome: str
    fact_id: str
    recorded_at: datetime
    superseded: list[str]
    resolved_contests: list[str]


class FactBatch(ApiModel):
    count: int
    results: list[FactReceipt]


class FactList(ApiModel):
    subject: EntityRef | None = None
    predicate: str | None
    facts: list[Fact]

    @property
    def values(self) -> list[Any]:
        """The facts' values, in the order the API gave them."""
        return [fact.value for fact in self.facts]


class FactAsOf(FactList):
    valid_time: datetime


class FactAsKnownAt(FactAsOf):
    record_time: datetime


class AuthorityOrder(ApiModel):
    order: list[str]
    admit_from: str | None = None


class Predicate(ApiModel):
    id: str
    name: str
    cardinality: str
    value_type: str
    volatility_seconds: int | None
    description: str
    aliases: list[str] = []
    examples: list[str] = []
    created_at: datetime
    source_event_id: str


class GraphPath(ApiModel):
    hops: int
    entities: list[EntitySummary]
    facts: list[Fact]


class GraphPaths(ApiModel):
    valid_time: datetime
    paths: list[GraphPath]
