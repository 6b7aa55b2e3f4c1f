"""Running the hybrid statement: the settings, the strategy, the candidates.

A search runs in one transaction of its own (or a savepoint-free part of the
caller's) so the hnsw.* settings it needs stay local to it and are put back
after it. Which vector strategy applies is decided with the filtered set's
size; when a graph gives up before k rows (a filter few rows pass), an exact
scan answers instead, so a filter never starves the vector list.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from piper.db import server_bound_cursor
from piper.tenancy.models import Agent

from ..agent_graphs import graph_name
from ..models import TEXT_SEARCH_CONFIG, AbstentionCalibration, ActorGraph
from .fusion import DEFAULT_ABSTENTION_THRESHOLD, _Candidate, _Key
from .plan import _exact_vector_sql, _positions, _rows_by_id_sql, _Spec, _statement
from .session_context import read_neighbours
from .stats import (
    _agent_rows,
    _cached_filtered_count,
    _filtered_count_key,
    _global_frequencies,
    _Lexeme,
    _lexemes,
    _remember_filtered_count,
)
from .types import EVIDENCE_METRIC

# 200 rather than 100: the recall it keeps on clustered data is worth more than
# the time 100 saves (docs/experiments.md).
HNSW_EF_SEARCH = 200
# A search whose only filter is an actor with a graph of its own reads that graph
# (episodes.actor_graphs); False leaves the graphs unread, to compare.
READ_ACTOR_GRAPHS = True
# How far an iterative scan may walk the graph before giving up (pgvector's default).
HNSW_MAX_SCAN_TUPLES = 20_000


def _prepare(
    cursor,
    query: str,
    model_name: str,
    ef_search: int | None,
    own_graph: str | None,
    actor: tuple[uuid.UUID, str] | None = None,
) -> tuple:
    """One statement: the query's lexemes (in order), the calibrated threshold,
    — with `ef_search` — the hnsw.* settings for this transaction, returning
    their previous values, — with `own_graph` — whether that index exists and
    is valid, and — with `actor` (agent id, actor) — the table of the actor's
    own graph, if it has one; then sequential scans are off for the
    transaction, since the planner would rather sort a few thousand rows
    than walk their graph, which is faster (docs/experiments.md).
    The '[0]'::vector cast loads pgvector (and defines the hnsw.* settings)
    while the statement is planned."""
    extra, source = "", ""
    params: list[Any] = [TEXT_SEARCH_CONFIG, query, model_name, EVIDENCE_METRIC]
    if ef_search is not None:
        extra = (
            ", '[0]'::vector IS NOT NULL, "
            + ", ".join(f"current_setting('{n}') AS was_{i}" for i, n in enumerate(HNSW_SETTINGS))
            + ", set_config('hnsw.iterative_scan', 'relaxed_order', true)"
            ", set_config('hnsw.ef_search', %s, true)"
            ", set_config('hnsw.max_scan_tuples', %s, true)"
            ", set_config('max_parallel_workers_per_gather', '0', true)"
        )
        params += [str(ef_search), str(HNSW_MAX_SCAN_TUPLES)]
    if own_graph is not None:
        extra += (
            ", coalesce((SELECT indisvalid AND indisready FROM pg_index"
            " WHERE indexrelid = to_regclass(%s)), false) AS own_graph_ready"
        )
        params.append(own_graph)
    if actor is not None:
        extra += (
            ", leaf.name AS actor_graph, set_config('enable_seqscan',"
            " CASE WHEN leaf.name IS NULL THEN current_setting('enable_seqscan') ELSE 'off' END,"
            " true)"
        )
        source = (
            f" FROM (SELECT (SELECT g.table_name FROM {ActorGraph._meta.db_table} g"
            "  WHERE g.agent_id = %s AND g.actor = %s AND g.built_at IS NOT NULL"
            "  AND to_regclass(g.table_name) IS NOT NULL) AS name) leaf"
        )
    cursor.execute(
        "SELECT ARRAY(SELECT lexeme FROM unnest(to_tsvector(%s::regconfig, %s))"
        "             ORDER BY positions[1], lexeme) AS lexemes,"
        f" (SELECT ARRAY[id::text, threshold::text] FROM {AbstentionCalibration._meta.db_table}"
        "   WHERE embedding_model = %s AND metric = %s ORDER BY created_at DESC, id DESC LIMIT 1)"
        " AS calibration" + extra + source,
        params + list(actor or ()),
    )
    row = cursor.fetchone()
    at = _positions(cursor)
    previous = None
    if ef_search is not None:
        previous = tuple(row[at[f"was_{i}"]] for i in range(len(HNSW_SETTINGS)))
    has_graph = bool(row[at["own_graph_ready"]]) if own_graph is not None else False
    actor_graph = row[at["actor_graph"]] if actor is not None else None
    return list(row[at["lexemes"]]), row[at["calibration"]], previous, has_graph, actor_graph


# Set for the search's own transaction and put back after it. No parallel
# workers: starting one costs more than any of these statements takes.
HNSW_SETTINGS = (
    "hnsw.iterative_scan",
    "hnsw.ef_search",
    "hnsw.max_scan_tuples",
    "max_parallel_workers_per_gather",
    "enable_seqscan",  # off only when an actor's own graph is read (_prepare)
)


@dataclass
class _Fetched:
    cands: list[_Candidate]
    strategy: str
    lexemes: tuple[str, ...]
    threshold: float
    threshold_source: str
    # read_neighbours' answer for `cands`, when the hybrid statement brought it.
    context: tuple[dict, dict] | None = None


def _fetch(
    spec: _Spec,
    agent: Agent,
    query: str,
    vector: Sequence[float] | None,
    entities: Sequence[str],
    k: int,
    model_name: str,
    context: bool = False,
) -> _Fetched:
    """The candidates of the text, vector and entity lists (with `context`, their
    session neighbours too), in one transaction that sets the hnsw.* settings."""
    nested = connection.in_atomic_block
    ef_search = max(HNSW_EF_SEARCH, k) if vector is not None else None
    # Server-side binding: the query vector is named five times in the statement;
    # binary results: ~100 rows of UUIDs and timestamps load faster than from text.
    with transaction.atomic(savepoint=False), server_bound_cursor(binary=True) as cursor:
        own_graph = graph_name(agent.pk) if spec.kind == "episode" and vector is not None else None
        actor = (
            (agent.pk, spec.params["f_actor"])
            if READ_ACTOR_GRAPHS and spec.actor_only and vector is not None
            else None
        )
        texts, calibration, previous, has_graph, spec.actor_graph = _prepare(
            cursor, query, model_name, ef_search, own_graph, actor
        )
        if has_graph:
            # Its own graph holds only its nodes, so a smaller filtered set finds
            # its k through the graph (where that pays depends on the CPU:
            # settings, docs/benchmarks.md).
            spec.exact_max = min(spec.exact_max, settings.EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS)
        lexemes = _lexemes(texts, spec.table)
        wanted = lexemes or (vector is not None and spec.agent_only)
        agent_rows = _agent_rows(spec.table, agent) if wanted else 0
        threshold, source = DEFAULT_ABSTENTION_THRESHOLD, "default"
        if calibration is not None:
            calibration_id, calibrated = calibration
            threshold, source = float(calibrated), calibration_id
        strategy = "none"
        rows: list[tuple] = []
        at: dict[str, int] = {}
        # The actor's own graph needs no count (_vector_ctes).
        counts = vector is not None and spec.actor_graph is None
        count_key = _filtered_count_key(spec) if counts else None
        known_rows = _cached_filtered_count(count_key) if count_key is not None else None
        if lexemes or vector is not None:
            total_rows = _global_frequencies(spec.table)[2]
            sql = _statement(
                spec, lexemes, agent_rows, total_rows, vector, entities, k, known_rows, context
            )
            cursor.execute(sql, spec.params)
            rows = cursor.fetchall()
            at = _positions(cursor)
        neighbour_rows: list[tuple] | None = None
        if context and rows:
            key_of = itemgetter(*(at[c] for c in spec.key_columns))
            of_id_at, distance_at = at["of_id"], at["distance"]
            # (the candidate it neighbours, its key columns, its distance)
            neighbour_rows = [
                (r[of_id_at], *key_of(r), r[distance_at]) for r in rows if r[of_id_at] is not None
            ]
            rows = [r for r in rows if r[of_id_at] is None]
        elif context:
            neighbour_rows = []
        if vector is not None:
            if spec.actor_graph is not None:
                strategy = "actor_graph"
            else:
                counted = known_rows
                if counted is None:
                    vec_rows_at = at["vec_rows"]
                    counted = next(
                        (r[vec_rows_at] for r in rows if r[vec_rows_at] is not None), None
                    )
                if counted is None:
                    cursor.execute(
                        f"SELECT count(*) FROM (SELECT 1 FROM {spec.table} e"
                        f" WHERE {spec.where_sql} LIMIT %(exact_cap)s) c",
                        spec.params,
                    )
                    counted = cursor.fetchone()[0]
                if known_rows is None:
                    _remember_filtered_count(count_key, counted)
                strategy = "exact" if counted <= spec.exact_max else "hnsw"
            distance_at = at["distance"]
            found = sum(1 for r in rows if r[distance_at] is not None)
            if strategy != "exact" and found < k:
                # A graph (the agent's or the actor's) gave up before k rows.
                rows = _with_exact_vectors(cursor, spec, rows, at, lexemes, entities)
                strategy += "+exact"
                neighbour_rows = None  # other candidates now: _with_session_context asks again
            if nested:
                cursor.execute(
                    "SELECT " + ", ".join(f"set_config('{s}', %s, true)" for s in HNSW_SETTINGS),
                    list(previous),
                )
    cands = []
    if rows:
        key_of = itemgetter(*(at[c] for c in spec.key_columns))
        values_of = itemgetter(
            at["text_rank"], at["distance"], at["shared"], at["coverage"], at["embedded"]
        )
    for row in rows:
        text_rank, distance, shared, coverage, embedded = values_of(row)
        cands.append(
            _Candidate(
                obj=_Key(spec.key_columns, key_of(row)),
                # A row holding none of the query's lexemes has no text rank.
                text_rank=float(text_rank) if text_rank is not None and coverage else None,
                similarity=None if distance is None else 1.0 - float(distance),
                shared=shared,
                coverage=None if coverage is None else float(coverage),
                embedded=bool(embedded),
            )
        )
    return _Fetched(
        cands,
        strategy,
        tuple(lx.text for lx in lexemes),
        threshold,
        source,
        None if neighbour_rows is None else read_neighbours(neighbour_rows, spec.key_columns),
    )


def _with_exact_vectors(
    cursor,
    spec: _Spec,
    rows: list[tuple],
    at: dict[str, int],
    lexemes: list[_Lexeme],
    entities: Sequence[str],
) -> list[tuple]:
    """The index scan gave up before finding k rows (a filter few rows pass):
    take the vector list from an exact scan instead, fetching the rows it adds.
    `rows` and the rows returned are laid out as `at` says."""
    cursor.execute(_exact_vector_sql(spec), spec.params)
    exact = dict(cursor.fetchall())
    id_at, distance_at, dfs_at = at["id"], at["distance"], at["dfs"]
    by_id: dict[uuid.UUID, list] = {}
    for row in rows:
        row = list(row)
        row[distance_at] = exact.get(row[id_at])
        by_id[row[id_at]] = row
    missing = [pk for pk in exact if pk not in by_id]
    if missing:
        weights = {}
        dfs = next((r[dfs_at] for r in rows if r[dfs_at] is not None), None)
        if lexemes and dfs is not None:
            n_rows = spec.params["n_rows"]
            for i, d in enumerate(dfs):
                weights[f"w{i}"] = math.log(1 + (max(n_rows, d) - d + 0.5) / (d + 0.5))
        sql = _rows_by_id_sql(spec, lexemes if weights else [], entities)
        cursor.execute(sql, {**spec.params, **weights, "ids": missing})
        added_at = _positions(cursor)
        for added in cursor.fetchall():
            row = [None] * (max(at.values()) + 1)
            for name, i in added_at.items():
                row[at[name]] = added[i]
            row[distance_at] = exact[row[id_at]]
            by_id[row[id_at]] = row
    rank_at, shared_at = at["text_rank"], at["shared"]
    return [
        tuple(r)
        for r in by_id.values()
        if r[rank_at] is not None or r[distance_at] is not None or r[shared_at]
    ]
