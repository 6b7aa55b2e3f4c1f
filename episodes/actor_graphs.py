"""An HNSW graph of its own for each large actor of a large agent.

An agent's own graph (episodes.agent_graphs) serves its unfiltered and
time-window searches. A search for one actor still walks it past every other
actor's nodes, a third of the search's time (docs/benchmarks.md). Partial
indexes per actor on the episodes table would end that, but the planner
weighs every index of a table in every statement that reads it, and a
hundred of them cost more in planning than they saved (docs/experiments.md).
So an actor's vectors are copied into a table of their own: a leaf of
`episodes_actorvector`, partitioned by agent and then by actor, with its
own graph. Searches read the leaf by name; no statement on the episodes table
sees its index.

The registry is `ActorGraph`. Triggers on the episodes table keep a
registered leaf in step (migration 0007); a deleted episode takes its copy
with it. celery-beat builds the missing leaves after the agents' own graphs
(episodes.build_agent_graphs); `manage.py episodes_agent_graphs` does the same
by hand. Which actors: those of an agent with a valid own graph that hold at
least EPISODES_ACTOR_GRAPH_MIN_ROWS vectors; below that an exact scan answers
(EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from psycopg import sql

from piper.ids import uuid7

from .agent_graphs import (
    agents_with_graphs,
    build_memory,
    exclusive_build,
    global_graph,
    wanted_parameters,
)
from .models import ACTOR_VECTOR_TABLE, ActorGraph, Episode

BUILD_LOCK = "episodes.actor_graphs.build"
# The per-agent lock the sync triggers take shared (migration 0007); a build
# takes it exclusively while it registers a leaf.
_AGENT_LOCK_SQL = "pg_advisory_xact_lock(hashtext('episodes.actor_graphs'), hashtext(%s::text))"


def agent_partition_name(agent_id: uuid.UUID) -> str:
    return f"{ACTOR_VECTOR_TABLE}_{uuid.UUID(str(agent_id)).hex}"


@dataclass(frozen=True)
class ActorSet:
    agent_id: uuid.UUID
    actor: str
    rows: int  # its episodes with a vector
    graph: ActorGraph | None

    @property
    def state(self) -> str:
        return "present" if self.graph is not None else "missing"


def actor_graphs(*, min_rows: int | None = None) -> list[ActorSet]:
    """The actors that should have a graph — of agents whose own graph is there
    and valid, with at least `min_rows` (EPISODES_ACTOR_GRAPH_MIN_ROWS) vectors —
    and every registered one, largest first."""
    min_rows = settings.EPISODES_ACTOR_GRAPH_MIN_ROWS if min_rows is None else min_rows
    agents = agents_with_graphs()
    counts: dict[tuple[uuid.UUID, str], int] = {}
    if agents:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT agent_id, actor, count(*) FROM {Episode._meta.db_table}"
                " WHERE agent_id = ANY(%s) AND embedding IS NOT NULL AND actor <> ''"
                " GROUP BY agent_id, actor HAVING count(*) >= %s",
                [agents, min_rows],
            )
            counts = {(a, actor): n for a, actor, n in cursor.fetchall()}
    registered = {(g.agent_id, g.actor): g for g in ActorGraph.objects.all()}
    out = [
        ActorSet(agent_id, actor, counts.get((agent_id, actor), graph.rows if graph else 0), graph)
        for (agent_id, actor), graph in ({key: None for key in counts} | registered).items()
    ]
    return sorted(out, key=lambda s: (-s.rows, str(s.agent_id), s.actor))


@dataclass(frozen=True)
class BuiltActor:
    actor_set: ActorSet  # as it was before this run
    seconds: float | None  # how long its build took; None: not built in this run


def actor_graphs_build_missing(
    *, min_rows: int | None = None, time_budget_seconds: float | None = None
) -> list[BuiltActor]:
    """Build every missing graph of `actor_graphs`, largest first, one at a time;
    none starts once `time_budget_seconds` have passed. Raises
    agent_graphs.BuildRunning if another build holds the lock."""
    with exclusive_build(BUILD_LOCK, "actor graph"):
        started = time.monotonic()
        done = []
        for actor_set in actor_graphs(min_rows=min_rows):
            in_budget = (
                time_budget_seconds is None or time.monotonic() - started <= time_budget_seconds
            )
            seconds = None
            if actor_set.graph is None and in_budget:
                seconds = actor_graph_build(agent_id=actor_set.agent_id, actor=actor_set.actor)[1]
            done.append(BuiltActor(actor_set, seconds))
        return done


def actor_graph_build(*, agent_id: uuid.UUID, actor: str) -> tuple[ActorGraph, float]:
    """Copy the actor's vectors into a new table, build its graph there (nobody
    reads it yet, so no CONCURRENTLY is needed), then, under the agent's lock,
    bring it up to date and attach it as the actor's leaf, and register it.
    Returns the registry row and the seconds it took."""
    if connection.in_atomic_block:
        raise RuntimeError("actor_graph_build cannot run inside a transaction")
    started = time.perf_counter()
    graph_id = uuid7()
    leaf = f"{ACTOR_VECTOR_TABLE}_{graph_id.hex}"
    partition = agent_partition_name(agent_id)
    wanted = wanted_parameters()
    opclass = global_graph().opclasses[0]
    episodes = Episode._meta.db_table
    copy_rows = (
        f"SELECT agent_id, actor, id, embedding FROM {episodes}"
        " WHERE agent_id = %s AND actor = %s AND embedding IS NOT NULL"
    )
    upsert = (
        f"INSERT INTO {leaf} AS v {copy_rows}"
        " ON CONFLICT (episode_id, agent_id, actor) DO UPDATE SET embedding = EXCLUDED.embedding"
        " WHERE v.embedding IS DISTINCT FROM EXCLUDED.embedding"
    )
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE {leaf} (LIKE {ACTOR_VECTOR_TABLE} INCLUDING DEFAULTS)")
        try:
            cursor.execute(f"ALTER TABLE {leaf} ADD PRIMARY KEY (episode_id, agent_id, actor)")
            cursor.execute(f"INSERT INTO {leaf} {copy_rows}", [agent_id, actor])
            with build_memory(cursor):
                cursor.execute(
                    f"CREATE INDEX {leaf}_hnsw ON {leaf} USING hnsw (embedding {opclass})"
                    f" WITH (m = {wanted['m']}, ef_construction = {wanted['ef_construction']})"
                )
            # Statistics before the first search: without them the planner takes the
            # leaf for a few rows and sorts them rather than walking the graph.
            cursor.execute(f"ANALYZE {leaf}")
            with transaction.atomic():
                # Writers of this agent's vectors wait from here to the commit, and
                # those before have committed: what is copied below is complete.
                cursor.execute(f"SELECT {_AGENT_LOCK_SQL}", [agent_id])
                cursor.execute(
                    _ddl(
                        "CREATE TABLE IF NOT EXISTS {} PARTITION OF {}"
                        " FOR VALUES IN ({}) PARTITION BY LIST (actor)",
                        sql.Identifier(partition),
                        sql.Identifier(ACTOR_VECTOR_TABLE),
                        sql.Literal(str(agent_id)),
                    )
                )
                # Vectors gone or moved to another actor since the copy go before
                # the attach checks the rows against the episodes' keys.
                cursor.execute(
                    f"DELETE FROM {leaf} v WHERE NOT EXISTS (SELECT 1 FROM {episodes} e"
                    " WHERE e.id = v.episode_id AND e.agent_id = v.agent_id"
                    " AND e.actor = v.actor AND e.embedding IS NOT NULL)"
                )
                cursor.execute(
                    _ddl(
                        "ALTER TABLE {} ATTACH PARTITION {} FOR VALUES IN ({})",
                        sql.Identifier(partition),
                        sql.Identifier(leaf),
                        sql.Literal(actor),
                    )
                )
                cursor.execute(upsert, [agent_id, actor])  # new and re-embedded since the copy
                cursor.execute(f"SELECT count(*), now() FROM {leaf}")
                rows, now = cursor.fetchone()
                graph = ActorGraph.objects.create(
                    id=graph_id,
                    agent_id=agent_id,
                    actor=actor,
                    table_name=leaf,
                    rows=rows,
                    built_at=now,
                )
        except BaseException:
            cursor.execute(f"DROP TABLE IF EXISTS {leaf}")
            raise
    return graph, time.perf_counter() - started


def _ddl(template: str, *parts: sql.Composable) -> sql.Composed:
    """DDL with identifiers and literals quoted by psycopg (DDL takes no parameters)."""
    return sql.SQL(template).format(*parts)


def actor_graph_drop(*, agent_id: uuid.UUID, actor: str) -> uuid.UUID | None:
    """Drop the actor's leaf and unregister it (its name is the leaf's partition
    bound): for an actor whose episodes are all erased. Inside the caller's
    transaction, under the agent's lock. Returns the graph's id, or None when
    the actor had none."""
    graph = ActorGraph.objects.filter(agent_id=agent_id, actor=actor).first()
    if graph is None:
        return None
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_AGENT_LOCK_SQL}", [agent_id])
        cursor.execute(_ddl("DROP TABLE IF EXISTS {}", sql.Identifier(graph.table_name)))
    graph_id = graph.pk
    graph.delete()
    return graph_id
