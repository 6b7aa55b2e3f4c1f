"""One API key's calls to the REST API, as an MCP tool makes them.

In process (no `base_url`) the request goes through Django's WSGI
application without a socket; with a `base_url` it goes to a running
service. Either way it is the API — its authentication, scopes, validation,
idempotency and error messages — so a tool can do nothing a key could not.
"""

from __future__ import annotations

import uuid
from functools import lru_cache
from typing import Any

import httpx
from mcp.server.mcpserver.exceptions import ToolError

IN_PROCESS = "http://piper.in-process"
# Where tools send their calls: None is in process; `manage.py mcp --api-url` sets it.
base_url: str | None = None
API = "/api/v1"
TIMEOUT = 30.0


@lru_cache(maxsize=1)
def _wsgi_transport() -> httpx.WSGITransport:
    from django.core.wsgi import get_wsgi_application

    return httpx.WSGITransport(app=get_wsgi_application())


class ApiSession:
    """JSON in, JSON out, with one key. A non-2xx answer raises ToolError carrying
    the API's status, code and message (what the model reads)."""

    def __init__(self, api_key: str, base_url: str | None = None) -> None:
        self._client = httpx.Client(
            base_url=(base_url or IN_PROCESS).rstrip("/") + API,
            transport=None if base_url else _wsgi_transport(),
            headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            timeout=TIMEOUT,
        )

    def close(self) -> None:
        self._client.close()

    def get(self, path: str, params: dict | None = None) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        return self._answer(self._client.get(path, params=clean))

    def write(self, method: str, path: str, body: dict, idempotency_key: str | None) -> Any:
        """A write, always under an Idempotency-Key (the caller's, or a fresh one):
        a client that retries the tool call with its key gets the first answer."""
        key = idempotency_key or str(uuid.uuid4())
        response = self._client.request(
            method, path, json=_without_none(body), headers={"Idempotency-Key": key}
        )
        return self._answer(response)

    def post(self, path: str, body: dict, idempotency_key: str | None = None) -> Any:
        return self.write("POST", path, body, idempotency_key)

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.is_success:
            return body
        error = (body or {}).get("error", {}) if isinstance(body, dict) else {}
        code = error.get("code") or "error"
        message = error.get("message") or response.text[:300] or response.reason_phrase
        detail = error.get("details")
        text = f"{response.status_code} {code}: {message}"
        if detail:
            text += f" (details: {detail})"
        if response.headers.get("Retry-After"):
            # 503 database_busy / database_unavailable, 429: when to call again.
            text += f" Retry after {response.headers['Retry-After']} s."
        raise ToolError(text)


def _without_none(body: dict) -> dict:
    return {k: v for k, v in body.items() if v is not None}
