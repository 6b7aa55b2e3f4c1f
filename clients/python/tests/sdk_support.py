"""What the SDK tests share: an agent with keys, and clients that reach the real
service in this process (Django's WSGI app through httpx.WSGITransport).

The service answers on the same database the test uses, outside the test's
transaction, so the tests that use these commit (django_db(transaction=True)).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx
from piper_client import AsyncMemory, Memory

from piper.tenancy.models import Agent, Scope
from piper.tenancy.services import agent_create, api_key_create

NOW = datetime.now(UTC).replace(microsecond=0)


@dataclass
class Keys:
    agent: Agent
    write: str  # read + write
    read: str  # read only
    admin: str  # read + write + admin

    def key(self, *, rate_per_minute: int | None = None) -> str:
        _, raw = api_key_create(
            agent=self.agent,
            name=f"k-{uuid.uuid4().hex[:6]}",
            scopes=[Scope.READ, Scope.WRITE],
            rate_per_minute=rate_per_minute,
        )
        return raw


def make_keys(name: str | None = None) -> Keys:
    agent = agent_create(name=name or f"sdk-{uuid.uuid4().hex[:8]}")
    raw = {}
    for label, scopes in {
        "write": [Scope.READ, Scope.WRITE],
        "read": [Scope.READ],
        "admin": [Scope.READ, Scope.WRITE, Scope.ADMIN],
    }.items():
        _, raw[label] = api_key_create(agent=agent, name=label, scopes=scopes)
    return Keys(agent, **raw)


def wsgi_transport() -> httpx.WSGITransport:
    from django.core.wsgi import get_wsgi_application

    return httpx.WSGITransport(app=get_wsgi_application())


def in_process(api_key: str, **options) -> Memory:
    return Memory("http://testserver", api_key, transport=wsgi_transport(), **options)


def in_process_async(api_key: str, **options) -> AsyncMemory:
    return AsyncMemory("http://testserver", api_key, transport=wsgi_transport(), **options)


def sent(memory: Memory | AsyncMemory) -> list[httpx.Request]:
    """Every request the client sends from now on (its retries too), in order."""
    requests: list[httpx.Request] = []

    def record(request: httpx.Request) -> None:
        requests.append(request)

    async def record_async(request: httpx.Request) -> None:
        requests.append(request)

    hook = record_async if isinstance(memory, AsyncMemory) else record
    memory._http.event_hooks["request"].append(hook)
    return requests
