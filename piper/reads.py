"""Telemetry of the direct read endpoints: what an agent read, for suite H.

Recall and the context call write a RetrievalTrace themselves. The endpoints
an agent can call instead (episode and source search, fact lookups, skill
match) live in apps below recall, which owns the traces, so they announce
each read on the `read_served` signal and the recall app records it
(recall.traces). The trace's id goes back in the `Piper-Trace-Id`
response header: the agent sends feedback on it (which results it used)
like on a recall.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from django.dispatch import Signal

# kwargs: agent, route, query, filters, returned ([{kind, id, score}]), latency_ms.
# A receiver returns the trace's id (or None when it records nothing).
read_served = Signal()

TRACE_HEADER = "Piper-Trace-Id"


def read_announce(
    response,
    *,
    agent,
    route: str,
    query: str,
    returned: Sequence[dict[str, Any]],
    started: float,
    filters: dict[str, Any] | None = None,
):
    """Announce one read (started: its time.perf_counter() at the start) and
    put the trace's id on the response. Returns the response."""
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    for _receiver, trace_id in read_served.send(
        sender=route,
        agent=agent,
        route=route,
        query=query,
        filters=filters or {},
        returned=list(returned),
        latency_ms=latency_ms,
    ):
        if trace_id is not None:
            response[TRACE_HEADER] = str(trace_id)
    return response
