"""Factories and helpers for episodes tests (and for any app's tests that need episodes).

Every row is made through episodes.services (which append ledger events),
never by Model.objects.create: an episode nobody can replay is not memory.

    EpisodeFactory(agent=agent, summary="the batch job ran out of memory",
                   occurred_at=at(2026, 3, 1), actor="ci", session_id="s-1")
    episodes_batch(agent, [{"summary": ...}, {"summary": ...}])   # one episodes_record call
    SourceFactory(agent=agent, content="...")                       # a Source with its chunks
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import factory

from episodes.models import Episode, SourceChunk
from episodes.services import EpisodeDraft, episodes_record
from ledger.models import Event, Source
from ledger.tests.helpers import ledger_state
from piper.tenancy.tests.factories import AgentFactory

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday, 09:00 UTC


def at(year: int, month: int = 1, day: int = 1, hour: int = 0, minute: int = 0) -> datetime:
    """An instant in UTC."""
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


DRAFT_FIELDS = frozenset(EpisodeDraft.__dataclass_fields__)


class EpisodeFactory(factory.Factory):
    """`EpisodeFactory(agent=…, summary=…, **EpisodeDraft fields)` records through episodes_record.

    Without `occurred_at`, episodes are a minute apart from T0 in creation order.
    """

    class Meta:
        model = Episode

    agent = factory.SubFactory(AgentFactory)
    occurred_at = factory.Sequence(lambda n: T0 + timedelta(minutes=n))
    summary = factory.Sequence(lambda n: f"Episode {n} happened")

    @classmethod
    def _create(cls, model_class, *, agent, **fields: Any) -> Episode:
        unknown = set(fields) - DRAFT_FIELDS
        if unknown:
            raise TypeError(f"EpisodeDraft has no field(s) {sorted(unknown)}")
        return episodes_record(agent=agent, drafts=[EpisodeDraft(**fields)])[0]

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("episodes only exist once recorded: use EpisodeFactory()")


def draft(**fields: Any) -> EpisodeDraft:
    """An EpisodeDraft with a default time and summary."""
    fields.setdefault("occurred_at", T0)
    if not any(fields.get(name) for name in ("summary", "action", "observation")):
        fields.setdefault("summary", "something happened")
    return EpisodeDraft(**fields)


def episodes_batch(agent, items: list[dict[str, Any]]) -> list[Episode]:
    """Record several episodes in one episodes_record call (one transaction)."""
    return episodes_record(agent=agent, drafts=[draft(**item) for item in items])


class SourceFactory(factory.Factory):
    """`SourceFactory(agent=…, title=…, content=…)`: a source registered and chunked
    through episodes.services.source_ingest."""

    class Meta:
        model = Source

    agent = factory.SubFactory(AgentFactory)
    title = factory.Sequence(lambda n: f"Document {n}")
    content = factory.Sequence(lambda n: f"The content of document {n}.")

    @classmethod
    def _create(cls, model_class, **fields: Any) -> Source:
        from episodes.services import source_ingest

        return source_ingest(**fields)[0]

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("sources only exist once ingested: use SourceFactory()")


def memory_state() -> dict:
    """Everything an episodes write could touch. Bad-input tests assert it did not change."""
    return {
        **ledger_state(),
        "episodes": list(Episode.objects.order_by("id").values_list("id", flat=True)),
        "chunks": list(SourceChunk.objects.order_by("id").values_list("id", flat=True)),
    }


def events_of(agent, event_type: str) -> list[Event]:
    return list(Event.objects.filter(agent=agent, event_type=event_type).order_by("seq"))


class HashEmbedder:
    """A stand-in for the model where only the plumbing is under test: a deterministic
    unit vector per text (from its SHA-256), nothing semantic. `calls` records each
    embed() call's texts. Tests of what vectors mean use the real embedder."""

    dimension = 384

    def __init__(self, name: str = "test/hash-embedder") -> None:
        self.name = name
        self.calls: list[list[str]] = []

    def embed(self, texts) -> list[list[float]]:
        texts = list(texts)
        self.calls.append(texts)
        return [self.vector(t) for t in texts]

    def embed_one(self, text: str) -> list[float]:
        return self.embed([text])[0]

    def vector(self, text: str) -> list[float]:
        import hashlib
        import math

        raw = b"".join(
            hashlib.sha256(f"{self.name}|{i}|{text}".encode()).digest() for i in range(12)
        )
        values = [b - 127.5 for b in raw[: self.dimension]]
        norm = math.sqrt(sum(v * v for v in values))
        # float32, as pgvector stores it, so a read-back compares equal.
        return [float(_f32(v / norm)) for v in values]


def _f32(value: float) -> float:
    import struct

    return struct.unpack("f", struct.pack("f", value))[0]
