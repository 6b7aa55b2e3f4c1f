"""Hand-offs to episodes.tasks after commit, called through this module so a test
can switch them off in one place. Imported lazily: the tasks import the services."""

from __future__ import annotations

import uuid


def queue_embedding(agent_id: uuid.UUID, episode_ids: list[uuid.UUID]) -> None:
    """Hand the new rows to the embedding task, in batches."""
    from episodes.tasks import queue_episode_embedding

    queue_episode_embedding(agent_id=agent_id, episode_ids=episode_ids)


def queue_chunk_embedding(chunk_ids: list[uuid.UUID]) -> None:
    from episodes.tasks import queue_chunk_embedding

    queue_chunk_embedding(chunk_ids=chunk_ids)


def queue_backlog(agent_id: uuid.UUID | None) -> None:
    from episodes.tasks import embed_backlog

    embed_backlog.delay(agent_id=str(agent_id) if agent_id else None, grace_seconds=0)
