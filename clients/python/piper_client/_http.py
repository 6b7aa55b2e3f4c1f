"""Sending one call: the key, an Idempotency-Key on writes, retries with backoff.

A write gets one Idempotency-Key for the whole call, kept across its retries,
so a retry the service already answered replays that answer instead of
writing twice — which is what makes retrying a write safe. 429 and 503 are
retried after their Retry-After (capped), connection errors and timeouts
with exponential backoff and jitter.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

import anyio
import anyio.to_thread
import httpx

from .errors import APIConnectionError, _retry_after, error_for

RETRY_STATUSES = frozenset({429, 503})
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
API_PREFIX = "/api/v1"


@dataclass(frozen=True)
class Options:
    timeout: float = 10.0
    max_retries: int = 3
    backoff: float = 0.5  # seconds before the first retry; doubles each time
    max_wait: float = 30.0  # the longest a Retry-After is honoured

    def with_(self, **changes: Any) -> Options:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


@dataclass(frozen=True)
class Call:
    method: str
    path: str  # below /api/v1, or an absolute URL (a pagination link)
    params: dict | None = None
    json: Any = None
    idempotency_key: str | None = None
    accept: str = "application/json"
    extra_headers: dict | None = None  # sent as given, over the ones made here
    timeout: float | None = None  # this call's, over the client's

    def headers(self) -> dict[str, str]:
        headers = {"Accept": self.accept}
        if self.json is not None:
            headers["Content-Type"] = "application/json"
        if self.method in WRITES:
            headers["Idempotency-Key"] = self.idempotency_key or str(uuid.uuid4())
        return headers | dict(self.extra_headers or {})

    def url(self) -> str:
        return self.path if "://" in self.path else API_PREFIX + self.path

    def content(self) -> bytes | None:
        if self.json is None:
            return None
        return json.dumps(self.json, default=_jsonable).encode()

    def query(self) -> dict | None:
        if not self.params:
            return None
        return {k: _query_value(v) for k, v in self.params.items() if v is not None}


def _jsonable(value: Any) -> Any:
    """Datetimes and UUIDs as the API reads them (ISO 8601, canonical text)."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _query_value(value: Any) -> Any:
    if isinstance(value, list | tuple):  # the API's list filters take commas
        return ",".join(str(_query_value(v)) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value) if isinstance(value, uuid.UUID) else value


def _wait(options: Options, attempt: int, response: httpx.Response | None) -> float:
    after = _retry_after(response)
    if after is not None:
        return min(after, options.max_wait)
    return options.backoff * (2**attempt) * (0.5 + random.random())


def _retryable(response: httpx.Response) -> bool:
    return response.status_code in RETRY_STATUSES


def send(client: httpx.Client, call: Call, options: Options) -> httpx.Response:
    headers = call.headers()  # one Idempotency-Key for every attempt
    for attempt in range(options.max_retries + 1):
        last = attempt == options.max_retries
        try:
            response = client.request(
                call.method,
                call.url(),
                params=call.query(),
                content=call.content(),
                headers=headers,
                timeout=options.timeout if call.timeout is None else call.timeout,
            )
        except httpx.TransportError as exc:
            if last:
                raise APIConnectionError(f"{call.method} {call.url()}: {exc!r}") from exc
            time.sleep(_wait(options, attempt, None))
            continue
        if _retryable(response) and not last:
            time.sleep(_wait(options, attempt, response))
            continue
        if response.is_error:
            raise error_for(response)
        return response
    raise AssertionError("unreachable")


async def send_async(client: httpx.AsyncClient, call: Call, options: Options) -> httpx.Response:
    headers = call.headers()
    for attempt in range(options.max_retries + 1):
        last = attempt == options.max_retries
        try:
            response = await client.request(
                call.method,
                call.url(),
                params=call.query(),
                content=call.content(),
                headers=headers,
                timeout=options.timeout if call.timeout is None else call.timeout,
            )
        except httpx.TransportError as exc:
            if last:
                raise APIConnectionError(f"{call.method} {call.url()}: {exc!r}") from exc
            await anyio.sleep(_wait(options, attempt, None))
            continue
        if _retryable(response) and not last:
            await anyio.sleep(_wait(options, attempt, response))
            continue
        if response.is_error:
            raise error_for(response)
        return response
    raise AssertionError("unreachable")


class ThreadedTransport(httpx.AsyncBaseTransport):
    """A blocking transport (httpx.WSGITransport: the service in process) for the
    async client: each request runs in a worker thread, so the event loop goes on."""

    def __init__(self, transport: httpx.BaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        blocking = httpx.Request(
            request.method,
            request.url,
            headers=request.headers,
            content=await request.aread(),
            extensions=request.extensions,
        )

        def answer() -> httpx.Response:
            response = self._transport.handle_request(blocking)
            response.read()
            return response

        response = await anyio.to_thread.run_sync(answer)
        return httpx.Response(
            response.status_code, headers=response.headers, content=response.content
        )

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self._transport.close)
