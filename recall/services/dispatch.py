"""Dispatch: check the question, pick its route, ask that route's store, write the trace."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from piper.api.serializers import api_datetime
from piper.errors import InvalidInput
from piper.tenancy.models import Agent

from .. import router
from ..models import RetrievalTrace, Route
from .episodes import route_source, route_what_happened
from .facts import route_current_fact
from .graph import route_multi_hop
from .inputs import RecallFilters, check_filters, check_limit, check_query
from .intentions import route_what_to_do
from .privacy import cleared
from .results import Answer, Ask, Evidence, QueryVector, RecallResult
from .skills import route_how_to

MAX_TRACE_CANDIDATES = 50

# Where a classified question goes when its route's store had no candidate at all.
FALLBACK: dict[str, str] = {
    Route.CURRENT_FACT: Route.WHAT_HAPPENED,
    Route.MULTI_HOP: Route.WHAT_HAPPENED,
}

HANDLERS: dict[str, Callable[[Ask], Answer]] = {
    Route.CURRENT_FACT: route_current_fact,
    Route.WHAT_HAPPENED: route_what_happened,
    Route.HOW_TO: route_how_to,
    Route.WHAT_TO_DO: route_what_to_do,
    Route.SOURCE: route_source,
    Route.MULTI_HOP: route_multi_hop,
}


def group_by_session(evidence: Sequence[Evidence]) -> list[dict[str, Any]]:
    """Episodes grouped by session, each group in time order; groups in order
    of their best evidence."""
    groups: dict[str, dict[str, Any]] = {}
    for e in evidence:
        if e.kind != "episode":
            continue
        group = groups.setdefault(e.session_id, {"session_id": e.session_id, "items": []})
        group["items"].append(e)
    out = []
    for group in groups.values():
        items = sorted(group["items"], key=lambda e: (e.occurred_at, e.id))
        out.append(
            {
                "session_id": group["session_id"],
                "evidence": [e.id for e in items],
                "first_at": api_datetime(items[0].occurred_at),
                "last_at": api_datetime(items[-1].occurred_at),
                "best_score": max(e.score for e in items),
            }
        )
    return out


def recall(
    *,
    agent: Agent,
    query: str,
    route: str = router.AUTO,
    limit: int = 10,
    filters: RecallFilters | dict | None = None,
    context: dict | None = None,
    scopes: Sequence[str] | None = None,
    now: datetime | None = None,
    clearance: str | None = None,
) -> RecallResult:
    """Answer `query` from the memory its route names, and trace it.

    `route` is one of router.ALLOWED: "auto" classifies (rules, then the
    embedding prototypes when no rule matches); any other value is taken as
    given. A classified current_fact or multi_hop question whose store had no
    candidate at all is answered from episodes instead (decision.fallback).
    Raises InvalidInput for an empty or huge query, an unknown route,
    a limit outside 1..50, an unknown filter or a window that ends before it
    starts — before anything is written. Writes exactly one RetrievalTrace.
    Abstains ("no supporting memory") when the store has no evidence above
    its threshold; near misses are then the best of what it had. `now`
    defaults to the agent's clock (piper.tenancy.clock.now_for: simulated for a
    battery agent, else the wall clock).
    """
    started = time.perf_counter()
    query = check_query(query)
    route = router.check_route(route)
    limit = check_limit(limit)
    filters = check_filters(filters)
    if context is not None and not isinstance(context, dict):
        raise InvalidInput("context must be a JSON object", details={"context": ["not an object"]})
    if now is None:
        # The engine's now for this agent: its simulated clock (the battery's),
        # else the wall clock. Ages, recency and "valid now" are measured from it.
        from piper.tenancy.clock import now_for

        now = now_for(agent.pk)
    vector = QueryVector(query)
    if route == router.AUTO:
        decision = router.classify_by_rules(query)
        if decision is None:
            decision = router.classify_by_prototypes(vector.get(), vector.embedder)
    else:
        decision = router.explicit(route)
    ask = Ask(agent, query, vector, limit, filters, context or {}, scopes, now)
    answer = None
    if router.may_ask_an_attribute(decision):
        # "What is due for the billing export?": one known subject named and one
        # of its stated attributes asked is a current fact, whatever else the
        # words suggest (what_to_do's "is due"); multi-hop needs two subjects.
        one_subject = len({m.entity.pk for m in ask.named}) == 1
        attempt = route_current_fact(ask) if one_subject else None
        if attempt is not None and not attempt.abstained:
            answer = attempt
            decision = dataclasses.replace(
                decision,
                route=Route.CURRENT_FACT,
                rule="current_fact.one_subject_attribute",
                overridden=decision.route,
            )
    if answer is None:
        answer = HANDLERS[decision.route](ask)
    fallback = FALLBACK.get(decision.route)
    if fallback and not decision.explicit and not answer.candidates:
        # A classified route whose store had nothing at all to consider: what
        # happened is the broadest memory (the question may be about a
        # conversation, not a recorded fact). An explicit route is never overridden.
        answer = HANDLERS[fallback](ask)
        decision = dataclasses.replace(decision, fallback=fallback)
    # What the key may not read is dropped before anything is decided or traced.
    answer.evidence, withheld = cleared(answer.evidence, clearance)
    answer.near_misses, withheld_near = cleared(answer.near_misses, clearance)
    if withheld or withheld_near:
        answer.details = {**answer.details, "withheld": withheld + withheld_near}
        answer.candidates = [
            c
            for c in answer.candidates
            if str(c.get("id")) in {e.id for e in answer.evidence + answer.near_misses}
        ]
        if not answer.evidence:
            answer.abstained = True
    abstained = answer.abstained if answer.abstained is not None else not answer.evidence
    # An abstaining store's evidence is only ever a near miss.
    evidence = [] if abstained else answer.evidence
    near = (answer.evidence if abstained else []) + answer.near_misses
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    trace = RetrievalTrace.objects.create(
        agent=agent,
        query=query,
        route=decision.route,
        explicit=decision.explicit,
        decision=decision.as_dict() | {"details": answer.details},
        filters=filters.as_dict(),
        candidates=answer.candidates[:MAX_TRACE_CANDIDATES],
        returned=[{"kind": e.kind, "id": e.id, "score": e.score} for e in evidence],
        abstained=abstained,
        latency_ms=latency_ms,
        embedding_model=vector.model,
    )
    return RecallResult(
        trace=trace,
        decision=decision,
        evidence=evidence,
        near_misses=near[:limit],
        groups=group_by_session(evidence),
        abstained=abstained,
        latency_ms=latency_ms,
        details=answer.details,
    )
