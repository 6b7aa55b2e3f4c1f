"""Session context for episode search: an episode is read with its neighbours.

In a conversation or a working session the evidence for a question is often
spread over adjacent episodes — a question and its answer, "take a look at
this" and the photo, a step and its outcome. Ranked alone, the turn that holds
the answer may share no word with the question while its neighbour does.

`session_neighbours` finds, for candidate episodes, the episode just before
and just after each in its session (same agent and session_id, by
occurred_at then id; the (agent, session_id, occurred_at) index answers it),
under the search's own filters, with each neighbour's cosine distance to the
query. `spread` then gives every candidate a share of its best neighbour's
value of a signal: value + weight × max(neighbour's value − floor, 0).

On LoCoMo (bench/locomo_explore.py) spreading the text and vector signals to
the adjacent turns, and bringing those turns in as candidates, is worth about
+0.1 evidence R@10 (docs/benchmarks.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

# Turns on each side a candidate lends its signals to (and brings in).
CONTEXT_RADIUS = 1


def session_neighbours(
    *,
    table: str,
    where_sql: str,
    params: Mapping[str, Any],
    ids: Sequence[uuid.UUID],
    vector_literal: str | None,
    cursor,
    columns: Sequence[str] = ("id",),
) -> tuple[dict[uuid.UUID, list[uuid.UUID]], dict[uuid.UUID, tuple[tuple, float | None]]]:
    """(candidate id -> its neighbours' ids, neighbour id -> (its `columns`,
    its cosine distance to the query or None)), in one statement.

    `where_sql` (on alias e) and `params` are the search's conditions — the
    agent and every filter — so a neighbour is always a row the search could
    return. Candidates without a session_id have no neighbours.
    """
    if not ids:
        return {}, {}
    distance = "e.embedding <=> %(ctx_qv)s::vector" if vector_literal else "NULL::float8"
    sides = []
    for op, order in (("<", "DESC"), (">", "ASC")):
        sides.append(
            f"""(SELECT {", ".join(f"e.{c}" for c in columns)}, {distance} AS distance
                  FROM {table} e
                 WHERE {where_sql} AND e.session_id = c.session_id
                   AND (e.occurred_at, e.id) {op} (c.occurred_at, c.id)
                 ORDER BY e.occurred_at {order}, e.id {order} LIMIT %(ctx_radius)s)"""
        )
    sql = f"""
WITH c AS (
    SELECT e.id, e.session_id, e.occurred_at FROM {table} e
     WHERE e.id = ANY(%(ctx_ids)s::uuid[]) AND e.session_id <> ''
)
SELECT c.id, n.*
  FROM c CROSS JOIN LATERAL ({" UNION ALL ".join(sides)}) n"""
    cursor.execute(
        sql,
        {
            **params,
            "ctx_ids": list(ids),
            "ctx_qv": vector_literal,
            "ctx_radius": CONTEXT_RADIUS,
        },
    )
    id_at = list(columns).index("id")
    neighbours: dict[uuid.UUID, list[uuid.UUID]] = {}
    rows: dict[uuid.UUID, tuple[tuple, float | None]] = {}
    for of_id, *row, dist in cursor.fetchall():
        neighbours.setdefault(of_id, []).append(row[id_at])
        rows[row[id_at]] = (tuple(row), None if dist is None else float(dist))
    return neighbours, rows


def symmetric(neighbours: Mapping[uuid.UUID, Sequence[uuid.UUID]]) -> dict[uuid.UUID, set]:
    """The neighbour relation both ways (a neighbour brought in knows who brought it)."""
    out: dict[uuid.UUID, set] = {}
    for a, bs in neighbours.items():
        for b in bs:
            out.setdefault(a, set()).add(b)
            out.setdefault(b, set()).add(a)
    return out


def spread(
    values: Mapping[uuid.UUID, float | None],
    neighbours: Mapping[uuid.UUID, set],
    *,
    weight: float,
    floor: float = 0.0,
) -> dict[uuid.UUID, float | None]:
    """Each id's value plus weight × its best neighbour's (value − floor), from
    the original values (one step, not iterated). An id with no value of its
    own gets floor + the share, or stays None when no neighbour has one."""
    # Only an id with neighbours can change; written as plain loops, since a search
    # spreads three values over ~100 candidates (the generator form cost ~1 ms).
    out: dict[uuid.UUID, float | None] = dict(values)
    for key, around in neighbours.items():
        best = None
        for n in around:
            value = values.get(n)
            if value is not None and (best is None or value > best):
                best = value
        own = values.get(key)
        if best is None or best - floor <= 0:
            out[key] = own
        elif own is None:
            out[key] = floor + weight * (best - floor)
        else:
            out[key] = own + weight * (best - floor)
    return out
