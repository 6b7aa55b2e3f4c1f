"""What the beat's episodes tasks do: the backlog sweep and the graph builds.

`embedding_backlog_sweep` embeds what a lost task left without a vector and
chunks recent sources left without chunks (episodes.embed_backlog);
`graphs_build` gives the large agents, then their large actors, their own HNSW
graphs (episodes.build_agent_graphs). Both are idempotent and bounded by a
time budget: what is left waits for the next run.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import timedelta

from django.core.cache import cache
from django.utils import timezone

logger = logging.getLogger(__name__)

# Sources registered this recently are checked for missing chunks by the sweep.
CHUNK_SWEEP_WINDOW = timedelta(days=7)
SWEEP_LOCK_KEY = "episodes:embed-backlog:lock"


def embedding_backlog_sweep(
    *,
    agent_id: uuid.UUID | None,
    grace_seconds: float,
    time_budget_seconds: float,
    batch_size: int,
    lock_seconds: int,
) -> dict[str, int]:
    """Chunk the sources left without chunks (every agent's registered within
    CHUNK_SWEEP_WINDOW, or all of one agent's), then embed the episodes and
    chunks left without a vector, `batch_size` at a time.

    Rows younger than `grace_seconds` are left to the tasks their commit
    queued. Stops once `time_budget_seconds` is spent. One sweep at a time:
    a second, while the lock (held at most `lock_seconds`) is taken, returns
    at once with nothing done. Returns the counts of sources chunked and
    episodes and chunks embedded.
    """
    from .selectors import embedding_backlog, sources_unchunked
    from .services import chunks_embed, episodes_embed, source_chunk

    done = {"episodes": 0, "chunks": 0, "sources": 0}
    if not cache.add(SWEEP_LOCK_KEY, "1", timeout=lock_seconds):
        logger.info("embed_backlog: another sweep is running")
        return done
    try:
        deadline = time.monotonic() + time_budget_seconds
        grace = timedelta(seconds=grace_seconds)
        since = None if agent_id else timezone.now() - CHUNK_SWEEP_WINDOW
        for source in sources_unchunked(
            agent_id=agent_id, created_before=timezone.now() - grace, since=since
        ):
            done["sources"] += bool(source_chunk(source=source))
            if time.monotonic() > deadline:
                return done
        created_before = timezone.now() - grace
        embedders = {
            "episodes": lambda ids: episodes_embed(episode_ids=ids),
            "chunks": lambda ids: chunks_embed(chunk_ids=ids),
        }
        for kind, embed in embedders.items():
            while time.monotonic() < deadline:
                backlog = embedding_backlog(
                    kind=kind, agent_id=agent_id, created_before=created_before
                )
                ids = list(backlog[:batch_size])
                if not ids:
                    break
                written = embed(ids)
                done[kind] += written
                if not written:  # the rows were taken meanwhile; don't spin on them
                    break
        if any(done.values()):
            logger.info("embed_backlog: %s", done)
        return done
    finally:
        cache.delete(SWEEP_LOCK_KEY)


def graphs_build(*, time_budget_seconds: float) -> list[str]:
    """Build the missing graphs of the large agents (episodes.agent_graphs),
    then of their large actors (episodes.actor_graphs), starting no build
    after `time_budget_seconds`. Returns the ids of the agents built for;
    nothing when another agent graph build is running."""
    from . import actor_graphs, agent_graphs

    started = time.monotonic()
    try:
        runs = agent_graphs.agent_graphs_build_missing(time_budget_seconds=time_budget_seconds)
    except agent_graphs.BuildRunning:
        logger.info("build_agent_graphs: another agent graph build is running")
        return []
    done = [run for run in runs if run.seconds is not None]
    for built in done:
        logger.info(
            "build_agent_graphs: agent %s (%s episodes): %s in %.1f s",
            built.graph.agent_id,
            built.graph.rows,
            built.graph.index,
            built.seconds,
        )
    left = max(0.0, time_budget_seconds - (time.monotonic() - started))
    try:
        actor_runs = actor_graphs.actor_graphs_build_missing(time_budget_seconds=left)
    except agent_graphs.BuildRunning:
        logger.info("build_agent_graphs: another actor graph build is running")
        actor_runs = []
    for built in actor_runs:
        if built.seconds is not None:
            logger.info(
                "build_agent_graphs: agent %s, actor %r (%s vectors) in %.1f s",
                built.actor_set.agent_id,
                built.actor_set.actor,
                built.actor_set.rows,
                built.seconds,
            )
    return [str(b.graph.agent_id) for b in done]
