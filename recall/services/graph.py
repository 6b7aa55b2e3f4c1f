"""The multi_hop route: paths of current relations between the things the question names."""

from __future__ import annotations

import uuid
from datetime import datetime

from piper.provenance import AUTHORITY_ORDER, authority_rank

from .results import CONTESTED, CURRENT, Answer, Ask, Evidence, age_seconds

PATH_NAMESPACE = uuid.UUID("6f1d3c1e-5b7a-4f0e-9c43-2f6a1d0b8e57")


def _path_evidence(path, score: float, now: datetime) -> Evidence:
    from facts.fact_texts import humanize

    steps = [path.entities[0].name]
    for fact, entity in zip(path.facts, path.entities[1:], strict=True):
        steps.append(f"—{humanize(fact.predicate.name)}→ {entity.name}")
    order = AUTHORITY_ORDER
    weakest = min(path.facts, key=lambda f: authority_rank(f.authority, order))
    confidence = 1.0
    for fact in path.facts:
        confidence *= float(fact.confidence)
    contested = any(fact.open_contests for fact in path.facts)
    fact_ids = [str(f.pk) for f in path.facts]
    return Evidence(
        kind="path",
        id=str(uuid.uuid5(PATH_NAMESPACE, ",".join(fact_ids))),
        text=" ".join(steps),
        score=score,
        obj=path,
        signals={"hops": len(path.facts)},
        memory_status={
            "source": {
                "type": "fact_graph",
                "facts": fact_ids,
                "event_ids": [str(f.source_event_id) for f in path.facts],
            },
            "age_seconds": max(age_seconds(now, f.last_confirmed_at) for f in path.facts),
            "authority": weakest.authority,  # a chain is as strong as its weakest link
            "currentness": CONTESTED if contested else CURRENT,
            "confidence": round(confidence, 6),
            "hops": len(path.facts),
        },
    )


def route_multi_hop(ask: Ask) -> Answer:
    """Paths of current relations between the things the question names
    (either direction), or from the one thing it names."""
    from facts import selectors as facts

    named = ask.named
    entities = [m.entity for m in named]
    paths = []
    if len(entities) >= 2:
        for a, b in ((entities[0], entities[1]), (entities[1], entities[0])):
            paths += facts.graph_paths(
                agent=ask.agent, start=a, end=b, max_hops=3, valid_time=ask.now, limit=ask.limit
            )
    elif entities:
        paths = facts.graph_paths(
            agent=ask.agent, start=entities[0], max_hops=2, valid_time=ask.now, limit=ask.limit
        )
    paths.sort(key=lambda p: (len(p.facts), [e.name for e in p.entities]))
    evidence = [_path_evidence(p, round(1.0 / len(p.facts), 4), ask.now) for p in paths]
    evidence = evidence[: ask.limit]
    return Answer(
        evidence=evidence,
        candidates=[e.trace_entry() for e in evidence],
        details={"entities": [{"id": str(m.entity.pk), "name": m.alias} for m in named]},
    )
