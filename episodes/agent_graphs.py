"""An HNSW graph of its own for a large agent: a partial index over its episodes.

One graph holds every agent's vectors, so a search inside one agent walks
past the others' nodes. At 1M rows (10 agents × 100k) that cost recall (0.97
agent-only, 0.95 for one actor through the graph) and time: a 90-day window
visited ~1,540 tuples and removed 1,508 by filter (12.7 ms). With a partial
index `WHERE agent_id = …` over the agent's own 100k rows, the planner takes
that index, since queries carry the agent id as a literal. Recall was 1.0 and the window took
7.8 ms (docs/benchmarks.md, episodes). The agent's new vectors are then
inserted into two graphs, which is why only agents above a size get one, and
only the EPISODES_AGENT_GRAPH_MAX_GRAPHS largest: every index on the table is
opened and its predicate checked on each insert, and weighed by the planner.

Once an agent's own graph is valid, the global graph leaves it out: it is rebuilt
as a partial index `WHERE agent_id <> ALL ('{…}')` over the agents that have
one, which the planner proves from `agent_id = X` for everyone else. Each
vector then goes into one graph (into two, the embed path ran at 44 instead of
77 vectors/s: docs/benchmarks.md). The rebuild is a whole-table build, but only
when the set of agents with a graph changes; until it is done, their vectors
go into both.

celery-beat runs `agent_graphs_build_missing` hourly (episodes.build_agent_graphs);
`manage.py episodes_agent_graphs` runs it by hand. Retrieval looks the graph up
by name (`graph_name`) and, when it is there and valid, sends smaller filtered
sets through it (EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS).
"""

from __future__ import annotations

import re
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import connection

from .models import Episode

PREFIX = "episodes_hnsw_agent_"
# One build at a time across workers and commands (a session-level advisory
# lock: it goes with the session if the process dies mid-build).
BUILD_LOCK = "episodes.agent_graphs.build"


GLOBAL_GRAPH = "episodes_embedding_hnsw"
# The global graph is rebuilt under this name, then swapped in.
GLOBAL_GRAPH_NEXT = GLOBAL_GRAPH + "_next"
# PostgreSQL proves `agent_id = X` implies `agent_id <> ALL (array)` only for
# arrays of at most 100 elements (predtest.c, MAX_SAOP_ARRAY_SIZE).
MAX_EXCLUDED = 100
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def graph_name(agent_id: uuid.UUID) -> str:
    return PREFIX + uuid.UUID(str(agent_id)).hex


@dataclass(frozen=True)
class AgentGraph:
    agent_id: uuid.UUID
    rows: int
    index: str
    # "present", "missing", "invalid" (a concurrent build that failed) or
    # "over-limit" (not among the EPISODES_AGENT_GRAPH_MAX_GRAPHS largest; none is built)
    state: str


@contextmanager
def _build_memory(cursor):
    """pgvector builds the graph in maintenance_work_mem and, once it no longer fits,
    goes on inserting one tuple at a time on disk: at 1M rows and PostgreSQL's
    64 MB that made the global graph's build ~6x slower. Set for this session's
    builds (EPISODES_GRAPH_BUILD_MEMORY), then put back."""
    cursor.execute(
        "SELECT current_setting('maintenance_work_mem'),"
        " set_config('maintenance_work_mem', %s, false)",
        [settings.EPISODES_GRAPH_BUILD_MEMORY],
    )
    previous = cursor.fetchone()[0]
    try:
        yield
    finally:
        cursor.execute("SELECT set_config('maintenance_work_mem', %s, false)", [previous])


def _global_graph():
    return next(i for i in Episode._meta.indexes if i.name == GLOBAL_GRAPH)


def _graph_sql(name: str, predicate: str | None) -> str:
    template = _global_graph()
    sql = (
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {Episode._meta.db_table}"
        f" USING hnsw (embedding {template.opclasses[0]})"
        f" WITH (m = {int(template.m)}, ef_construction = {int(template.ef_construction)})"
    )
    return sql + (f" WHERE {predicate}" if predicate else "")


