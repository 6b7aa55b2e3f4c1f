"""Memory and AsyncMemory: every memory function, named as an agent thinks.

    memory = Memory("http://127.0.0.1:8000", api_key="pm_…")
    memory.facts.assert_("billing export", "deadline", "March 3")
    memory.facts.current("billing export").values          # ['March 3']
    block = memory.context(task="Ship the export", thread_id=thread.id)

Each resource method describes one call (method, path, body, answer model);
the client runs it — blocking in Memory, awaitable in AsyncMemory — so both
have the same surface. Lists page by cursor: `iter_*` methods follow `next`
lazily. `memory.with_options(timeout=2, max_retries=0)` is a view with other
options for the calls made through it. No request is made until a method is called.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

from . import models as m
from ._http import Call, Options, send, send_async

T = TypeVar("T", bound=m.ApiModel)


@dataclass(frozen=True)
class Spec(Generic[T]):
    """One call and the model its answer is read into (None: the JSON as it is)."""

    call: Call
    model: type[T] | None = None
    many: bool = False  # the answer is a list of `model`


def _body(**fields: Any) -> dict:
    return {k: v for k, v in fields.items() if v is not None}


def _spec(method, path, model=None, *, params=None, json=None, key=None, many=False, accept=None):
    call = Call(method, path, params=params, json=json, idempotency_key=key)
    if accept:
        call = Call(method, path, params=params, json=json, idempotency_key=key, accept=accept)
    return Spec(call, model, many)


class _Resource:
    def __init__(self, client: _Base) -> None:
        self._c = client


class Events(_Resource):
    def append(
        self, event_type: str, payload: dict, *, occurred_at: str, idempotency_key=None, **fields
    ):
        body = _body(event_type=event_type, payload=payload, occurred_at=occurred_at, **fields)
        return self._c._run(_spec("POST", "/events", m.Event, json=body, key=idempotency_key))

    def get(self, event_id: str):
        return self._c._run(_spec("GET", f"/events/{event_id}", m.Event))

    def iter(self, *, limit: int = 100, **filters):
        return self._c._pages(_spec("GET", "/events", m.Event, params={"limit": limit, **filters}))


class Facts(_Resource):
    def assert_(
        self,
        subject: str,
        predicate: str,
        value: Any = None,
        *,
        object_entity: str | None = None,
        idempotency_key: str | None = None,
        **fields,
    ):
        """State what is now true (valid_from, source_type, authority, confidence, …)."""
        body = _body(
            subject=subject, predicate=predicate, value=value, object_entity=object_entity, **fields
        )
        return self._c._run(_spec("POST", "/facts", m.FactWrite, json=body, key=idempotency_key))

    def current(self, subject: str, predicate: str | None = None):
        params = {"subject": subject, "predicate": predicate}
        return self._c._run(_spec("GET", "/facts/current", m.FactList, params=params))

    def as_of(self, subject: str, predicate: str | None, valid_time):
        params = {"subject": subject, "predicate": predicate, "valid_time": valid_time}
        return self._c._run(_spec("GET", "/facts/as-of", m.FactList, params=params))

    def chain(self, subject: str, predicate: str):
        params = {"subject": subject, "predicate": predicate}
        return self._c._run(_spec("GET", "/facts/chain", m.FactList, params=params))

    def get(self, fact_id: str):
        return self._c._run(_spec("GET", f"/facts/{fact_id}", m.Fact))

    def retract(self, fact_id: str, *, reason: str, idempotency_key: str | None = None):
        body = {"reason": reason}
        path = f"/facts/{fact_id}/retract"
        return self._c._run(_spec("POST", path, None, json=body, key=idempotency_key))


class Episodes(_Resource):
    def record(self, *, occurred_at: str, summary: str = "", idempotency_key=None, **fields):
        """Record what happened (session_id, actor, action, observation, outcome, entities…)."""
        body = _body(occurred_at=occurred_at, summary=summary, **fields)
        return self._c._run(_spec("POST", "/episodes", m.Episode, json=body, key=idempotency_key))

    def get(self, episode_id: str):
        return self._c._run(_spec("GET", f"/episodes/{episode_id}", m.Episode))

    def iter(self, *, limit: int = 100, **filters):
        params = {"limit": limit, **filters}
        return self._c._pages(_spec("GET", "/episodes", m.Episode, params=params))

    def search(self, query: str, *, limit: int = 10, **filters):
        params = {"q": query, "limit": limit, **filters}
        return self._c._run(_spec("GET", "/episodes/search", m.EpisodeSearch, params=params))


class Skills(_Resource):
    def create(self, name: str, *, idempotency_key: str | None = None, **definition):
        """A skill and its first version (purpose, trigger, parameter_schema, procedure, …)."""
        body = {"name": name, **definition}
        return self._c._run(_spec("POST", "/skills", m.Skill, json=body, key=idempotency_key))

    def get(self, skill_id: str):
        return self._c._run(_spec("GET", f"/skills/{skill_id}", m.Skill))

    def match(self, task: str, *, context: dict | None = None, limit: int = 5):
        body = {"task": task, "context": context or {}, "limit": limit}
        return self._c._run(_spec("POST", "/skills/match", m.SkillMatch, json=body))

    def execute(
        self, version_id: str, params: dict, *, wait: bool = True, idempotency_key=None, **fields
    ):
        path = f"/skills/versions/{version_id}/execute"
        body = {"params": params, **fields}
        return self._c._run(
            _spec("POST", path, m.Execution, params={"wait": wait}, json=body, key=idempotency_key)
        )

    def version(self, version_id: str):
        return self._c._run(_spec("GET", f"/skills/versions/{version_id}", None))


class Intentions(_Resource):
    def create(
        self, description: str, *, trigger_type: str = "time", idempotency_key=None, **fields
    ):
        """Commit to do something (due_at, not_before, rrule, trigger_spec, thread, …)."""
        body = _body(description=description, trigger_type=trigger_type, **fields)
        return self._c._run(
            _spec("POST", "/intentions", m.Intention, json=body, key=idempotency_key)
        )

    def get(self, intention_id: str):
        return self._c._run(_spec("GET", f"/intentions/{intention_id}", m.Intention))

    def iter(self, *, limit: int = 100, **filters):
        params = {"limit": limit, **filters}
        return self._c._pages(_spec("GET", "/intentions", m.Intention, params=params))

    def due(self, *, thread: str | None = None, limit: int = 100):
        """What has fired and waits, in the order it fired (an iterator over pages)."""
        params = {"thread": thread, "limit": limit}
        return self._c._pages(_spec("GET", "/intentions/due", m.Intention, params=params))

    def _move(self, intention_id, action, body, key):
        path = f"/intentions/{intention_id}/{action}"
        return self._c._run(_spec("POST", path, m.Intention, json=body, key=key))

    def start(self, intention_id: str, *, idempotency_key=None):
        return self._move(intention_id, "start", {}, idempotency_key)

    def complete(self, intention_id: str, *, evidence: Any = None, idempotency_key=None):
        return self._move(intention_id, "complete", _body(evidence=evidence), idempotency_key)

    def cancel(self, intention_id: str, *, reason: str = "", idempotency_key=None):
        return self._move(intention_id, "cancel", {"reason": reason}, idempotency_key)


class WorkingStates(_Resource):
    def thread(self, key: str, *, session_id: str = ""):
        """The thread named `key`, created if it is new."""
        body = {"key": key, "session_id": session_id}
        return self._c._run(_spec("POST", "/threads", m.Thread, json=body))

    def get(self, thread_id: str):
        return self._c._run(_spec("GET", f"/threads/{thread_id}/state", m.WorkingState))

    def checkpoint(
        self,
        thread_id: str,
        state: dict,
        *,
        based_on: int,
        session_id: str = "",
        idempotency_key=None,
    ):
        """A new version of the thread's working state (409 Conflict if `based_on` is stale)."""
        body = {"state": state, "based_on": based_on, "session_id": session_id}
        path = f"/threads/{thread_id}/state"
        return self._c._run(_spec("PUT", path, m.WorkingState, json=body, key=idempotency_key))

    def handover(
        self, thread_id: str, *, to_session: str, from_session: str = "", note: str = "", **kw
    ):
        body = {"to_session": to_session, "from_session": from_session, "note": note}
        path = f"/threads/{thread_id}/handover"
        key = kw.get("idempotency_key")
        return self._c._run(_spec("POST", path, m.Handover, json=body, key=key))

    def resume(self, thread_id: str, *, session_id: str, idempotency_key=None):
        body = {"session_id": session_id}
        path = f"/threads/{thread_id}/resume"
        return self._c._run(_spec("POST", path, m.Resume, json=body, key=idempotency_key))

    def acknowledge(self, thread_id: str, *, session_id: str, idempotency_key=None):
        body = {"session_id": session_id}
        path = f"/threads/{thread_id}/acknowledge"
        return self._c._run(_spec("POST", path, m.Handover, json=body, key=idempotency_key))


