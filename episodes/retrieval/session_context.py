"""Session context for episode search: an episode is read with its neighbours.

In a conversation or a working session the evidence for a question is often
spread over adjacent episodes — a question and its answer, "take a look at
this" and the photo, a step and its outcome. Ranked alone, the turn that holds
the answer may share no word with the question while its neighbour does.

`neighbours_sql` finds, for candidate episodes, the episode just before
and just after each in its session (same agent and session_id, by
occurred_at then id; the (agent, session_id, occurred_at) index answers it),
under the search's own filters, with each neighbour's cosine distance to the
query; the search's hybrid statement carries it, so the neighbours come back
with the candidates (`session_neighbours` runs it alone when the candidates
change afterwards). `spread` then gives every candidate a share of its best neighbour's
value of a signal: value + weight × max(neighbour's value − floor, 0).

What that is worth on LoCoMo is in docs/benchmarks.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

# Turns on each side a candidate lends its signals to (and brings in).
CONTEXT_RADIUS = 1


def neighbours_sql(
    *, table: str, where_sql: str, candidates: str, distance_sql: str, columns: Sequence[str]
) -> str:
    """SELECT (candidate id, the neighbour's `columns`..., its distance) for each
    row of `candidates` (a CTE name with id, session_id, occurred_at, only rows
    with a session): the episodes just before and just after it in its session,
    under `where_sql` (alias e). The hybrid statement embeds this as its last
    part, so a search reads its candidates and their neighbours in one statement."""
    sides = []
    for op, order in (("<", "DESC"), (">", "ASC")):
        sides.append(
            f"""(SELECT {", ".join(f"e.{c}" for c in columns)}, {distance_sql} AS distance
                  FROM {table} e
                 WHERE {where_sql} AND e.session_id = c.session_id
                   AND (e.occurred_at, e.id) {op} (c.occurred_at, c.id)
                 ORDER BY e.occurred_at {order}, e.id {order} LIMIT {CONTEXT_RADIUS})"""
        )
    return f"""SELECT c.id, n.*
  FROM {candidates} c CROSS JOIN LATERAL ({" UNION ALL ".join(sides)}) n"""


def read_neighbours(
    rows: Sequence[Sequence], columns: Sequence[str]
) -> tuple[dict[uuid.UUID, list[uuid.UUID]], dict[uuid.UUID, tuple[tuple, float | None]]]:
    """neighbours_sql's rows as (candidate id -> its neighbours' ids, neighbour
    id -> (its `columns`, its cosine distance to the query or None))."""
    id_at = list(columns).index("id")
    neighbours: dict[uuid.UUID, list[uuid.UUID]] = {}
    found: dict[uuid.UUID, tuple[tuple, float | None]] = {}
    for of_id, *row, dist in rows:
        neighbours.setdefault(of_id, []).append(row[id_at])
        found[row[id_at]] = (tuple(row), None if dist is None else float(dist))
    return neighbours, found


def session_neighbours(
    *,
    table: str,
    where_sql: str,
    params: Mapping[str, Any],
    ids: Sequence[uuid.UUID],
    query_vector: Any | None,
    cursor,
    columns: Sequence[str] = ("id",),
) -> tuple[dict[uuid.UUID, list[uuid.UUID]], dict[uuid.UUID, tuple[tuple, float | None]]]:
    """read_neighbours' answer for the episodes `ids`, in a statement of its own
    (when the candidates changed after the hybrid statement ran).

    `where_sql` (on alias e) and `params` are the search's conditions — the
    agent and every filter — so a neighbour is always a row the search could
    return. Candidates without a session_id have no neighbours. `query_vector`:
    the search's query vector parameter (piper.db.vector_param), for each
    neighbour's distance; None, no distances.
    """
    if not ids:
        return {}, {}
    distance = "e.embedding <=> %(ctx_qv)s::vector" if query_vector is not None else "NULL::float8"
    sql = f"""
WITH c AS (
    SELECT e.id, e.session_id, e.occurred_at FROM {table} e
     WHERE e.id = ANY(%(ctx_ids)s::uuid[]) AND e.session_id <> ''
)
{neighbours_sql(table=table, where_sql=where_sql, candidates="c", distance_sql=distance, columns=columns)}"""
    cursor.execute(sql, {**params, "ctx_ids": list(ids), "ctx_qv": query_vector})
    return read_neighbours(cursor.fetchall(), columns)


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
    # Only an id with neighbours can change; plain loops, since every search
    # spreads three values over ~100 candidates.
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