def global_graph_excluded() -> frozenset[uuid.UUID]:
    """The agents the global graph leaves out (its predicate's ids)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_expr(indpred, indrelid) FROM pg_index WHERE indexrelid = to_regclass(%s)",
            [GLOBAL_GRAPH],
        )
        row = cursor.fetchone()
    predicate = row[0] if row else None
    return frozenset(uuid.UUID(u) for u in _UUID.findall(predicate or ""))


def global_graph_rebuild(excluded: set[uuid.UUID] | frozenset[uuid.UUID]) -> float:
    """Rebuild the global graph over every agent but `excluded`, then swap it in for
    the old one; returns the seconds it took. Without blocking writes: the new
    graph is built CONCURRENTLY under another name while the old one serves."""
    if connection.in_atomic_block:
        raise RuntimeError("the global graph cannot be rebuilt inside a transaction")
    if len(excluded) > MAX_EXCLUDED:
        raise ValueError(f"at most {MAX_EXCLUDED} agents can be left out of the global graph")
    ids = sorted(str(uuid.UUID(str(a))) for a in excluded)
    predicate = f"agent_id <> ALL ('{{{','.join(ids)}}}'::uuid[])" if ids else None
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT to_regclass(%s) IS NOT NULL,"
            " (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s))",
            [GLOBAL_GRAPH, GLOBAL_GRAPH_NEXT],
        )
        has_global, next_valid = cursor.fetchone()
        if not has_global and next_valid:
            # A swap cut short between its DROP and RENAME: put that graph back first.
            cursor.execute(f"ALTER INDEX {GLOBAL_GRAPH_NEXT} RENAME TO {GLOBAL_GRAPH}")
        elif next_valid is not None:
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {GLOBAL_GRAPH_NEXT}")
        with _build_memory(cursor):
            cursor.execute(_graph_sql(GLOBAL_GRAPH_NEXT, predicate))
        cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {GLOBAL_GRAPH}")
        cursor.execute(f"ALTER INDEX {GLOBAL_GRAPH_NEXT} RENAME TO {GLOBAL_GRAPH}")
    return time.perf_counter() - started


def agent_graphs(*, min_rows: int | None = None, max_graphs: int | None = None) -> list[AgentGraph]:
    """Every agent holding at least `min_rows` episodes (EPISODES_AGENT_GRAPH_MIN_ROWS),
    with the state of its own graph, largest first. Past the `max_graphs`
    (EPISODES_AGENT_GRAPH_MAX_GRAPHS) largest, an agent without a graph is
    "over-limit"; one that has a graph keeps it."""
    min_rows = settings.EPISODES_AGENT_GRAPH_MIN_ROWS if min_rows is None else min_rows
    max_graphs = settings.EPISODES_AGENT_GRAPH_MAX_GRAPHS if max_graphs is None else max_graphs
    table = Episode._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT agent_id, count(*) FROM {table} GROUP BY agent_id HAVING count(*) >= %s"
            " ORDER BY count(*) DESC, agent_id",
            [min_rows],
        )
        large = cursor.fetchall()
        cursor.execute(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
            [table, PREFIX + "%"],
        )
        built = dict(cursor.fetchall())
    out = []
    for rank, (agent_id, rows) in enumerate(large):
        name = graph_name(agent_id)
        if name in built:
            state = "present" if built[name] else "invalid"
        else:
            state = "missing" if rank < max_graphs else "over-limit"
        out.append(AgentGraph(agent_id, rows, name, state))
    return out


def agents_with_graphs() -> frozenset[uuid.UUID]:
    """Every agent whose own graph is there and valid, whatever its size now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND c.relname LIKE %s AND i.indisvalid",
            [Episode._meta.db_table, PREFIX + "%"],
        )
        return frozenset(uuid.UUID(name[len(PREFIX) :]) for (name,) in cursor.fetchall())


class BuildRunning(Exception):
    """Another process holds BUILD_LOCK."""


@dataclass(frozen=True)
class Built:
    graph: AgentGraph
    seconds: float


@dataclass(frozen=True)
class BuildReport:
    built: list[Built]
    # Seconds the global graph's rebuild took, or None if it was left as it was.
    global_seconds: float | None
    excluded: int  # agents the global graph leaves out afterwards


def agent_graphs_build_missing(
    *,
    min_rows: int | None = None,
    max_graphs: int | None = None,
    time_budget_seconds: float | None = None,
) -> BuildReport:
    """Build every missing or invalid graph of `agent_graphs`, largest agent first,
    one at a time; then, if the agents with a valid graph are not the ones the
    global graph leaves out, rebuild the global graph without them. No new build
    starts once `time_budget_seconds` have passed (the rest is left to the next
    run). Raises BuildRunning if another build holds the lock."""
    if connection.in_atomic_block:
        raise RuntimeError("agent graphs cannot be built inside a transaction")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [BUILD_LOCK])
        if not cursor.fetchone()[0]:
            raise BuildRunning("another agent graph build is running")
    try:
        started = time.monotonic()

        def in_budget() -> bool:
            return time_budget_seconds is None or time.monotonic() - started <= time_budget_seconds

        done = []
        for graph in agent_graphs(min_rows=min_rows, max_graphs=max_graphs):
            if graph.state not in ("missing", "invalid"):
                continue
            if not in_budget():
                break
            done.append(Built(graph, agent_graph_build(graph)))
        wanted = frozenset(sorted(agents_with_graphs())[:MAX_EXCLUDED])
        global_seconds = None
        if wanted != global_graph_excluded() and in_budget():
            global_seconds = global_graph_rebuild(wanted)
        return BuildReport(done, global_seconds, len(global_graph_excluded()))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [BUILD_LOCK])


def agent_graph_build(graph: AgentGraph) -> float:
    """Build (or rebuild, if a failed build left it invalid) the agent's graph with
    the global graph's parameters, without blocking writes. Returns the seconds
    it took. Runs outside a transaction: CREATE INDEX CONCURRENTLY must."""
    if connection.in_atomic_block:
        raise RuntimeError("agent_graph_build cannot run inside a transaction")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if graph.state == "invalid":
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {graph.index}")
        with _build_memory(cursor):
            cursor.execute(
                _graph_sql(graph.index, f"agent_id = '{uuid.UUID(str(graph.agent_id))}'::uuid")
            )
    return time.perf_counter() - started
