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

    @operation
    def retract(self, episode_id: str, *, reason: str) -> m.Episode:
        """It did not happen as recorded: withdrawn (still readable by id, with its
        status and reason), no longer found by search, recall or context."""
        return post(f"/episodes/{episode_id}/retract", m.Episode, body(reason=reason))

    @operation
    def correct(self, episode_id: str, *, reason: str | None = None, **fields: Any) -> m.Episode:
        """It was recorded wrong: send the fields to change (summary, action,
        observation, outcome, score, occurred_at, actor, environment, goal_id,
        task_id, entities). Returns the new version (`supersedes` the old one, which
        is marked corrected and no longer found by search)."""
        return post(f"/episodes/{episode_id}/correct", m.Episode, {**fields, **body(reason=reason)})

    @paginated
    def list(self, *, limit: int | None = None, **filters: Any) -> Iterator[m.Episode]:
        """Filters: session_id, actor, environment, goal_id, task_id, outcome,
        occurred_after, occurred_before, status (active by default; retracted,
        corrected or all)."""
        return get("/episodes", m.Episode, limit=limit, **filters)

    @operation
    def search(self, query: str, *, limit: int | None = None, **filters: Any) -> m.EpisodeSearch:
        """Episodes like `query` (full text + vectors + time, fused); `abstained` when no
        evidence is close enough. Filters as list() takes, plus entities and abstain."""
        return get("/episodes/search", m.EpisodeSearch, q=query, limit=limit, **filters)
