"""Vectors: derived data (a function of the row's text and the model, like the
full-text vector), so storing one appends no ledger event. A Celery task fills
them in batches after commit; until then a row is found by full text."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

from piper.embedded_text import embeddings_store

from ..models import Episode, EpisodeStatus, SourceChunk


def episode_embeddings_store(
    *,
    vectors: Mapping[uuid.UUID, Sequence[float]],
    model: str,
    replace_stale: bool = False,
) -> int:
    """Store episodes' vectors where none is stored yet; returns the rows written.

    A row that already has a vector keeps it (so a re-delivered task writes
    nothing), unless `replace_stale` and it was made by another model. A
    retracted or corrected version gets none.
    ValueError for a vector of the wrong length or with a non-finite number.
    """
    return embeddings_store(
        Episode,
        vectors=vectors,
        model=model,
        replace_stale=replace_stale,
        # A version withdrawn while its vector was computed gets none.
        only_where=f"t.status = '{EpisodeStatus.ACTIVE}'",
    )


def chunk_embeddings_store(
    *,
    vectors: Mapping[uuid.UUID, Sequence[float]],
    model: str,
    replace_stale: bool = False,
) -> int:
    """As episode_embeddings_store, for source chunks."""
    return embeddings_store(SourceChunk, vectors=vectors, model=model, replace_stale=replace_stale)


def _needing_vectors(queryset, *, model: str, reembed_stale: bool):
    from django.db.models import Q

    wanted = Q(embedding__isnull=True)
    if reembed_stale:
        wanted |= ~Q(embedding_model=model)
    return queryset.filter(wanted)


def episodes_embed(
    *, episode_ids: Iterable[uuid.UUID], embedder=None, reembed_stale: bool = False
) -> int:
    """Compute and store the vectors of those of these episodes that need one.

    Runs in the caller's process (a task, the backfill command, a battery);
    the model runs outside any transaction. Returns the rows written; 0 when
    all already had one. Ids of deleted rows are ignored.
    """
    from piper.embeddings import get_embedder

    embedder = embedder or get_embedder()
    rows = list(
        _needing_vectors(
            Episode.objects.filter(id__in=list(episode_ids), status=EpisodeStatus.ACTIVE),
            model=embedder.name,
            reembed_stale=reembed_stale,
        )
        .order_by("id")
        .only("id", "summary", "action", "observation", "actor", "environment")
    )
    if not rows:
        return 0
    vectors = embedder.embed([row.embedding_text() for row in rows])
    return episode_embeddings_store(
        vectors={row.pk: v for row, v in zip(rows, vectors, strict=True)},
        model=embedder.name,
        replace_stale=reembed_stale,
    )


def chunks_embed(
    *, chunk_ids: Iterable[uuid.UUID], embedder=None, reembed_stale: bool = False
) -> int:
    """As episodes_embed, for source chunks (their text prefixed by the source's title)."""
    from piper.embeddings import get_embedder

    embedder = embedder or get_embedder()
    rows = list(
        _needing_vectors(
            SourceChunk.objects.filter(id__in=list(chunk_ids)),
            model=embedder.name,
            reembed_stale=reembed_stale,
        )
        .select_related("source")
        .order_by("id")
        .only("id", "text", "source__title")
    )
    if not rows:
        return 0
    vectors = embedder.embed([row.embedding_text() for row in rows])
    return chunk_embeddings_store(
        vectors={row.pk: v for row, v in zip(rows, vectors, strict=True)},
        model=embedder.name,
        replace_stale=reembed_stale,
    )
