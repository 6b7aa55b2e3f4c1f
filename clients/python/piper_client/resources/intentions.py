"""Prospective memory: intentions (commitments with triggers) and where firings go."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .. import models as m
from ._base import Resource, body, delete, get, operation, paginated, post, put


class Intentions(Resource):
    @operation
    def create(
        self, description: str, *, trigger_type: str = "time", **fields: Any
    ) -> m.IntentionDetail:
        """Commit to do something. trigger_type: "time" (due_at, not_before, rrule),
        "event"/"state" (trigger_spec), "dependency" (dependencies) or "manual".
        Also thread, priority, expires_at, completion_criteria, required_context, …"""
        intention = body(description=description, trigger_type=trigger_type, **fields)
        return post("/intentions", m.IntentionDetail, intention)

    @operation
    def get(self, intention_id: str) -> m.IntentionDetail:
        return get(f"/intentions/{intention_id}", m.IntentionDetail)

    @paginated
    def list(self, *, limit: int | None = None, **filters: Any) -> Iterator[m.Intention]:
        """Filters: status, thread, trigger_type."""
        return get("/intentions", m.Intention, limit=limit, **filters)

    @paginated
    def due(self, *, thread: str | None = None, limit: int | None = None) -> Iterator[m.Intention]:
        """What has fired and waits to be done, in the order it fired."""
        return get("/intentions/due", m.Intention, thread=thread, limit=limit)

    def _move(self, intention_id: str, action: str, change: dict | None = None):
        return post(f"/intentions/{intention_id}/{action}", m.IntentionDetail, change)

    @operation
    def start(self, intention_id: str) -> m.IntentionDetail:
        return self._move(intention_id, "start")

    @operation
    def complete(
        self, intention_id: str, *, evidence: Any = None, occurrence: int | None = None
    ) -> m.IntentionDetail:
        """Done: a one-shot intention never fires again; a recurring one waits for its next.
        With `occurrence` (as read), only that one: Conflict stale_occurrence when a
        concurrent or repeated completion already moved past it."""
        return self._move(intention_id, "complete", body(evidence=evidence, occurrence=occurrence))

    @operation
    def cancel(self, intention_id: str, *, reason: str | None = None) -> m.IntentionDetail:
        """No longer wanted: it never fires again."""
        return self._move(intention_id, "cancel", body(reason=reason))

    @operation
    def skip(
        self, intention_id: str, *, reason: str | None = None, occurrence: int | None = None
    ) -> m.IntentionDetail:
        """Pass over this occurrence of a recurring intention (`occurrence` as for complete)."""
        return self._move(intention_id, "skip", body(reason=reason, occurrence=occurrence))

    @operation
    def fail(self, intention_id: str, *, reason: str) -> m.IntentionDetail:
        return self._move(intention_id, "fail", {"reason": reason})

    @operation
    def set_escalation_policy(self, intention_id: str, policy: dict) -> m.IntentionDetail:
        """Replace an open intention's escalation policy ({} for none): after_failures
        and/or overdue_seconds, notify (["webhook"]), to_session, note."""
        return put(
            f"/intentions/{intention_id}/escalation-policy",
            m.IntentionDetail,
            {"escalation_policy": policy},
        )

    @operation
    def expire(self, intention_id: str) -> m.IntentionDetail:
        return self._move(intention_id, "expire")

    @operation
    def fire(self, intention_id: str) -> m.IntentionDetail:
        """Make it due now (a manual trigger)."""
        return self._move(intention_id, "fire")

    @operation
    def set_dependencies(self, intention_id: str, dependencies: list[str]) -> m.IntentionDetail:
        """The intentions that must be completed before this one fires."""
        path = f"/intentions/{intention_id}/dependencies"
        return put(path, m.IntentionDetail, {"dependencies": dependencies})

    @operation
    def tick(self) -> m.Tick:
        """Check every trigger now, instead of waiting for the scheduler."""
        return post("/intentions/tick", m.Tick)


class Webhook(Resource):
    """Where firings are delivered (admin scope)."""

    @operation
    def get(self) -> m.Webhook:
        return get("/webhook", m.Webhook)

    @operation
    def set(self, url: str, *, secret: str) -> m.Webhook:
        return put("/webhook", m.Webhook, {"url": url, "secret": secret})

    @operation
    def remove(self) -> None:
        return delete("/webhook")
