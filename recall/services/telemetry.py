"""Telemetry an agent's reads leave behind, beyond recall's own traces (suite H).

* Every direct read (episode and source search, fact lookups, skill match)
  is a RetrievalTrace too, so "retrieved but not used" is measured on every
  read path, not only on recall (read_trace_record, the piper.reads receiver).
* The "do I need to look?" decision: the agent says whether it looked in
  memory before acting and, when it knows, whether it needed to
  (look_decision_record).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from piper.errors import InvalidInput, NotFound
from piper.tenancy.models import Agent

from ..models import READ_ROUTES, LookDecision, RetrievalTrace

MAX_TASK_CHARS = 2000
MAX_QUERY_CHARS = 2000
_READ_ROUTES = {route for route, _ in READ_ROUTES}


def read_trace_record(
    *,
    agent: Agent,
    route: str,
    query: str,
    filters: dict[str, Any],
    returned: Sequence[dict[str, Any]],
    latency_ms: float,
    **_signal: Any,
) -> uuid.UUID | None:
    """Record one direct read as a trace; its id, or None when read traces are
    off (PIPER_READ_TRACES) or the reader is not an agent."""
    if not settings.PIPER_READ_TRACES or not isinstance(agent, Agent):
        return None
    if route not in _READ_ROUTES:
        raise ValueError(f"{route!r} is not a read route")
    with telemetry_transaction():
        trace = _read_trace_insert(agent, route, query, filters, returned, latency_ms)
    return trace.pk


@contextlib.contextmanager
def telemetry_transaction() -> Iterator[None]:
    """A transaction for a read's trace. Telemetry, not evidence: a crash may lose
    the last few traces, so the read does not wait for the WAL to reach the disk
    (one fsync per read). The setting lasts to the end of the outermost
    transaction, which is a read's own."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def _read_trace_insert(agent, route, query, filters, returned, latency_ms) -> RetrievalTrace:
    return RetrievalTrace.objects.create(
        agent=agent,
        query=(query.strip() or route)[:MAX_QUERY_CHARS],
        route=route,
        explicit=True,  # the agent chose the store by choosing the endpoint
        decision={
            "chosen": route,
            "explicit": True,
            "method": "explicit",
            "rule": None,
            "matched": [],
            "scores": {},
            "nearest": None,
            "fallback": None,
        },
        filters=filters,
        candidates=[],
        returned=[
            {"kind": r["kind"], "id": str(r["id"]), "score": r.get("score")} for r in returned
        ],
        abstained=not returned,
        latency_ms=latency_ms,
    )


def look_decision_record(
    *,
    agent: Agent,
    task: str,
    looked: bool,
    needed: bool | None = None,
    trace_id: uuid.UUID | None = None,
    session_id: str = "",
    note: str = "",
) -> LookDecision:
    """Record whether the agent looked in memory before acting on `task`.

    InvalidInput for an empty task, or a trace given when it did not look;
    NotFound for a trace that is not this agent's (nothing written)."""
    if not isinstance(task, str) or not task.strip():
        raise InvalidInput("task: say what the decision was about", details={"task": ["required"]})
    if trace_id is not None and not looked:
        raise InvalidInput(
            "trace: a decision not to look has no read; drop trace or set looked to true",
            details={"trace": ["only when looked is true"]},
        )
    with transaction.atomic():
        trace = None
        if trace_id is not None:
            trace = RetrievalTrace.objects.filter(agent=agent, pk=trace_id).first()
            if trace is None:
                raise NotFound(f"trace {trace_id} not found")
        return LookDecision.objects.create(
            agent=agent,
            task=task.strip()[:MAX_TASK_CHARS],
            looked=looked,
            needed=needed,
            trace=trace,
            session_id=session_id,
            note=note,
        )
