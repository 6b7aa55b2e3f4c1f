"""Sending one call: the key, an Idempotency-Key on writes, retries with backoff.

A write gets one Idempotency-Key for the whole call, kept across its retries,
so a retry the service already answered replays that answer instead of
writing twice — which is what makes retrying a write safe. 429 and 503 are
retried after their Retry-After (capped), connection errors and timeouts
with exponential backoff and jitter.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

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

    def headers(self) -> dict[str, str]:
        headers = {"Accept": self.accept}
        if self.method in WRITES:
            headers["Idempotency-Key"] = self.idempotency_key or str(uuid.uuid4())
        return headers | dict(self.extra_headers or {})

    def url(self) -> str:
        return self.path if "://" in self.path else API_PREFIX + self.path

    def query(self) -> dict | None:
        if not self.params:
            return None
        return {k: _query_value(v) for k, v in self.params.items() if v is not None}


def _query_value(value: Any) -> Any:
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
                json=call.json,
                headers=headers,
                timeout=options.timeout,
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
                json=call.json,
                headers=headers,
                timeout=options.timeout,
            )
        except httpx.TransportError as exc:
            if last:
                raise APIConnectionError(f"{call.method} {call.url()}: {exc!r}") from exc
            await asyncio.sleep(_wait(options, attempt, None))
            continue
        if _retryable(response) and not last:
            await asyncio.sleep(_wait(options, attempt, response))
            continue
        if response.is_error:
            raise error_for(response)
        return response
    raise AssertionError("unreachable")
