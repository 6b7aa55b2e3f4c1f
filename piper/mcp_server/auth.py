"""Whose key a tool call runs with, and which tools that key may see and call.

Over stdio the key is the process's (`--api-key` or PIPER_API_KEY), checked
once at start. Over streamable HTTP every request carries its own
`Authorization: Bearer <key>`; `ApiKeyVerifier` checks it the way the REST
API does (live, not revoked, agent active) before any tool runs, so an
unknown key never reaches a tool. A key sees and calls only the tools its
scopes allow and, when its `tools` allowlist is not empty, only those.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

# The key of a stdio server (one per process); HTTP requests bring their own.
process_key: ContextVar[str | None] = ContextVar("piper_mcp_process_key", default=None)


@dataclass(frozen=True)
class Caller:
    raw_key: str
    agent_id: str
    scopes: frozenset[str]
    tools: frozenset[str]  # empty: every tool the scopes allow

    def may(self, tool_name: str, scope: str) -> bool:
        in_scope = "admin" in self.scopes or scope in self.scopes  # as ApiKey.allows
        return in_scope and (not self.tools or tool_name in self.tools)


def caller_for(raw_key: str) -> Caller | None:
    """The live key behind a raw secret, or None (unknown, revoked, agent inactive)."""
    from piper.tenancy.selectors import api_key_for_secret

    api_key = api_key_for_secret(raw_key)
    if api_key is None:
        return None
    return Caller(
        raw_key=raw_key,
        agent_id=str(api_key.agent_id),
        scopes=frozenset(api_key.scopes),
        tools=frozenset(api_key.tools or ()),
    )


def current_key() -> str | None:
    """The raw key of the call being served: the bearer token of an HTTP request,
    else the stdio process's key."""
    token = get_access_token()
    return token.token if token is not None else process_key.get()


class ApiKeyVerifier:
    """MCP's TokenVerifier over Piper API keys (the bearer token is the key)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        caller = await sync_to_async(caller_for, thread_sensitive=False)(token)
        if caller is None:
            return None
        return AccessToken(token=token, client_id=caller.agent_id, scopes=sorted(caller.scopes))


def http_auth(public_url: str) -> dict:
    """build_server's arguments for streamable HTTP: Piper's API keys are the bearer
    tokens. The service issues them itself and they name no audience, so the
    verifier's own lookup is the check (validate_token_resource off)."""
    from mcp.server.auth.settings import AuthSettings

    public_url = public_url.rstrip("/")
    return {
        "token_verifier": ApiKeyVerifier(),
        "auth": AuthSettings(
            issuer_url=public_url,
            resource_server_url=f"{public_url}/mcp",
            validate_token_resource=False,
        ),
    }
