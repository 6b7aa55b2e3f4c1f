"""The skills endpoints as an agent calls them (suite D), and how to read their
answers. Everything that depends on the API's exact shapes is here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...transport import ApiClient, ApiResponse

API = "/api/v1"
SKILLS = f"{API}/skills"
VERSIONS = f"{SKILLS}/versions"
EXECUTIONS = f"{SKILLS}/executions"
EVENTS = f"{API}/events"
KEYS = f"{API}/keys"
PAGE = 500
# The battery must never be throttled by its own traffic (as its primary key).
SUCCESSOR_RATE_PER_MINUTE = 1_000_000


class SkillsApi:
    """One agent's skills, executions and the ledger events they come from."""

    def __init__(self, client: ApiClient) -> None:
        self.client = client

    # the ledger and keys ---------------------------------------------------

    def events_append(self, events: Sequence[dict[str, Any]]) -> ApiResponse:
        return self.client.post(EVENTS, {"events": list(events)})

    def key_create(self, name: str) -> ApiResponse:
        """A new key of the same agent (read and write: a successor session's)."""
        return self.client.post(
            KEYS,
            {
                "name": name,
                "scopes": ["read", "write"],
                "rate_per_minute": SUCCESSOR_RATE_PER_MINUTE,
            },
        )

    # definitions -----------------------------------------------------------

    def skill_create(
        self, name: str, definition: dict[str, Any], *, session_id: str
    ) -> ApiResponse:
        return self.client.post(SKILLS, {"name": name, **definition, "session_id": session_id})

    def version_create(
        self, skill_id: str, definition: dict[str, Any], *, session_id: str
    ) -> ApiResponse:
        return self.client.post(
            f"{SKILLS}/{skill_id}/versions", {**definition, "session_id": session_id}
        )

    def skills(self) -> list[dict[str, Any]] | ApiResponse:
        """Every skill of the agent with its versions' summaries (all pages), or
        the answer that refused."""
        found: list[dict[str, Any]] = []
        response = self.client.get(f"{SKILLS}?limit={PAGE}")
        while True:
            if response.status != 200 or not isinstance(response.body, dict):
                return response
            found.extend(r for r in response.body.get("results") or [] if isinstance(r, dict))
            following = response.body.get("next")
            if not following:
                return found
            response = self.client.follow(following)

    def version(self, version_id: str) -> ApiResponse:
        return self.client.get(f"{VERSIONS}/{version_id}")

    def promote(self, version_id: str, reason: str = "") -> ApiResponse:
        return self.client.post(f"{VERSIONS}/{version_id}/promote", {"reason": reason})

    # running ---------------------------------------------------------------

    def match(self, task: str, context: dict[str, Any]) -> ApiResponse:
        return self.client.post(f"{SKILLS}/match", {"task": task, "context": context})

    def execute(
        self,
        version_id: str,
        params: dict[str, Any],
        *,
        session_id: str,
        task: str = "",
        context: dict[str, Any] | None = None,
        allow_unvalidated: bool = False,
    ) -> ApiResponse:
        body: dict[str, Any] = {"params": params, "session_id": session_id, "task": task}
        if context:
            body["context"] = context
        if allow_unvalidated:
            body["allow_unvalidated"] = True
        return self.client.post(f"{VERSIONS}/{version_id}/execute", body)

    def execution(self, execution_id: str) -> ApiResponse:
        return self.client.get(f"{EXECUTIONS}/{execution_id}")

    def executions(self, version_id: str) -> list[dict[str, Any]] | ApiResponse:
        """Every execution of a version, newest first (all pages)."""
        found: list[dict[str, Any]] = []
        response = self.client.get(f"{VERSIONS}/{version_id}/executions?limit={PAGE}")
        while True:
            if response.status != 200 or not isinstance(response.body, dict):
                return response
            found.extend(r for r in response.body.get("results") or [] if isinstance(r, dict))
            following = response.body.get("next")
            if not following:
                return found
            response = self.client.follow(following)

    def report(
        self,
        version_id: str,
        params: dict[str, Any],
        *,
        result: Any,
        evidence: Any,
        session_id: str,
        task: str = "",
    ) -> ApiResponse:
        """An execution the agent saw succeed outside the sandbox, checked by
        someone else (the house's own record of it)."""
        return self.client.post(
            f"{VERSIONS}/{version_id}/executions",
            {
                "params": params,
                "succeeded": True,
                "result": result,
                "evidence": evidence,
                "externally_verified": True,
                "session_id": session_id,
                "task": task,
            },
        )


# ---------------------------------------------------------------- reading answers


def ok(response: ApiResponse) -> bool:
    return 200 <= response.status < 300 and isinstance(response.body, dict)


def id_of(body: Any) -> str | None:
    value = body.get("id") if isinstance(body, dict) else None
    return str(value) if value else None


def first_version(skill: Any) -> dict[str, Any]:
    """The skill's version 1 from a skill body (versions newest first)."""
    versions = skill.get("versions") if isinstance(skill, dict) else None
    for version in versions or []:
        if isinstance(version, dict) and version.get("number") == 1:
            return version
    return {}


def listed(body: Any, key: str) -> list[Any]:
    value = body.get(key) if isinstance(body, dict) else None
    return value if isinstance(value, list) else []


def candidates(match: Any, key: str) -> list[dict[str, Any]]:
    """`applicable` or `near_misses` of a match answer, as objects."""
    return [c for c in listed(match, key) if isinstance(c, dict)]
