"""The ledger: append-only evidence (events) and sources (documents as evidence)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import models as m
from ._base import Resource, body, get, operation, paginated, post


class Events(Resource):
    @operation
    def append(self, event_type: str, payload: dict | None = None, **fields: Any) -> m.Event:
        """Record what was observed or done (occurred_at, session_id, actor,
        source_type, source_ref, authority, confidence, privacy_class, …)."""
        return post("/events", m.Event, body(event_type=event_type, payload=payload, **fields))

    @operation
    def append_many(self, events: list[dict]) -> m.EventBatch:
        """Up to 1,000 events, all or nothing."""
        return post("/events", m.EventBatch, {"events": events})

    @operation
    def get(self, event_id: str) -> m.Event:
        return get(f"/events/{event_id}", m.Event)

    @paginated
    def list(self, *, limit: int | None = None, **filters: Any) -> Iterator[m.Event]:
        """Oldest first (ordering="-seq": newest first). Filters: event_type (one or a
        list), session_id, actor, occurred_after/before, recorded_after/before."""
        return get("/events", m.Event, limit=limit, **filters)


class Sources(Resource):
    @operation
    def register(self, title: str, **fields: Any) -> m.Source:
        """Register a document as evidence (uri, content, content_hash, media_type);
        the same content registered again answers the first source."""
        return post("/sources", m.Source, body(title=title, **fields))

    @operation
    def ingest(self, title: str, content: str, **fields: Any) -> m.SourceIngest:
        """Register a document and cut it into searchable chunks (uri, media_type, actor, …)."""
        return post("/sources/ingest", m.SourceIngest, body(title=title, content=content, **fields))

    @operation
    def get(self, source_id: str) -> m.Source:
        return get(f"/sources/{source_id}", m.Source)

    @paginated
    def list(self, *, limit: int | None = None) -> Iterator[m.Source]:
        """Newest first."""
        return get("/sources", m.Source, limit=limit)

    @paginated
    def chunks(self, source_id: str, *, limit: int | None = None) -> Iterator[m.Chunk]:
        return get(f"/sources/{source_id}/chunks", m.Chunk, limit=limit)

    @operation
    def search(self, query: str, *, limit: int | None = None, **filters: Any) -> m.ChunkSearch:
        """Chunks that answer `query` (source_id, abstain); `abstained` when none is close enough."""
        return get("/sources/search", m.ChunkSearch, q=query, limit=limit, **filters)
