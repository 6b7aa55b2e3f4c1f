"""Documents: registering a source (ledger.services.source_register) and splitting
it into `SourceChunk`s, whose spans a `source.chunked` event records."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction

from ledger.models import Event, Source
from ledger.services import event_append, source_register
from piper import safety
from piper.errors import InvalidInput
from piper.ids import uuid7
from piper.provenance import PrivacyClass, RetentionClass, SourceType
from piper.tenancy.models import Agent

from .. import chunking
from ..models import SourceChunk
from . import queueing
from .common import (
    MAX_CONTENT_CHARS,
    MAX_LABEL_CHARS,
    MAX_MEDIA_TYPE_CHARS,
    MAX_TITLE_CHARS,
    MAX_URI_CHARS,
    SOURCE_CHUNKED,
    instruction_like,
    safety_payload,
    text_error,
)


def _source_errors(*, title: Any, content: Any, uri: Any, media_type: Any, actor: Any) -> dict:
    errors: dict[str, list[str]] = {}
    if message := text_error(title, MAX_TITLE_CHARS):
        errors["title"] = [message]
    elif not title.strip():
        errors["title"] = ["a source needs a title"]
    if message := text_error(content, MAX_CONTENT_CHARS):
        errors["content"] = [message]
    elif not content.strip():
        errors["content"] = [
            "send the document's text; to register a document by its hash alone, "
            "use POST /api/v1/sources"
        ]
    for name, value, limit in (
        ("uri", uri, MAX_URI_CHARS),
        ("media_type", media_type, MAX_MEDIA_TYPE_CHARS),
        ("actor", actor, MAX_LABEL_CHARS["actor"]),
    ):
        if message := text_error(value, limit):
            errors[name] = [message]
    return errors


def source_ingest(
    *,
    agent: Agent,
    title: str,
    content: str,
    uri: str = "",
    media_type: str = "text/plain",
    actor: str = "",
    privacy_class: str = PrivacyClass.INTERNAL,
    retention_class: str = RetentionClass.STANDARD,
) -> tuple[Source, bool]:
    """Register a document (ledger.services.source_register) and chunk it, in one transaction.

    Idempotent per content: the same content again returns the registered
    source and `created=False`, and writes nothing (a source registered
    earlier without its chunks — through POST /sources — is chunked now).
    Bad input raises InvalidInput naming the field and writes nothing. The
    chunks' embeddings are queued after commit.
    """
    errors = _source_errors(
        title=title, content=content, uri=uri, media_type=media_type, actor=actor
    )
    if errors:
        name, messages = next(iter(errors.items()))
        raise InvalidInput(f"{name}: {messages[0]}", details=errors)
    with transaction.atomic():
        source, created = source_register(
            agent=agent,
            title=title,
            uri=uri,
            content=content,
            media_type=media_type,
            actor=actor,
            privacy_class=privacy_class,
            retention_class=retention_class,
        )
        source_chunk(source=source, actor=actor)
    return source, created


def source_chunk(*, source: Source, actor: str = "") -> list[SourceChunk]:
    """Split a registered source's content into chunks, once.

    Appends one `source.chunked` event (its payload lists every chunk's id and
    span) and inserts the chunks in the same transaction; returns them in
    document order. A source already chunked, or without text, gets nothing
    and returns []. Concurrent calls for one source are serialised by a lock
    on its row, so at most one writes. Embedding is queued after commit.
    """
    with transaction.atomic():
        # Locks the source row, then (in event_append) the agent's chain head —
        # the same order everywhere a source is chunked.
        content = (
            Source.objects.select_for_update(no_key=True)
            .filter(pk=source.pk)
            .values_list("content", flat=True)
            .first()
        )
        if not content or SourceChunk.objects.filter(source_id=source.pk).exists():
            return []
        spans = chunking.split(content)
        if not spans:
            return []
        registered = Event.objects.only("privacy_class", "retention_class").get(
            pk=source.source_event_id
        )
        payload = {
            "source_id": str(source.pk),
            "chunker": chunking.CHUNKER,
            "chunks": [
                {
                    "id": str(uuid7()),
                    "start": s.start,
                    "end": s.end,
                    **safety_payload(safety.screen(content[s.start : s.end])),
                }
                for s in spans
            ],
        }
        event = event_append(
            agent=source.agent,
            event_type=SOURCE_CHUNKED,
            payload=payload,
            actor=actor,
            source_type=SourceType.DOCUMENT,
            source_ref=source.uri if len(source.uri) <= MAX_LABEL_CHARS["source_ref"] else "",
            parent_event_id=source.source_event_id,
            # A document's chunking is kept and seen as its registration is.
            privacy_class=registered.privacy_class,
            retention_class=registered.retention_class,
        )
        chunks = chunks_from_event(event, content=content)
        SourceChunk.objects.bulk_create(chunks)
        ids = [c.pk for c in chunks]
        transaction.on_commit(lambda: queueing.queue_chunk_embedding(ids), robust=True)
    return chunks


def chunks_from_event(event: Event, *, content: str) -> list[SourceChunk]:
    """The SourceChunk rows a `source.chunked` event stands for (the writer and replay)."""
    p = event.payload
    source_id = uuid.UUID(p["source_id"])
    return [
        SourceChunk(
            id=uuid.UUID(c["id"]),
            agent_id=event.agent_id,
            source_id=source_id,
            ordinal=ordinal,
            text=content[c["start"] : c["end"]],
            char_start=c["start"],
            char_end=c["end"],
            instruction_like=instruction_like(c),
            created_at=event.recorded_at,
        )
        for ordinal, c in enumerate(p["chunks"])
    ]
