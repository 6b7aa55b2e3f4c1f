"""Memory and AsyncMemory: every memory function of the API, named as an agent thinks.

    with Memory("http://127.0.0.1:8000", api_key="pm_…") as memory:
        memory.facts.assert_("billing export", "deadline", "March 3")
        memory.facts.current("billing export").values          # ['March 3']
        for intention in memory.intentions.due():               # follows the pages
            memory.intentions.complete(intention.id)

Both clients share one surface (_Base): each resource method describes a
request (resources/_base.py); Memory runs it blocking, AsyncMemory awaitable.
The constructor makes no request.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx

from . import models as m
from . import resources as r
from ._http import Call, Options, ThreadedTransport, send, send_async
from .resources._base import body, get, operation, post


class _Base:
    """The surface both clients share; subclasses say how a call is run."""

    def __init__(self, base_url: str, api_key: str, options: Options, headers: dict | None):
        self.base_url, self._options = base_url.rstrip("/"), options
        self._headers = {"Authorization": f"Bearer {api_key}", **(headers or {})}
        self._attach_resources()

    def _attach_resources(self) -> None:
        self.events = r.Events(self)
        self.sources = r.Sources(self)
        self.facts = r.Facts(self)
        self.entities = r.Entities(self)
        self.predicates = r.Predicates(self)
        self.episodes = r.Episodes(self)
        self.skills = r.Skills(self)
        self.intentions = r.Intentions(self)
        self.webhook = r.Webhook(self)
        self.working_state = r.WorkingStates(self)
        self.erasure = r.Erasures(self)
        self.retention_policies = r.RetentionPolicies(self)
        self.consolidation = r.Consolidation(self)

    @property
    def _client(self) -> _Base:  # the memory functions below are their own resource
        return self

    def with_options(self, *, timeout: float | None = None, max_retries: int | None = None):
        """This client with other options for the calls made through what it returns.
        It shares the connection pool; closing either closes both."""
        view = copy.copy(self)
        view._options = self._options.with_(timeout=timeout, max_retries=max_retries)
        view._attach_resources()
        return view

    # ------------------------------------------------- the memory functions of one call

    @operation
    def agent(self) -> m.Agent:
        """Who this key speaks for, and its scopes."""
        return get("/agent", m.Agent)

    @operation
    def recall(
        self,
        query: str,
        *,
        route: str | None = None,
        limit: int | None = None,
        filters: dict | None = None,
        context: dict | None = None,
    ) -> m.RecallAnswer:
        """Ask memory one question; it picks the memory that answers (route="auto"), or
        the one named: current_fact, what_happened, how_to, what_to_do, source, multi_hop.
        The answer's id is the trace to give feedback on."""
        question = body(query=query, route=route, limit=limit, filters=filters, context=context)
        return post("/recall", m.RecallAnswer, question)

    @operation
    def recall_feedback(
        self,
        trace_id: str,
        *,
        outcome: str,
        used: list[str] | None = None,
        failure_code: str | None = None,
        note: str | None = None,
        stale: bool | None = None,
    ) -> m.Feedback:
        """How a recall answer worked out: outcome "success", "failure" or "partial", the
        evidence ids used, for a failure its code (R0-R3, A0, U0), and stale=True when it
        showed a value as current that was no longer true. Any read's trace takes it too:
        a search's, lookup's or match's id is its raw_response.headers["Piper-Trace-Id"]."""
        feedback = body(
            outcome=outcome, used=used, failure_code=failure_code, note=note, stale=stale
        )
        return post(f"/recall/{trace_id}/feedback", m.Feedback, feedback)

    @operation
    def look_decision(
        self,
        task: str,
        *,
        looked: bool,
        needed: bool | None = None,
        trace: str | None = None,
        session_id: str | None = None,
        note: str | None = None,
    ) -> m.LookDecision:
        """Say whether you looked in memory before acting on `task` (with the read's trace
        id when you did), and afterwards, when you know, whether you needed to."""
        decision = body(
            task=task, looked=looked, needed=needed, trace=trace, session_id=session_id, note=note
        )
        return post("/recall/decisions", m.LookDecision, decision)

    @operation
    def carry_over(self, *, window_days: int | None = None) -> m.CarryOver:
        """This agent's live carry-over (suite H) over the last window_days (admin scope)."""
        return get("/carry-over", m.CarryOver, window_days=window_days)

    @operation
    def recall_trace(self, trace_id: str) -> m.RecallTrace:
        """What one recall considered, returned and was told afterwards."""
        return get(f"/recall/{trace_id}", m.RecallTrace)

    @operation
    def context(
        self,
        *,
        task: str | None = None,
        thread_id: str | None = None,
        session_id: str | None = None,
        tokens: int | None = None,
        characters: int | None = None,
        sections: list[str] | None = None,
        limits: dict | None = None,
        context: dict | None = None,
        as_text: bool = False,
    ) -> m.ContextBlock:
        """What the next model call should see, packed to a budget (2000 tokens unless
        told). as_text=True answers the block's plain text alone (a str)."""
        budget = {"characters": characters} if characters else {"tokens": tokens or 2000}
        request = body(
            task=task,
            thread_id=thread_id,
            session_id=session_id,
            budget=budget,
            sections=sections,
            limits=limits,
            context=context,
        )
        if as_text:
            plain = post("/context", None, request, format="text")
            return replace(plain, accept="text/plain")
        return post("/context", m.ContextBlock, request)

    # ---------------------------------------------------------------- the plumbing

    def _run(self, call: Call, model: type[m.ApiModel] | None) -> Any:
        raise NotImplementedError

    def _pages(self, call: Call, model: type[m.ApiModel] | None) -> Any:
        raise NotImplementedError


