"""Episodic memory: what happened, situated in time, and its hybrid search."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from .. import models as m
from ._base import Resource, body, get, operation, paginated, post


class Episodes(Resource):
    @operation
    def record(self, *, occurred_at: datetime | str, **fields: Any) -> m.Episode:
        """What happened: summary, action, observation, outcome ("success", "failure",
        "partial", "unknown"), score, actor, environment, session_id, goal_id, task_id,
        salience, confidence, entities, … At least one of summary/action/observation."""
        return post("/episodes", m.Episode, body(occurred_at=occurred_at, **fields))

    @operation
    def record_many(self, episodes: list[dict]) -> m.EpisodeBatch:
        """Several episodes, all or nothing."""
        return post("/episodes", m.EpisodeBatch, {"episodes": episodes})

    @operation
    def get(self, episode_id: str, *, include_embedding: bool | None = None) -> m.Episode:
        return get(f"/episodes/{episode_id}", m.Episode, include_embedding=include_embedding)

    @paginated
    def list(self, *, limit: int | None = None, **filters: Any) -> Iterator[m.Episode]:
        """Filters: session_id, actor, environment, goal_id, task_id, outcome,
        occurred_after, occurred_before."""
        return get("/episodes", m.Episode, limit=limit, **filters)

    @operation
    def search(self, query: str, *, limit: int | None = None, **filters: Any) -> m.EpisodeSearch:
        """Episodes like `query` (full text + vectors + time, fused); `abstained` when no
        evidence is close enough. Filters as list() takes, plus entities and abstain."""
        return get("/episodes/search", m.EpisodeSearch, q=query, limit=limit, **filters)
