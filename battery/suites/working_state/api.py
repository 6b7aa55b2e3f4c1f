"""The working-state endpoints as an agent calls them (suites A and E), and how
to read their answers. Everything that depends on the API's exact shapes is here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...transport import ApiClient, ApiResponse

API = "/api/v1"
THREADS = f"{API}/threads"
CLOCK = f"{API}/clock"
EVENTS = f"{API}/events"
FACTS = f"{API}/facts"


class StateApi:
    """Threads, their checkpoints and handovers, the simulated clock, and the
    ledger and facts writes that suites use as cues or noise, for one agent."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    # the simulated clock ---------------------------------------------------

    def clock_set(self, now: str) -> ApiResponse:
        return self.client.request("PUT", CLOCK, body={"now": now})

    # threads ---------------------------------------------------------------

    def thread_create(self, key: str, session_id: str) -> ApiResponse:
        return self.client.post(THREADS, {"key": key, "session_id": session_id})

    def thread(self, thread_id: str) -> ApiResponse:
        return self.client.get(f"{THREADS}/{thread_id}")

    def state_write(
        self, thread_id: str, state: dict[str, Any], *, based_on: int, session_id: str
    ) -> ApiResponse:
        return self.client.request(
            "PUT",
            f"{THREADS}/{thread_id}/state",
            body={"state": state, "based_on": based_on, "session_id": session_id},
        )

    def state(self, thread_id: str) -> ApiResponse:
        return self.client.get(f"{THREADS}/{thread_id}/state")

    def handover(
        self, thread_id: str, *, to_session: str, from_session: str, note: str
    ) -> ApiResponse:
        return self.client.post(
            f"{THREADS}/{thread_id}/handover",
            {"to_session": to_session, "from_session": from_session, "note": note},
        )

    def resume(self, thread_id: str, session_id: str) -> ApiResponse:
        return self.client.post(f"{THREADS}/{thread_id}/resume", {"session_id": session_id})

    def acknowledge(self, thread_id: str, session_id: str) -> ApiResponse:
        return self.client.post(f"{THREADS}/{thread_id}/acknowledge", {"session_id": session_id})

    # cues and noise --------------------------------------------------------

    def events_append(self, events: Sequence[dict[str, Any]]) -> ApiResponse:
        return self.client.post(EVENTS, {"events": list(events)})

    def event_append(self, event: dict[str, Any]) -> ApiResponse:
        return self.client.post(EVENTS, event)

    def facts_assert(self, claims: Sequence[dict[str, Any]]) -> ApiResponse:
        return self.client.post(FACTS, {"facts": list(claims)})

    def fact_assert(self, claim: dict[str, Any]) -> ApiResponse:
        return self.client.post(FACTS, claim)


# ---------------------------------------------------------------- reading answers


def ok(response: ApiResponse) -> bool:
    return 200 <= response.status < 300 and isinstance(response.body, dict)


def checkpoint_of(body: Any) -> dict[str, Any]:
    """The checkpoint of a resume (or a thread detail): {version, state, …}."""
    if isinstance(body, dict) and isinstance(body.get("checkpoint"), dict):
        return body["checkpoint"]
    return {}


def state_of(checkpoint: Any) -> dict[str, Any] | None:
    """The state a checkpoint (or a GET …/state answer) holds; None when it holds none."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state"), dict):
        return checkpoint["state"]
    return None


def listed(body: Any, key: str) -> list[Any]:
    value = body.get(key) if isinstance(body, dict) else None
    return value if isinstance(value, list) else []


def batch_results(body: Any, key: str) -> list[Any]:
    """The per-item results of a batch write: a list under `key` or `results`."""
    if isinstance(body, dict):
        for name in (key, "results"):
            if isinstance(body.get(name), list):
                return body[name]
    return body if isinstance(body, list) else []
