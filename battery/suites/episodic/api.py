"""The episodes and recall endpoints as an agent calls them (suites B and G),
and how to read their answers. Everything that depends on the API's exact
shapes is here."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.utils.dateparse import parse_datetime

from ...transport import ApiClient, ApiResponse

API = "/api/v1"
EPISODES = f"{API}/episodes"
RECALL = f"{API}/recall"
MAX_BATCH = 1000
LIST_PAGE = 1000

# Episode fields POST /episodes takes (the draw's bookkeeping stays out).
EPISODE_FIELDS = (
    "occurred_at",
    "summary",
    "action",
    "observation",
    "outcome",
    "actor",
    "environment",
    "session_id",
    "entities",
    "source_type",
)


def episode_body(episode: dict[str, Any]) -> dict[str, Any]:
    return {name: episode[name] for name in EPISODE_FIELDS if name in episode}


class EpisodesApi:
    """Episodes and recall for one agent."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    def record_many(self, episodes: Sequence[dict[str, Any]]) -> ApiResponse:
        return self.client.post(EPISODES, {"episodes": [episode_body(e) for e in episodes]})

    def record_one(self, episode: dict[str, Any]) -> ApiResponse:
        return self.client.post(EPISODES, episode_body(episode))

    def episode(self, episode_id: str) -> ApiResponse:
        return self.client.get(f"{EPISODES}/{episode_id}")

    def listing(self, **filters: Any) -> tuple[list[dict[str, Any]], ApiResponse]:
        """Every episode the filters select, following the cursor: (rows, the last answer)."""
        query = urlencode({"limit": LIST_PAGE, **{k: v for k, v in filters.items() if v}})
        response = self.client.get(f"{EPISODES}?{query}")
        rows: list[dict[str, Any]] = []
        while True:
            if response.status != 200:
                return rows, response
            rows.extend(listed(response.body))
            following = response.body.get("next") if isinstance(response.body, dict) else None
            if not following:
                return rows, response
            response = self.client.follow(following)

    def recall(
        self,
        query: str,
        *,
        route: str | None = None,
        limit: int | None = None,
        filters: dict[str, Any] | None = None,
        context: dict[str, Any] | None = None,
    ) -> ApiResponse:
        body: dict[str, Any] = {"query": query}
        if route is not None:
            body["route"] = route
        if limit is not None:
            body["limit"] = limit
        if filters:
            body["filters"] = filters
        if context:
            body["context"] = context
        return self.client.post(RECALL, body)


# ---------------------------------------------------------------- reading answers


def listed(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, list):
        return body
    if isinstance(body, dict):
        for key in ("results", "episodes"):
            if isinstance(body.get(key), list):
                return body[key]
    return []


def written(body: Any) -> list[dict[str, Any]]:
    """The rows POST /episodes answered with, in input order."""
    if isinstance(body, dict) and "id" in body and not isinstance(body.get("episodes"), list):
        return [body]
    return listed(body)


def is_embedded(row: dict[str, Any]) -> bool:
    value = row.get("embedded")
    if isinstance(value, bool):
        return value
    return bool(row.get("embedded_at"))


def moment(value: Any) -> datetime | None:
    return parse_datetime(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class Hit:
    """One piece of evidence: its kind, the id of what it is, and that object's fields."""

    kind: str
    id: str | None
    text: str
    score: float | None
    obj: dict[str, Any]
    memory_status: dict[str, Any]
    signals: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        text = self.text if len(self.text) <= 100 else self.text[:100] + "…"
        return f"{self.kind} {text!r}"


@dataclass(frozen=True)
class Answer:
    """What POST /recall answered, read once."""

    response: ApiResponse
    abstained: bool | None = None
    evidence: list[Hit] = field(default_factory=list)
    near_misses: list[Hit] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    route: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.response.status in (200, 201) and isinstance(self.response.body, dict)

    def episodes(self) -> list[Hit]:
        return [hit for hit in self.evidence if hit.kind == "episode"]


def _hit(entry: dict[str, Any]) -> Hit:
    kind = str(entry.get("kind", ""))
    obj = entry.get(kind) if isinstance(entry.get(kind), dict) else {}
    ident = entry.get("id", obj.get("id"))
    status = entry.get("memory_status")
    score = entry.get("score")
    signals = entry.get("signals")
    return Hit(
        kind=kind,
        id=str(ident) if ident is not None else None,
        text=str(entry.get("text") or obj.get("summary") or ""),
        score=float(score) if isinstance(score, int | float) else None,
        obj=obj,
        memory_status=status if isinstance(status, dict) else {},
        signals=signals if isinstance(signals, dict) else {},
    )


def answer_of(response: ApiResponse) -> Answer:
    body = response.body
    if response.status not in (200, 201) or not isinstance(body, dict):
        return Answer(response=response)
    evidence = [_hit(e) for e in body.get("evidence") or [] if isinstance(e, dict)]
    near = [_hit(e) for e in body.get("near_misses") or [] if isinstance(e, dict)]
    groups = [g for g in body.get("groups") or [] if isinstance(g, dict)]
    route = body.get("route") if isinstance(body.get("route"), dict) else {}
    abstained = body.get("abstained")
    return Answer(
        response=response,
        abstained=abstained if isinstance(abstained, bool) else None,
        evidence=evidence,
        near_misses=near,
        groups=groups,
        route=route,
    )


def group_members(group: dict[str, Any]) -> list[str]:
    """The ids of what a session group holds, in its order."""
    for key in ("evidence", "episodes", "hits", "items"):
        members = group.get(key)
        if isinstance(members, list):
            ids = []
            for member in members:
                if isinstance(member, dict):
                    inner = member.get("episode") if isinstance(member.get("episode"), dict) else {}
                    ident = inner.get("id", member.get("id"))
                else:
                    ident = member
                ids.append(str(ident))
            return ids
    ids = group.get("ids")
    return [str(i) for i in ids] if isinstance(ids, list) else []


# ------------------------------------------------------------------ waiting


def await_progress(pending: Callable[[], int], *, stall_seconds: float, poll: float) -> int:
    """Call `pending` (how many are still waited for) until none are, or until
    `stall_seconds` pass without the number going down. Returns the last count."""
    left = pending()
    progress_at = time.monotonic()
    while left:
        if time.monotonic() - progress_at > stall_seconds:
            return left
        time.sleep(poll)
        now_left = pending()
        if now_left < left:
            progress_at = time.monotonic()
        left = now_left
    return 0
