"""Suite E's view of the intentions API: the requests an agent makes, and how to
read the answers. Everything that depends on the API's exact shapes is here
(threads, the clock, events and facts come from suite A's StateApi)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from ...transport import ApiClient, ApiResponse
from ..working_state.api import API, StateApi

INTENTIONS = f"{API}/intentions"
PAGE = 1000


class IntentionsApi(StateApi):
    """Intentions, the engine's tick, and what is due or fired, for one agent."""

    def __init__(self, client: ApiClient) -> None:
        super().__init__(client)

    def create(self, body: dict[str, Any]) -> ApiResponse:
        return self.client.post(INTENTIONS, body)

    def act(self, intention_id: str, op: str) -> ApiResponse:
        """complete, skip, cancel (or start, fail, expire, fire) one intention."""
        return self.client.post(f"{INTENTIONS}/{intention_id}/{op}", {})

    def intention(self, intention_id: str) -> ApiResponse:
        return self.client.get(f"{INTENTIONS}/{intention_id}")

    def tick(self) -> ApiResponse:
        return self.client.post(f"{INTENTIONS}/tick", {})

    def pages(self, path: str) -> Iterator[ApiResponse]:
        """Each page of a cursor-paginated list, following `next`; stops at a
        page that is not a 200 (yielded, for the caller to report)."""
        separator = "&" if "?" in path else "?"
        response = self.client.get(f"{path}{separator}limit={PAGE}")
        while True:
            yield response
            if response.status != 200 or not isinstance(response.body, dict):
                return
            following = response.body.get("next")
            if not following:
                return
            response = self.client.follow(following)

    def due(self) -> Iterator[ApiResponse]:
        return self.pages(f"{INTENTIONS}/due")

    def fired_events(self) -> Iterator[ApiResponse]:
        return self.pages(f"{API}/events?event_type=intention.fired")


# ---------------------------------------------------------------- reading answers


def results(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, dict) and isinstance(body.get("results"), list):
        return [r for r in body["results"] if isinstance(r, dict)]
    if isinstance(body, list):
        return [r for r in body if isinstance(r, dict)]
    return []


def due_entry(intention: dict[str, Any]) -> tuple[str, int] | None:
    """(id, occurrence) of an intention in the due list."""
    if intention.get("id") is None:
        return None
    occurrence = intention.get("occurrence", 1)
    return str(intention["id"]), occurrence if isinstance(occurrence, int) else 1


def firing_of(event: dict[str, Any]) -> tuple[str, int, datetime | None] | None:
    """(intention id, occurrence, fired at) of an intention.fired ledger event."""
    payload = event.get("payload")
    if not isinstance(payload, dict) or payload.get("intention_id") is None:
        return None
    fired_at = payload.get("fired_at")
    return (
        str(payload["intention_id"]),
        payload.get("occurrence", 1),
        parse_datetime(fired_at) if isinstance(fired_at, str) else None,
    )