class Erasures(_Resource):
    def request(self, *, reason: str, dry_run: bool = True, idempotency_key=None, **selector):
        """Erase by event_ids, source_id, actor, subject, session_id or a time window
        (admin scope). A dry run (the default) lists what would go and removes nothing."""
        body = _body(reason=reason, dry_run=dry_run, **selector)
        model = m.ErasurePreview if dry_run else m.Erasure
        return self._c._run(_spec("POST", "/erasure", model, json=body, key=idempotency_key))

    def get(self, erasure_id: str):
        return self._c._run(_spec("GET", f"/erasure/{erasure_id}", m.Erasure))


class _Base:
    def __init__(self, base_url: str, api_key: str, options: Options, headers: dict | None):
        self.base_url, self._options = base_url.rstrip("/"), options
        self._headers = {"Authorization": f"Bearer {api_key}", **(headers or {})}
        self.events = Events(self)
        self.facts = Facts(self)
        self.episodes = Episodes(self)
        self.skills = Skills(self)
        self.intentions = Intentions(self)
        self.working_state = WorkingStates(self)
        self.erasure = Erasures(self)

    # The memory functions that are one call each.
    def agent(self):
        return self._run(_spec("GET", "/agent", m.Agent))

    def recall(
        self,
        query: str,
        *,
        route: str = "auto",
        limit: int = 10,
        filters: dict | None = None,
        context: dict | None = None,
    ):
        body = _body(query=query, route=route, limit=limit, filters=filters, context=context)
        return self._run(_spec("POST", "/recall", m.RecallAnswer, json=body))

    def recall_feedback(
        self,
        trace_id: str,
        *,
        used: list[str],
        outcome: str,
        failure_code: str | None = None,
        note: str = "",
        idempotency_key=None,
    ):
        body = _body(used=used, outcome=outcome, failure_code=failure_code, note=note)
        path = f"/recall/{trace_id}/feedback"
        return self._run(_spec("POST", path, m.Feedback, json=body, key=idempotency_key))

    def context(
        self,
        *,
        task: str = "",
        thread_id: str | None = None,
        session_id: str = "",
        tokens: int | None = None,
        characters: int | None = None,
        sections: list[str] | None = None,
        limits: dict | None = None,
        context: dict | None = None,
        as_text: bool = False,
    ):
        """What the next model call should see, packed to a budget (tokens by default).
        `as_text=True` returns the plain text alone."""
        budget = {"characters": characters} if characters else {"tokens": tokens or 2000}
        body = _body(
            task=task,
            thread_id=thread_id,
            session_id=session_id,
            budget=budget,
            sections=sections,
            limits=limits,
            context=context,
        )
        if as_text:
            spec = _spec(
                "POST", "/context", None, params={"format": "text"}, json=body, accept="text/plain"
            )
            return self._run(spec)
        return self._run(_spec("POST", "/context", m.ContextBlock, json=body))

    # ------------------------------------------------------------------ plumbing

    def _read(self, spec: Spec, response: httpx.Response):
        if "json" not in response.headers.get("content-type", ""):
            return response.text
        data = response.json()
        if spec.model is None:
            return data
        if spec.many:
            return [spec.model.model_validate(x) for x in data]
        result = spec.model.model_validate(data)
        result._response = response
        return result

    def _run(self, spec: Spec):
        raise NotImplementedError

    def _pages(self, spec: Spec):
        raise NotImplementedError


