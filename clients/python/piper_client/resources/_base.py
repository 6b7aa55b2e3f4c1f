"""How a resource method is written: it describes one request, a decorator makes it.

    @operation
    def get(self, intention_id: str) -> m.IntentionDetail:
        return get(f"/intentions/{intention_id}", m.IntentionDetail)

A method is annotated with what its caller gets back (in AsyncMemory, awaits),
not with the Request it builds; the decorator makes that true.

`@operation` runs the request through the client (blocking in Memory,
awaitable in AsyncMemory) and adds two keyword arguments to the method:
`timeout=` (seconds, this call only) and `idempotency_key=` (writes only: the
key to send instead of a fresh uuid4, e.g. one the caller stores to retry
later). `@paginated` returns an iterator over every item of a cursor-paged
list, fetching the next page only when the items run out.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._http import Call
from ..models import ApiModel

if TYPE_CHECKING:
    from ..client import _Base


@dataclass(frozen=True)
class Request:
    """One call of the API and the model its answer is read into (None: no body)."""

    method: str
    path: str  # below /api/v1
    model: type[ApiModel] | None
    params: dict | None = None
    json: Any = None
    accept: str = "application/json"

    def call(self, *, timeout: float | None = None, idempotency_key: str | None = None) -> Call:
        return Call(
            self.method,
            self.path,
            params=self.params,
            json=self.json,
            idempotency_key=idempotency_key,
            accept=self.accept,
            timeout=timeout,
        )


def body(**fields: Any) -> dict:
    """A JSON body without the arguments left out (None), so the API's defaults apply."""
    return {name: value for name, value in fields.items() if value is not None}


def get(path: str, model: type[ApiModel] | None, **params: Any) -> Request:
    return Request("GET", path, model, params=body(**params) or None)


def post(path: str, model: type[ApiModel] | None, json: Any = None, **params: Any) -> Request:
    return Request("POST", path, model, params=body(**params) or None, json=json)


def put(path: str, model: type[ApiModel] | None, json: Any = None) -> Request:
    return Request("PUT", path, model, json=json)


def patch(path: str, model: type[ApiModel] | None, json: Any = None) -> Request:
    return Request("PATCH", path, model, json=json)


def delete(path: str) -> Request:
    return Request("DELETE", path, None)


def operation(describe: Callable[..., Request]) -> Callable[..., Any]:
    @functools.wraps(describe)
    def method(self, *args, timeout=None, idempotency_key=None, **kwargs):
        request = describe(self, *args, **kwargs)
        call = request.call(timeout=timeout, idempotency_key=idempotency_key)
        return self._client._run(call, request.model)

    method.paginated = False
    return method


def paginated(describe: Callable[..., Request]) -> Callable[..., Any]:
    @functools.wraps(describe)
    def method(self, *args, timeout=None, **kwargs):
        request = describe(self, *args, **kwargs)
        return self._client._pages(request.call(timeout=timeout), request.model)

    method.paginated = True
    return method


class Resource:
    """A group of calls about one kind of memory (memory.facts, memory.skills, …)."""

    def __init__(self, client: _Base) -> None:
        self._client = client
