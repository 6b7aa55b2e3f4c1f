"""The endpoints suite F calls, as an agent and its operator call them. Every
exact request and response shape the suite depends on is here."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from ...transport import ApiClient, ApiResponse

API = "/api/v1"
LIST_PAGE = 1000


class Refused(Exception):
    """A write the world needs was refused: the item cannot run (W0)."""


def joined(*responses: ApiResponse) -> ApiResponse:
    """Several answers as one, for a search of all their text: the worst status."""
    worst = max(responses, key=lambda r: r.status)
    return ApiResponse(
        status=worst.status if worst.status >= 300 else 200,
        body=[r.body for r in responses],
        headers={},
        text="\n".join(r.text for r in responses),
    )


def shown_residue(body: dict[str, Any]) -> str:
    found = [f for f in body.get("residue", []) if isinstance(f, dict) and f.get("found")]
    return json.dumps(found[:5]) if found else json.dumps(body)[:300]


class ForgettingApi:
    def __init__(self, client: ApiClient) -> None:
        self.client = client

    @staticmethod
    def require(response: ApiResponse, what: str) -> Any:
        if response.status not in (200, 201):
            raise Refused(f"{what} refused: {response.describe(limit=300)}")
        return response.body

    def get(self, path: str) -> ApiResponse:
        return self.client.get(path)

    # -------------------------------------------------------------- writes

    def facts(self, claims: Sequence[dict[str, Any]]) -> ApiResponse:
        return self.client.post(f"{API}/facts", {"facts": list(claims)})

    def episode(self, body: dict[str, Any], *, idempotency_key: str | None = None) -> ApiResponse:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.client.post(f"{API}/episodes", body, headers=headers)

    def ingest(self, title: str, content: str, *, actor: str) -> ApiResponse:
        return self.client.post(
            f"{API}/sources/ingest", {"title": title, "content": content, "actor": actor}
        )

    def thread(self, key: str) -> ApiResponse:
        return self.client.post(f"{API}/threads", {"key": key})

    def state(self, thread_id: str, state: dict[str, Any]) -> ApiResponse:
        return self.client.request(
            "PUT", f"{API}/threads/{thread_id}/state", body={"state": state, "based_on": 0}
        )

    def intention(self, description: str) -> ApiResponse:
        return self.client.post(
            f"{API}/intentions", {"description": description, "trigger_type": "manual"}
        )

    def recall(self, query: str, *, route: str | None = None) -> ApiResponse:
        body: dict[str, Any] = {"query": query}
        if route:
            body["route"] = route
        return self.client.post(f"{API}/recall", body)

    def erase(self, selector: dict[str, Any], *, reason: str) -> ApiResponse:
        return self.client.post(f"{API}/erasure", {**selector, "reason": reason})

    # --------------------------------------------------------------- reads

    def everything(self, path: str) -> ApiResponse:
        """Every page of a list, as one answer."""
        response = self.client.get(f"{path}?{urlencode({'limit': LIST_PAGE})}")
        pages = [response]
        while response.status == 200 and isinstance(response.body, dict):
            following = response.body.get("next")
            if not following:
                break
            response = self.client.follow(following)
            pages.append(response)
        return joined(*pages)

    def search(self, kind: str, query: str) -> ApiResponse:
        """kind: 'episodes' or 'sources'; without abstention, so anything close shows."""
        return self.client.get(
            f"{API}/{kind}/search?{urlencode({'q': query, 'abstain': 'false', 'limit': 20})}"
        )

    def current(self, subject: str, predicate: str | None = None) -> ApiResponse:
        """The current facts of `subject` (for one predicate, or every one)."""
        query = {"subject": subject, **({"predicate": predicate} if predicate else {})}
        return self.client.get(f"{API}/facts/current?{urlencode(query)}")

    def chain(self, subject: str, predicate: str) -> ApiResponse:
        return self.client.get(
            f"{API}/facts/chain?{urlencode({'subject': subject, 'predicate': predicate})}"
        )

    # ------------------------------------------------------- consolidation

    def rows(self, path: str, **params: Any) -> tuple[list[dict[str, Any]], ApiResponse]:
        """Every row of every page of a list; the last answer (a refusal ends it)."""
        response = self.client.get(f"{path}?{urlencode({'limit': LIST_PAGE, **params})}")
        rows: list[dict[str, Any]] = []
        while response.status == 200 and isinstance(response.body, dict):
            rows.extend(r for r in response.body.get("results", []) if isinstance(r, dict))
            following = response.body.get("next")
            if not following:
                break
            response = self.client.follow(following)
        return rows, response

    def consolidation_start(self, kind: str) -> ApiResponse:
        return self.client.post(f"{API}/consolidation/runs", {"kind": kind})

    def running(self, kind: str) -> tuple[list[dict[str, Any]], ApiResponse]:
        return self.rows(f"{API}/consolidation/runs", kind=kind, status="running")

    def candidates(self) -> tuple[list[dict[str, Any]], ApiResponse]:
        return self.rows(f"{API}/consolidation/candidates")

    def trace(self, body: dict[str, Any]) -> ApiResponse:
        return self.client.post(f"{API}/skills/traces", body)

    def skill_candidates(self) -> tuple[list[dict[str, Any]], ApiResponse]:
        return self.rows(f"{API}/consolidation/skill-candidates")

    def version(self, version_id: str) -> ApiResponse:
        return self.client.get(f"{API}/skills/versions/{version_id}")


def search_hit_ids(response: ApiResponse) -> list[str]:
    """The episode ids of a search's hits, best first."""
    body = response.body if isinstance(response.body, dict) else {}
    ids = []
    for hit in body.get("hits", []) or []:
        episode = hit.get("episode") if isinstance(hit, dict) else None
        if isinstance(episode, dict) and episode.get("id"):
            ids.append(str(episode["id"]))
    return ids