def _page_items(data: Any) -> tuple[list, str | None]:
    if isinstance(data, list):  # a list endpoint that does not page
        return data, None
    return data.get("results", []), data.get("next")


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
        _http: httpx.Client | None = None,
    ) -> None:
        super().__init__(base_url, api_key, Options(timeout, max_retries), headers)
        self._http = _http or httpx.Client(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    def with_options(self, *, timeout: float | None = None, max_retries: int | None = None):
        view = object.__new__(Memory)
        _Base.__init__(view, self.base_url, "", self._options, None)
        view._headers, view._http = self._headers, self._http
        view._options = self._options.with_(timeout=timeout, max_retries=max_retries)
        return view

    def _run(self, spec: Spec):
        return self._read(spec, send(self._http, spec.call, self._options))

    def _pages(self, spec: Spec) -> Iterator:
        call = spec.call
        while call is not None:
            data = send(self._http, call, self._options).json()
            items, link = _page_items(data)
            yield from (spec.model.model_validate(x) if spec.model else x for x in items)
            call = Call("GET", link) if link else None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncMemory(_Base):
    """The same surface, awaitable; `iter_*`/`due` are async iterators."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
        headers: dict | None = None,
    ) -> None:
        super().__init__(base_url, api_key, Options(timeout, max_retries), headers)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, transport=transport
        )

    def with_options(self, *, timeout: float | None = None, max_retries: int | None = None):
        view = object.__new__(AsyncMemory)
        _Base.__init__(view, self.base_url, "", self._options, None)
        view._headers, view._http = self._headers, self._http
        view._options = self._options.with_(timeout=timeout, max_retries=max_retries)
        return view

    async def _run(self, spec: Spec):
        return self._read(spec, await send_async(self._http, spec.call, self._options))

    async def _pages(self, spec: Spec) -> AsyncIterator:
        call = spec.call
        while call is not None:
            data = (await send_async(self._http, call, self._options)).json()
            items, link = _page_items(data)
            for x in items:
                yield spec.model.model_validate(x) if spec.model else x
            call = Call("GET", link) if link else None

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