def _read(response: httpx.Response, model: type[m.ApiModel] | None) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    if "json" not in response.headers.get("content-type", ""):
        return response.text
    data = response.json()
    if model is None:
        return data
    result = model.model_validate(data)
    result._response = response
    return result


def _page(call: Call, data: Any) -> tuple[list, Call | None]:
    """A page's items and the call for the next page (None on the last)."""
    if isinstance(data, list):  # a list the API does not page
        return data, None
    link = data.get("next")
    # The link's query (filters, limit and the cursor) is sent to the same path,
    # so a service behind a proxy that sees another host still pages right.
    next_call = replace(call, params=dict(parse_qsl(urlsplit(link).query))) if link else None
    return data.get("results", []), next_call


def _item(model: type[m.ApiModel] | None, data: Any) -> Any:
    return model.model_validate(data) if model else data


class Memory(_Base):
    """The blocking client. Use it as a context manager, or call close()."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        headers: dict | None = None,
    ) -> None:
        super().__init__(base_url, api_key, Options(timeout, max_retries), headers)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    def _run(self, call: Call, model: type[m.ApiModel] | None) -> Any:
        return _read(send(self._http, call, self._options), model)

    def _pages(self, call: Call, model: type[m.ApiModel] | None) -> Iterator:
        next_call: Call | None = call
        while next_call is not None:
            items, next_call = _page(next_call, send(self._http, next_call, self._options).json())
            yield from (_item(model, item) for item in items)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMemory(_Base):
    """The same surface, awaitable; list methods are async iterators (`async for`).

    `transport` may be an async transport, or a blocking one such as
    httpx.WSGITransport, which then runs in a worker thread."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | httpx.BaseTransport | None = None,
        headers: dict | None = None,
    ) -> None:
        super().__init__(base_url, api_key, Options(timeout, max_retries), headers)
        if isinstance(transport, httpx.BaseTransport):
            transport = ThreadedTransport(transport)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    async def _run(self, call: Call, model: type[m.ApiModel] | None) -> Any:
        return _read(await send_async(self._http, call, self._options), model)

    async def _pages(self, call: Call, model: type[m.ApiModel] | None) -> AsyncIterator:
        next_call: Call | None = call
        while next_call is not None:
            response = await send_async(self._http, next_call, self._options)
            items, next_call = _page(next_call, response.json())
            for item in items:
                yield _item(model, item)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
