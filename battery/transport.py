"""How the battery reaches the service: one small interface, three transports.

* InProcessTransport sends requests through django.test.Client: the full WSGI
  stack (middleware, authentication, throttling, views) in this process.
* HttpTransport sends them over the network with httpx, to a running server
  (`battery run --base-url http://127.0.0.1:8000`).
* SdkTransport sends them through the Python SDK's own sending code
  (piper_client: its Idempotency-Key on writes, its typed errors), in process
  or to `--base-url` (`battery run --transport sdk`).

Items only see ApiClient, so a suite cannot tell which one it drives.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.test import Client

from piper.tenancy.models import Agent

IN_PROCESS = "in-process"


class TransportFailure(Exception):
    """The request never got an answer (connection refused, timeout, …)."""


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: Any  # the parsed JSON, or None when the answer was not JSON
    headers: Mapping[str, str]  # case-insensitive
    text: str

    @classmethod
    def of(cls, response: httpx.Response) -> ApiResponse:
        return cls(
            status=response.status_code,
            body=_parse(response.text, response.headers.get("content-type", "")),
            headers=response.headers,
            text=response.text,
        )

    def error_code(self) -> str | None:
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return self.body["error"].get("code")
        return None

    def describe(self, *, limit: int = 400) -> str:
        text = self.text if len(self.text) <= limit else self.text[:limit] + "…"
        return f"HTTP {self.status} {text}"


def _parse(text: str, content_type: str) -> Any:
    if "json" not in content_type or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


class Transport(Protocol):
    target: str

    def request(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> ApiResponse: ...

    def close(self) -> None: ...


def allowed_host() -> str:
    """A Host header the service accepts, so the request passes Django's host check."""
    for host in settings.ALLOWED_HOSTS:
        if host == "*":
            return "testserver"
        return host.lstrip(".")  # ".example.com" also allows "example.com"
    return "localhost"  # DEBUG with no ALLOWED_HOSTS accepts localhost


class InProcessTransport:
    target = IN_PROCESS

    def __init__(self) -> None:
        # raise_request_exception=False: a crashing view answers 500, as it would on the wire.
        self._client = Client(HTTP_HOST=allowed_host(), raise_request_exception=False)
        # The battery provokes 4xx on purpose; Django would log a warning for each.
        self._request_logger = logging.getLogger("django.request")
        self._previous_level = self._request_logger.level
        self._request_logger.setLevel(logging.ERROR)

    def request(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> ApiResponse:
        data = "" if body is None else json.dumps(body)
        response = self._client.generic(
            method.upper(),
            path,
            data=data,
            content_type="application/json",
            headers=dict(headers or {}),
        )
        text = response.content.decode("utf-8", errors="replace")
        return ApiResponse(
            status=response.status_code,
            body=_parse(text, response.get("Content-Type", "")),
            headers=response.headers,
            text=text,
        )

    def close(self) -> None:
        self._request_logger.setLevel(self._previous_level)


class HttpTransport:
    def __init__(self, *, base_url: str, timeout: float = 30.0) -> None:
        self.target = base_url.rstrip("/")
        self._client = httpx.Client(base_url=self.target, timeout=timeout)
        # httpx logs every request at INFO; the battery prints its own progress.
        self._httpx_logger = logging.getLogger("httpx")
        self._previous_level = self._httpx_logger.level
        self._httpx_logger.setLevel(logging.WARNING)

    def request(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> ApiResponse:
        try:
            response = self._client.request(
                method.upper(),
                path,
                content=None if body is None else json.dumps(body).encode(),
                headers={
                    **({"Content-Type": "application/json"} if body is not None else {}),
                    **(headers or {}),
                },
            )
        except httpx.TransportError as exc:
            raise TransportFailure(f"{method.upper()} {self.target}{path}: {exc!r}") from exc
        return ApiResponse.of(response)

    def close(self) -> None:
        self._client.close()
        self._httpx_logger.setLevel(self._previous_level)


class SdkTransport:
    """Every request through piper_client's send(): the SDK's headers (a fresh
    Idempotency-Key on each write the item does not key itself) and its typed
    errors, turned back into the answer an item reads. No retries: an item that
    provokes a 429 or 503 must see it, as over HTTP."""

    def __init__(self, *, base_url: str | None = None, timeout: float = 30.0) -> None:
        from piper_client._http import Options

        self._options = Options(timeout=timeout, max_retries=0)
        if base_url:
            self.target = f"sdk {base_url.rstrip('/')}"
            self._client = httpx.Client(base_url=base_url.rstrip("/"))
            self._in_process = False
        else:
            from django.core.wsgi import get_wsgi_application

            self.target = f"sdk {IN_PROCESS}"
            self._client = httpx.Client(
                base_url=f"http://{allowed_host()}",
                transport=httpx.WSGITransport(app=get_wsgi_application()),
            )
            self._in_process = True
        self._request_logger = logging.getLogger("django.request")
        self._previous_level = self._request_logger.level
        self._request_logger.setLevel(logging.ERROR)

    def request(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> ApiResponse:
        from piper_client._http import Call, send
        from piper_client.errors import APIConnectionError, PiperError

        call = Call(
            method.upper(),
            f"{self._client.base_url}{path}",  # absolute: the SDK adds no prefix
            json=body,
            extra_headers=dict(headers or {}),
        )
        try:
            with _connections_kept(self._in_process):
                response = send(self._client, call, self._options)
        except APIConnectionError as exc:
            raise TransportFailure(str(exc)) from exc
        except PiperError as exc:
            response = exc.response
        return ApiResponse.of(response)

    def close(self) -> None:
        self._client.close()
        self._request_logger.setLevel(self._previous_level)


@contextmanager
def _connections_kept(in_process: bool):
    """In process, the request must not close this thread's database connection at
    its end (Django's request signals do): the battery goes on using it, maybe in
    a transaction. django.test.Client does the same."""
    if not in_process:
        yield
        return
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def transport_open(*, base_url: str | None, via: str | None = None) -> Transport:
    """`via` sdk: through the Python SDK (in process, or to base_url); otherwise
    over HTTP to base_url, or in process."""
    if via == "sdk":
        return SdkTransport(base_url=base_url)
    return HttpTransport(base_url=base_url) if base_url else InProcessTransport()


class ApiClient:
    """Requests as one agent: every call carries that agent's API key."""

    def __init__(self, *, transport: Transport, agent: Agent, raw_key: str) -> None:
        self.transport, self.agent, self._raw_key = transport, agent, raw_key

    def request(
        self, method: str, path: str, *, body: Any = None, headers: Mapping[str, str] | None = None
    ) -> ApiResponse:
        sent = {"Authorization": f"Bearer {self._raw_key}", **(headers or {})}
        return self.transport.request(method, path, body=body, headers=sent)

    def get(self, path: str) -> ApiResponse:
        return self.request("GET", path)

    def post(
        self, path: str, body: Any, *, headers: Mapping[str, str] | None = None
    ) -> ApiResponse:
        return self.request("POST", path, body=body, headers=headers)

    def follow(self, url: str) -> ApiResponse:
        """GET a link the service returned (pagination's absolute `next`), on this transport."""
        parts = urlsplit(url)
        return self.get(f"{parts.path}?{parts.query}" if parts.query else parts.path)
