"""Working state: one versioned checkpoint per thread, handover and resume."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import models as m
from ._base import Resource, body, get, operation, paginated, post, put


class WorkingStates(Resource):
    @operation
    def thread(self, key: str, *, session_id: str | None = None) -> m.ThreadDetail:
        """The thread named `key`, created if it is new."""
        return post("/threads", m.ThreadDetail, body(key=key, session_id=session_id))

    @operation
    def get_thread(self, thread_id: str) -> m.ThreadDetail:
        return get(f"/threads/{thread_id}", m.ThreadDetail)

    @paginated
    def threads(self, *, status: str | None = None, limit: int | None = None) -> Iterator[m.Thread]:
        return get("/threads", m.Thread, status=status, limit=limit)

    @operation
    def get(self, thread_id: str, *, version: int | None = None) -> m.WorkingState:
        """The latest checkpoint, or the one numbered `version`."""
        return get(f"/threads/{thread_id}/state", m.WorkingState, version=version)

    @paginated
    def versions(self, thread_id: str, *, limit: int | None = None) -> Iterator[m.WorkingState]:
        return get(f"/threads/{thread_id}/versions", m.WorkingState, limit=limit)

    @operation
    def checkpoint(
        self, thread_id: str, state: dict, *, based_on: int, **fields: Any
    ) -> m.WorkingState:
        """Save a new version of the thread's state (goal, plan, next_action, blockers,
        failed_branches, …). `based_on` is the version it replaces: Conflict if another
        write came first. Also session_id, privacy_class, retention_class."""
        change = body(state=state, based_on=based_on, **fields)
        return put(f"/threads/{thread_id}/state", m.WorkingState, change)

    @operation
    def handover(
        self,
        thread_id: str,
        *,
        to_session: str,
        from_session: str | None = None,
        note: str | None = None,
    ) -> m.Handover:
        """Freeze the state for `to_session`, which resumes from it."""
        change = body(to_session=to_session, from_session=from_session, note=note)
        return post(f"/threads/{thread_id}/handover", m.Handover, change)

    @operation
    def resume(self, thread_id: str, *, session_id: str) -> m.Resume:
        """What a successor needs first: the checkpoint, the open intentions it inherits
        (the thread's and the agent's of no thread), what to re-check, and the branches
        not to retry."""
        return post(f"/threads/{thread_id}/resume", m.Resume, {"session_id": session_id})

    @operation
    def acknowledge(self, thread_id: str, *, session_id: str) -> m.Handover:
        """The successor has taken over: the handover is closed."""
        path = f"/threads/{thread_id}/acknowledge"
        return post(path, m.Handover, {"session_id": session_id})

    @operation
    def clear_pending(self, thread_id: str, ids: list[int]) -> m.PendingClear:
        """Take seen items (fired or rehearsed intentions) off the thread's pending list."""
        return post(f"/threads/{thread_id}/pending/clear", m.PendingClear, {"ids": ids})
