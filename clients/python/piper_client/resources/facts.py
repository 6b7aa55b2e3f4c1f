"""Semantic memory: bitemporal facts, the entities they are about, predicates, graph paths."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from .. import models as m
from ._base import Resource, body, get, operation, paginated, post, put

When = datetime | str  # a datetime, or ISO 8601 text with a time zone


class Facts(Resource):
    @operation
    def assert_(
        self, subject: str, predicate: str, value: Any = None, **fields: Any
    ) -> m.FactWrite:
        """State what is true: `value`, or `object_entity=` for a relation. Also valid_from,
        valid_to, source_type, source_ref, authority, confidence, cardinality, …
        `outcome` says whether it was created, confirmed or contested."""
        claim = body(subject=subject, predicate=predicate, value=value, **fields)
        return post("/facts", m.FactWrite, claim)

    @operation
    def assert_many(self, facts: list[dict]) -> m.FactBatch:
        """Several claims, all or nothing."""
        return post("/facts", m.FactBatch, {"facts": facts})

    @operation
    def current(self, subject: str, predicate: str | None = None) -> m.FactList:
        """What is true now, authority-resolved (all predicates when none is named)."""
        return get("/facts/current", m.FactList, subject=subject, predicate=predicate)

    @operation
    def as_of(self, subject: str, predicate: str | None = None, *, valid_time: When) -> m.FactAsOf:
        """What was true at `valid_time`, as known now."""
        params = {"subject": subject, "predicate": predicate, "valid_time": valid_time}
        return get("/facts/as-of", m.FactAsOf, **params)

    @operation
    def as_known_at(
        self, subject: str, predicate: str | None = None, *, valid_time: When, record_time: When
    ) -> m.FactAsKnownAt:
        """What the memory believed at `record_time` about `valid_time` (audits, late news)."""
        params = {"subject": subject, "predicate": predicate}
        params |= {"valid_time": valid_time, "record_time": record_time}
        return get("/facts/as-known-at", m.FactAsKnownAt, **params)

    @operation
    def chain(self, subject: str, predicate: str) -> m.FactList:
        """Every version of subject.predicate, oldest first, with supersession links."""
        return get("/facts/chain", m.FactList, subject=subject, predicate=predicate)

    @operation
    def chain_of(self, fact_id: str) -> m.FactList:
        """The history one fact belongs to."""
        return get(f"/facts/{fact_id}/chain", m.FactList)

    @operation
    def get(self, fact_id: str) -> m.Fact:
        return get(f"/facts/{fact_id}", m.Fact)

    @paginated
    def contested(self, *, limit: int | None = None) -> Iterator[m.Fact]:
        """Claims waiting for a decision (see resolve)."""
        return get("/facts/contested", m.Fact, limit=limit)

    @operation
    def retract(self, fact_id: str, *, reason: str, **provenance: Any) -> m.FactWrite:
        """It was never true: no longer believed, kept in the history."""
        return post(f"/facts/{fact_id}/retract", m.FactWrite, body(reason=reason, **provenance))

    @operation
    def correct(self, fact_id: str, value: Any = None, **fields: Any) -> m.FactWrite:
        """It was recorded wrong: the right `value` (or object_entity) replaces it."""
        return post(f"/facts/{fact_id}/correct", m.FactWrite, body(value=value, **fields))

    @operation
    def end(self, fact_id: str, *, valid_to: When, **provenance: Any) -> m.FactWrite:
        """It stopped being true at `valid_to` (it was true until then)."""
        return post(f"/facts/{fact_id}/end", m.FactWrite, body(valid_to=valid_to, **provenance))

    @operation
    def resolve(self, fact_id: str, *, accept: bool, actor: str | None = None) -> m.FactWrite:
        """Decide a contested claim: accept it (it becomes current) or reject it."""
        return post(f"/facts/{fact_id}/resolve", m.FactWrite, body(accept=accept, actor=actor))

    @operation
    def authority_order(self) -> m.AuthorityOrder:
        return get("/facts/authority-order", m.AuthorityOrder)

    @operation
    def set_authority_order(
        self, order: list[str], *, admit_from: str | None = None
    ) -> m.AuthorityOrder:
        """Which sources outrank which (admin scope)."""
        new_order = body(order=order, admit_from=admit_from)
        return put("/facts/authority-order", m.AuthorityOrder, new_order)


class Entities(Resource):
    @operation
    def create(
        self, name: str, *, entity_type: str | None = None, aliases: list[str] | None = None
    ) -> m.Entity:
        entity = body(name=name, entity_type=entity_type, aliases=aliases)
        return post("/entities", m.Entity, entity)

    @operation
    def get(self, entity_id: str) -> m.Entity:
        return get(f"/entities/{entity_id}", m.Entity)

    @paginated
    def list(self, *, limit: int | None = None) -> Iterator[m.Entity]:
        return get("/entities", m.Entity, limit=limit)

    @operation
    def add_alias(self, entity_id: str, alias: str) -> m.Entity:
        return post(f"/entities/{entity_id}/aliases", m.Entity, {"alias": alias})

    @operation
    def search(self, query: str, *, limit: int | None = None) -> m.EntitySearch:
        """Entities whose name or alias is like `query` (trigram similarity)."""
        return get("/entities/search", m.EntitySearch, q=query, limit=limit)

    @operation
    def paths(self, start: str, end: str | None = None, **options: Any) -> m.GraphPaths:
        """Multi-hop relations from `start` (to `end`): min_hops, max_hops, predicates,
        valid_time, limit."""
        return get("/graph/paths", m.GraphPaths, start=start, end=end, **options)


class Predicates(Resource):
    @operation
    def define(self, name: str, **definition: Any) -> m.Predicate:
        """Create or change a predicate: cardinality ("one"/"many"), value_type,
        volatility_seconds, description, aliases (other words a question may use for
        it: recall takes a question that uses one as asking for it), examples
        (questions about "it" that ask for it: "How far along is it?"). Fields left
        out keep their value."""
        return put(f"/predicates/{name}", m.Predicate, body(**definition))

    @operation
    def get(self, name: str) -> m.Predicate:
        return get(f"/predicates/{name}", m.Predicate)

    @paginated
    def list(self, *, limit: int | None = None) -> Iterator[m.Predicate]:
        return get("/predicates", m.Predicate, limit=limit)
