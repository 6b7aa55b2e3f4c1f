"""The writes suite G makes to give each memory type something to find —
predicates, facts, skills, intentions, documents — and how to read the
answers. Episodes and recall are suite B's (episodic.api); facts' batch
receipts are suite C's (semantic.api)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...transport import ApiClient, ApiResponse
from ..episodic.api import EpisodesApi, listed

API = "/api/v1"
FACTS = f"{API}/facts"
PREDICATES = f"{API}/predicates"
SKILLS = f"{API}/skills"
INTENTIONS = f"{API}/intentions"
SOURCES = f"{API}/sources"


class MemoryApi(EpisodesApi):
    """Every store suite G writes to, and recall, for one agent."""

    def __init__(self, client: ApiClient) -> None:
        super().__init__(client)

    def predicate_define(self, name: str, volatility_seconds: int | None) -> ApiResponse:
        return self.client.request(
            "PUT", f"{PREDICATES}/{name}", body={"volatility_seconds": volatility_seconds}
        )

    def facts_assert(self, claims: Sequence[dict[str, Any]]) -> ApiResponse:
        return self.client.post(FACTS, {"facts": list(claims)})

    def skill_create(self, skill: dict[str, Any]) -> ApiResponse:
        return self.client.post(SKILLS, skill)

    def intention_create(self, intention: dict[str, Any]) -> ApiResponse:
        return self.client.post(INTENTIONS, intention)

    def source_ingest(self, title: str, content: str) -> ApiResponse:
        return self.client.post(f"{SOURCES}/ingest", {"title": title, "content": content})

    def chunks(self, source_id: str) -> tuple[list[dict[str, Any]], ApiResponse]:
        """A source's chunks, every page: (rows, the last answer)."""
        response = self.client.get(f"{SOURCES}/{source_id}/chunks")
        rows: list[dict[str, Any]] = []
        while True:
            if response.status != 200:
                return rows, response
            rows.extend(listed(response.body) or chunk_rows(response.body))
            following = response.body.get("next") if isinstance(response.body, dict) else None
            if not following:
                return rows, response
            response = self.client.follow(following)


# ---------------------------------------------------------------- reading answers


def chunk_rows(body: Any) -> list[dict[str, Any]]:
    if isinstance(body, dict) and isinstance(body.get("chunks"), list):
        return body["chunks"]
    return []


def skill_version_id(body: Any) -> str | None:
    """The id of the version a skill create made (its only one)."""
    if not isinstance(body, dict):
        return None
    versions = body.get("versions")
    if isinstance(versions, list) and versions and isinstance(versions[0], dict):
        return str(versions[0].get("id")) if versions[0].get("id") else None
    version = body.get("version") or body.get("latest_version")
    if isinstance(version, dict) and version.get("id"):
        return str(version["id"])
    return None


def source_id_of(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    source = body.get("source") if isinstance(body.get("source"), dict) else body
    ident = source.get("id")
    return str(ident) if ident else None
