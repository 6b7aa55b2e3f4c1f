"""Thin, idempotent tasks: embed episodes and chunks after commit, chunk sources, sweep.

Every task takes ids and calls a service that is a no-op for work already
done: a vector is stored only where none is (compare-and-set in one UPDATE),
a source is chunked only once (under a lock on its row). So a re-delivered
task — acks_late is on, and a worker may die mid-task — writes nothing, and
the periodic `embed_backlog` sweep catches whatever a lost task left.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from celery import shared_task
from django.db import DatabaseError

logger = logging.getLogger(__name__)

# Texts per embed task (and per embed() call): big enough for the model's
# batching, small enough that a lost task costs little.
EMBED_BATCH = 128
MAX_RETRIES = 3
# The sweep leaves rows younger than this to the tasks queued by their commit.
BACKLOG_GRACE_SECONDS = 120
# One sweep embeds for at most this long, then leaves the rest to the next run.
BACKLOG_TIME_BUDGET_SECONDS = 50
# The sweep's hard time limit, and the longest it holds its lock (a worker
# killed mid-sweep leaves the lock to expire).
BACKLOG_TIME_LIMIT_SECONDS = BACKLOG_TIME_BUDGET_SECONDS + 90


def _batches(ids: Sequence, size: int = EMBED_BATCH):
    for start in range(0, len(ids), size):
        yield [str(i) for i in ids[start : start + size]]


def queue_episode_embedding(*, agent_id: uuid.UUID | None = None, episode_ids: Sequence) -> None:
    """Enqueue embed_episodes for these ids, EMBED_BATCH per task (call after commit)."""
    for batch in _batches(episode_ids):
        embed_episodes.delay(batch)


def queue_chunk_embedding(*, chunk_ids: Sequence) -> None:
    """Enqueue embed_chunks for these ids, EMBED_BATCH per task (call after commit)."""
    for batch in _batches(chunk_ids):
        embed_chunks.delay(batch)


def _uuids(ids: Sequence[str]) -> list[uuid.UUID]:
    return [uuid.UUID(str(i)) for i in ids]


@shared_task(
    bind=True,
    name="episodes.embed_episodes",
    ignore_result=False,
    max_retries=MAX_RETRIES,
    soft_time_limit=240,
    time_limit=300,
)
def embed_episodes(self, episode_ids: list[str]) -> int:
    """Give these episodes their vectors; rows that have one are left alone. Returns rows written."""
    from .services import episodes_embed

    try:
        return episodes_embed(episode_ids=_uuids(episode_ids))
    except DatabaseError as exc:
        raise self.retry(exc=exc, countdown=2 ** (self.request.retries + 1)) from exc


@shared_task(
    bind=True,
    name="episodes.embed_chunks",
    ignore_result=False,
    max_retries=MAX_RETRIES,
    soft_time_limit=240,
    time_limit=300,
)
def embed_chunks(self, chunk_ids: list[str]) -> int:
    """Give these source chunks their vectors; as embed_episodes."""
    from .services import chunks_embed

    try:
        return chunks_embed(chunk_ids=_uuids(chunk_ids))
    except DatabaseError as exc:
        raise self.retry(exc=exc, countdown=2 ** (self.request.retries + 1)) from exc


@shared_task(
    bind=True,
    name="episodes.chunk_source",
    ignore_result=False,
    max_retries=MAX_RETRIES,
    soft_time_limit=240,
    time_limit=300,
)
def chunk_source(self, source_id: str) -> int:
    """Split a registered source into chunks unless it has them. Returns chunks written."""
    from ledger.models import Source

    from .services import source_chunk

    source = Source.objects.filter(pk=source_id).select_related("agent").first()
    if source is None:
        logger.warning("chunk_source: source %s does not exist; nothing to do", source_id)
        return 0
    try:
        return len(source_chunk(source=source))
    except DatabaseError as exc:
        raise self.retry(exc=exc, countdown=2 ** (self.request.retries + 1)) from exc


@shared_task(
    name="episodes.embed_backlog",
    ignore_result=False,
    soft_time_limit=BACKLOG_TIME_BUDGET_SECONDS + 60,
    time_limit=BACKLOG_TIME_LIMIT_SECONDS,
)
def embed_backlog(
    agent_id: str | None = None,
    grace_seconds: float = BACKLOG_GRACE_SECONDS,
    time_budget_seconds: float = BACKLOG_TIME_BUDGET_SECONDS,
) -> dict[str, int]:
    """celery-beat: embed what a lost task left without a vector, and chunk recent
    sources left without chunks (episodes.upkeep.embedding_backlog_sweep: rows
    younger than `grace_seconds` are left to their commit's tasks; one sweep at
    a time). Returns the counts."""
    from .upkeep import embedding_backlog_sweep

    return embedding_backlog_sweep(
        agent_id=uuid.UUID(agent_id) if agent_id else None,
        grace_seconds=grace_seconds,
        time_budget_seconds=time_budget_seconds,
        batch_size=EMBED_BATCH,
        lock_seconds=BACKLOG_TIME_LIMIT_SECONDS,
    )


# A build of a 100k-row agent's graph takes minutes on a busy machine
# (docs/benchmarks.md); no new build starts after this long (the rest waits
# for the next run).
AGENT_GRAPHS_TIME_BUDGET_SECONDS = 20 * 60


@shared_task(
    name="episodes.build_agent_graphs",
    ignore_result=False,
    soft_time_limit=AGENT_GRAPHS_TIME_BUDGET_SECONDS + 15 * 60,
    time_limit=AGENT_GRAPHS_TIME_BUDGET_SECONDS + 20 * 60,
)
def build_agent_graphs() -> list[str]:
    """celery-beat: give the large agents their own HNSW graphs, then their large
    actors theirs, within one time budget (episodes.upkeep.graphs_build).
    Returns the agents built for; nothing when another build is running."""
    from .upkeep import graphs_build

    return graphs_build(time_budget_seconds=AGENT_GRAPHS_TIME_BUDGET_SECONDS)
