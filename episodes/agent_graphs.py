"""An HNSW graph of its own for a large agent: a partial index over its episodes.

One graph holds every agent's vectors, so a search inside one agent walks
past the others' nodes, discarding most of what it visits: at 1M rows that
cost both recall and time. With a partial index `WHERE agent_id = …` over the
agent's own rows, the planner takes that index, since queries carry the agent
id as a literal, and both come back (docs/benchmarks.md, episodic memory).
The agent's new vectors are then
inserted into two graphs, which is why only agents above a size get one, and
only the EPISODES_AGENT_GRAPH_MAX_GRAPHS largest: every index on the table is
opened and its predicate checked on each insert, and weighed by the planner.

celery-beat runs `agent_graphs_build_missing` hourly (episodes.build_agent_graphs);
`manage.py episodes_agent_graphs` runs it by hand. Retrieval looks the graph up
by name (`graph_name`) and, when it is there and valid, sends smaller filtered
sets through it (EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS).
"""

from __future__ import annotations

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


def graph_name(agent_id: uuid.UUID) -> str:
    return PREFIX + uuid.UUID(str(agent_id)).hex


@dataclass(frozen=True)
class AgentGraph:
    agent_id: uuid.UUID
    rows: int
    index: str
    # "present", "missing", "invalid" (a concurrent build that failed), "outdated"
    # (built with other m / ef_construction than the settings now say) or
    # "over-limit" (not among the EPISODES_AGENT_GRAPH_MAX_GRAPHS largest; none is built)
    state: str

    @property
    def needs_build(self) -> bool:
        return self.state in ("missing", "invalid", "outdated")


def _parameters(reloptions: list[str] | None) -> dict[str, int]:
    """m and ef_construction from an index's reloptions (['m=16', …]); pgvector's
    defaults (16 / 64) for one built without them."""
    given = dict(option.split("=", 1) for option in reloptions or ())
    return {"m": int(given.get("m", 16)), "ef_construction": int(given.get("ef_construction", 64))}


def wanted_parameters() -> dict[str, int]:
    return {
        "m": int(settings.EPISODES_AGENT_GRAPH_M),
        "ef_construction": int(settings.EPISODES_AGENT_GRAPH_EF_CONSTRUCTION),
    }


@contextmanager
def build_memory(cursor):
    """pgvector builds the graph in maintenance_work_mem and, once it no longer fits,
    goes on inserting one tuple at a time on disk, many times slower
    (docs/benchmarks.md). Set for this session's build (EPISODES_GRAPH_BUILD_MEMORY),
    then put back."""
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


def global_graph():
    return next(i for i in Episode._meta.indexes if i.name == "episodes_embedding_hnsw")


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
            "SELECT c.relname, i.indisvalid, c.reloptions"
            "  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND c.relname LIKE %s",
            [table, PREFIX + "%"],
        )
        built = {name: (valid, _parameters(options)) for name, valid, options in cursor.fetchall()}
    wanted = wanted_parameters()
    out = []
    for rank, (agent_id, rows) in enumerate(large):
        name = graph_name(agent_id)
        if name in built:
            valid, parameters = built[name]
            state = "invalid" if not valid else "present" if parameters == wanted else "outdated"
        else:
            state = "missing" if rank < max_graphs else "over-limit"
        out.append(AgentGraph(agent_id, rows, name, state))
    return out


def agents_with_graphs() -> list[uuid.UUID]:
    """The agents whose own graph is there and valid, whatever their size now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = %s::regclass AND c.relname LIKE %s AND i.indisvalid",
            [Episode._meta.db_table, PREFIX + "%"],
        )
        return sorted(uuid.UUID(name.removeprefix(PREFIX)) for (name,) in cursor.fetchall())


class BuildRunning(Exception):
    """Another process holds the build's lock (BUILD_LOCK, actor_graphs.BUILD_LOCK)."""


@contextmanager
def exclusive_build(lock: str, what: str):
    """One build of `what` at a time across workers and commands: a session-level
    advisory lock named `lock` (it goes with the session if the process dies
    mid-build), taken outside any transaction, as CREATE INDEX CONCURRENTLY needs.
    Raises BuildRunning if another process holds it."""
    if connection.in_atomic_block:
        raise RuntimeError(f"{what}s cannot be built inside a transaction")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [lock])
        if not cursor.fetchone()[0]:
            raise BuildRunning(f"another {what} build is running")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [lock])


@dataclass(frozen=True)
class Built:
    graph: AgentGraph  # as it was before this run
    seconds: float | None  # how long its build took; None: not built in this run


def agent_graphs_build_missing(
    *,
    min_rows: int | None = None,
    max_graphs: int | None = None,
    time_budget_seconds: float | None = None,
) -> list[Built]:
    """Build every graph of `agent_graphs` that needs a build (missing, invalid or
    outdated), largest agent first, one at a time; no new build starts once
    `time_budget_seconds` have passed (the rest is left to the next run).
    Returns every large agent, built or not.
    Raises BuildRunning if another build holds the lock."""
    with exclusive_build(BUILD_LOCK, "agent graph"):
        started = time.monotonic()
        done = []
        for graph in agent_graphs(min_rows=min_rows, max_graphs=max_graphs):
            in_budget = (
                time_budget_seconds is None or time.monotonic() - started <= time_budget_seconds
            )
            seconds = agent_graph_build(graph) if graph.needs_build and in_budget else None
            done.append(Built(graph, seconds))
        return done


def agent_graph_build(graph: AgentGraph) -> float:
    """Build the agent's graph (again, if a failed build left it invalid or it is
    outdated) with the global graph's operator class and EPISODES_AGENT_GRAPH_M /
    EPISODES_AGENT_GRAPH_EF_CONSTRUCTION, without blocking writes. Returns the
    seconds it took. Runs outside a transaction: CREATE INDEX CONCURRENTLY must."""
    if connection.in_atomic_block:
        raise RuntimeError("agent_graph_build cannot run inside a transaction")
    opclass = global_graph().opclasses[0]
    wanted = wanted_parameters()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if graph.state in ("invalid", "outdated"):
            # Meanwhile the agent's searches take the global graph, as before its first build.
            cursor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {graph.index}")
        with build_memory(cursor):
            cursor.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {graph.index} ON {Episode._meta.db_table}"
                f" USING hnsw (embedding {opclass})"
                f" WITH (m = {wanted['m']}, ef_construction = {wanted['ef_construction']})"
                f" WHERE agent_id = '{uuid.UUID(str(graph.agent_id))}'::uuid"
            )
    return time.perf_counter() - started
