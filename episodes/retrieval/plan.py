"""The hybrid statement: what to ask PostgreSQL for one search.

One statement brings every list's candidates (full text, vector, entities)
and, for episodes, their session neighbours: a round trip costs more than
most of the work in it. The SQL differs between episodes and chunks only in
what a `_Spec` holds. Each candidate row carries its key columns
(_Spec.key_columns), then the columns named in _EXTRA.

Full text: the query's lexemes are OR-ed (a natural question rarely shares
all its words with the answer), and each lexeme's ts_rank is weighted by its
BM25 inverse document frequency over the agent's rows, which PostgreSQL's
ranking lacks: a match on "oom" counts for more than one on "task". Only the
rarer lexemes bring rows in (_pool_plan); the others re-rank.

Vector: an exact scan when the filters leave few rows, else the HNSW index
with pgvector's iterative scan (a plain filtered HNSW scan returns what is
left of ef_search neighbours of every agent), or the actor's own graph.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from piper.db import vector_param
from piper.tenancy.models import Agent

from ..models import Episode, EpisodeStatus, SourceChunk
from .session_context import neighbours_sql
from .stats import _Lexeme
from .types import SearchFilters

# Vector search: when the filters leave at most this many of the agent's rows,
# compare the query with every one of them instead of walking the HNSW graph.
# The filters a covering index answers with the vectors in it (agent, actor,
# time window; EXACT_SCAN_COVERED) allow EXACT_SCAN_MAX_ROWS; with any other
# filter (environment, outcome, goal, task) each row is a heap and TOAST fetch,
# an order of magnitude dearer, and the limit is EXACT_SCAN_HEAP_MAX_ROWS.
# 8,000 holds one actor of a 100k-row agent: scanned exactly, it is both faster
# and complete, where the graph's filtered walk loses recall (docs/benchmarks.md).
EXACT_SCAN_MAX_ROWS = 8_000
EXACT_SCAN_HEAP_MAX_ROWS = 500
EXACT_SCAN_COVERED = frozenset({"actor", "occurred_after", "occurred_before"})

# Full text: which lexemes bring rows in as candidates (see _pool_plan).
POOL_MAX_GLOBAL_ROWS = 20_000
POOL_MAX_AGENT_ROWS = 1_000
POOL_GLOBAL_BUDGET = 40_000
# The text candidates are ranked among at most this many matching rows (a
# query of only very common words is otherwise a scan of the agent's rows).
POOL_MAX_ROWS = 1_000
# ts_rank normalization 1: divide by 1 + log(document length).
TS_RANK_NORMALIZATION = 1


def _pool_plan(lexemes: list[_Lexeme], agent_rows: int, total_rows: float) -> set[int]:
    """Which lexemes (by index) bring their rows in as text candidates.

    Reading a lexeme's matches costs its posting list over every agent's rows
    (GIN) and a heap visit for each of this agent's: only lexemes expected in
    at most POOL_MAX_GLOBAL_ROWS rows in all and POOL_MAX_AGENT_ROWS of the
    agent's qualify, rarest first, until their posting lists add up to
    POOL_GLOBAL_BUDGET. Without statistics, all of them. The others re-rank the
    candidates the other lists bring (every candidate is scored on every lexeme)."""
    if any(lx.frequency is None for lx in lexemes):
        return set(range(len(lexemes)))
    chosen: set[int] = set()
    spent = 0.0
    for i in sorted(range(len(lexemes)), key=lambda i: lexemes[i].frequency):
        in_all = lexemes[i].frequency * total_rows
        if in_all > POOL_MAX_GLOBAL_ROWS or lexemes[i].frequency * agent_rows > POOL_MAX_AGENT_ROWS:
            break
        if chosen and spent + in_all > POOL_GLOBAL_BUDGET:
            break
        chosen.add(i)
        spent += in_all
    return chosen


def _tsquery_literal(text: str) -> str:
    # One quoted lexeme: inside quotes tsquery reads \ as an escape and '' as '.
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


@dataclass
class _Spec:
    """What differs between the episode and the chunk search."""

    kind: str
    model: type
    table: str
    where: list[str]  # conditions on alias e, in every list
    params: dict[str, Any]
    columns: list[str]  # the returned hits' columns, in concrete-field order
    exact_max: int  # at most this many rows under `where`: an exact vector scan
    agent_only: bool  # `where` is the agent condition alone
    actor_only: bool  # `where` is the agent and actor conditions alone
    # What fusion reads of a candidate (the tie-break, recency, sessions): the
    # candidates load only these, the returned hits every column (hits._full_rows).
    key_columns: list[str] = field(default_factory=list)
    # The actor's own graph (an ActorGraph's table), when the search may use it.
    actor_graph: str | None = None
    # The rows a search may answer with (alias e): not a retracted or corrected
    # episode. Left out of `where`, which the vector scans read from covering
    # indexes without the heap: a withdrawn version has no vector (a constraint),
    # so they never see one; the lists that read the heap anyway check this.
    live: str = "true"

    @property
    def where_sql(self) -> str:
        return " AND ".join(self.where)

    @property
    def live_where_sql(self) -> str:
        return f"{self.where_sql} AND {self.live}"


# The search columns are never loaded into hits (a vector is 1.5 kB a row).
SEARCH_COLUMNS = frozenset({"search_vector", "embedding"})


def _columns(model: type, only: Sequence[str] | None = None) -> list[str]:
    """The model's columns in concrete-field order (as from_db takes them): all
    but SEARCH_COLUMNS, or those in `only`."""
    fields = model._meta.concrete_fields
    if only is None:
        return [f.column for f in fields if f.column not in SEARCH_COLUMNS]
    wanted = set(only)
    return [f.column for f in fields if f.column in wanted]


def _attnames(model: type, columns: Sequence[str]) -> list[str]:
    """The attribute names of `columns`, in concrete-field order (as from_db takes them)."""
    wanted = set(columns)
    return [f.attname for f in model._meta.concrete_fields if f.column in wanted]


def _episode_spec(agent: Agent, filters: SearchFilters) -> _Spec:
    where = ["e.agent_id = %(agent)s"]
    params: dict[str, Any] = {"agent": agent.pk}
    used = set()
    for name in ("actor", "environment", "session_id", "goal_id", "task_id", "outcome"):
        value = getattr(filters, name)
        if value is not None:
            where.append(f"e.{name} = %(f_{name})s")
            params[f"f_{name}"] = value
            used.add(name)
    if filters.occurred_after is not None:
        where.append("e.occurred_at >= %(f_after)s")
        params["f_after"] = filters.occurred_after
        used.add("occurred_after")
    if filters.occurred_before is not None:
        where.append("e.occurred_at < %(f_before)s")
        params["f_before"] = filters.occurred_before
        used.add("occurred_before")
    # A session is a few dozen rows: exact through the session index and the heap.
    covered = used <= EXACT_SCAN_COVERED or "session_id" in used
    return _Spec(
        "episode",
        Episode,
        Episode._meta.db_table,
        where,
        params,
        _columns(Episode),
        EXACT_SCAN_MAX_ROWS if covered else EXACT_SCAN_HEAP_MAX_ROWS,
        not used,
        used == {"actor"},
        _columns(
            Episode,
            only=[
                "id",
                "session_id",
                "occurred_at",
                "salience",
                "use_count",
                "last_used_at",
                "authority",
                "actor",
            ],
        ),
        live=f"e.status = '{EpisodeStatus.ACTIVE}'",
    )


def _chunk_spec(agent: Agent, source_id: uuid.UUID | None) -> _Spec:
    where = ["e.agent_id = %(agent)s"]
    params: dict[str, Any] = {"agent": agent.pk}
    if source_id is not None:
        where.append("e.source_id = %(f_source)s")
        params["f_source"] = source_id
    return _Spec(
        "chunk",
        SourceChunk,
        SourceChunk._meta.db_table,
        where,
        params,
        _columns(SourceChunk),
        EXACT_SCAN_MAX_ROWS,
        source_id is None,
        False,
        _columns(SourceChunk, only=["id", "source_id", "ordinal"]),
    )


def _rank_sql(count: int, weight: str) -> str:
    """Σ idf × ts_rank of row e over the query's lexemes; `weight` names each idf."""
    return (
        "("
        + " + ".join(
            f"{weight.format(i=i)} * ts_rank(e.search_vector, %(lx{i})s::tsquery, "
            f"{TS_RANK_NORMALIZATION})"
            for i in range(count)
        )
        + ")::float8"
    )


def _coverage_sql(count: int, weight: str) -> str:
    """The idf-weighted share of the query's lexemes row e holds."""
    held = " + ".join(
        f"CASE WHEN e.search_vector @@ %(lx{i})s::tsquery THEN {weight.format(i=i)} ELSE 0 END"
        for i in range(count)
    )
    total = " + ".join(weight.format(i=i) for i in range(count))
    return f"(({held}) / nullif({total}, 0))::float8"


def _text_ctes(
    spec: _Spec, lexemes: list[_Lexeme], agent_rows: int, total_rows: float, k: int
) -> tuple[str, bool]:
    """`weights`: each lexeme's BM25 inverse document frequency over the
    agent's rows — its document frequency counted in the pool for a lexeme that
    brings its rows in, else estimated from the statistics; and, when some
    lexeme brings rows in, `text_hits`: the K best of at most POOL_MAX_ROWS
    matching rows by Σ idf × ts_rank. Returns (SQL, whether text_hits exists)."""
    pooled = _pool_plan(lexemes, agent_rows, total_rows)
    spec.params.update(pool_max=POOL_MAX_ROWS, k_text=k, n_rows=max(agent_rows, 1))
    counts, weights = [], []
    for i, lx in enumerate(lexemes):
        spec.params[f"lx{i}"] = _tsquery_literal(lx.text)
        if i in pooled:
            counts.append(
                f"count(*) FILTER (WHERE p.search_vector @@ %(lx{i})s::tsquery)::float8 AS d{i}"
            )
        else:
            spec.params[f"df{i}"] = lx.frequency * agent_rows
            counts.append(f"%(df{i})s::float8 AS d{i}")
        weights.append(f"ln(1 + (greatest(%(n_rows)s, d{i}) - d{i} + 0.5) / (d{i} + 0.5)) AS w{i}")
    dfs = ", ".join(f"d{i}" for i in range(len(lexemes)))
    weights_sql = (
        f"weights AS MATERIALIZED (SELECT {', '.join(weights)}, ARRAY[{dfs}] AS dfs FROM freq)"
    )
    if not pooled:
        return f"\nfreq AS MATERIALIZED (SELECT {', '.join(counts)}),\n{weights_sql}", False
    spec.params["pool"] = " | ".join(_tsquery_literal(lexemes[i].text) for i in sorted(pooled))
    rank = _rank_sql(len(lexemes), "w.w{i}")
    return (
        f"""
pool AS MATERIALIZED (
    SELECT e.id, e.search_vector FROM {spec.table} e
     WHERE {spec.live_where_sql} AND e.search_vector @@ %(pool)s::tsquery
     LIMIT %(pool_max)s
),
freq AS MATERIALIZED (SELECT count(*) AS pooled, {", ".join(counts)} FROM pool p),
{weights_sql},
text_hits AS MATERIALIZED (
    SELECT e.id FROM pool e CROSS JOIN weights w
     ORDER BY {rank} DESC, e.id
     LIMIT %(k_text)s
)""",
        True,
    )


def _vector_ctes(spec: _Spec, k: int, agent_rows: int, known_rows: int | None) -> str:
    """An exact scan when the filters leave at most spec.exact_max rows,
    otherwise the HNSW index with an iterative scan; only one of the two runs
    (the other's one-time filter is false). Without filters, an agent whose
    (cached) row count is far above the limit is not counted again; with
    filters, a set counted in the last minute (`known_rows`) neither."""
    spec.params.update(k_vec=k, exact_max=spec.exact_max, exact_cap=spec.exact_max + 1)
    if spec.actor_graph is not None:
        # The actor's own graph holds this agent's actor's vectors and nothing else
        # (its partition bounds say so), so there is nothing to filter or count: a
        # condition on agent and actor would only offer the planner a scan of the
        # key (PostgreSQL 18 skips through its leading column) to sort instead of
        # the walk. The table is the one ActorGraph registered for this agent and
        # actor, never text from the caller.
        return f"""
vec_rows AS MATERIALIZED (SELECT NULL::bigint AS n),
vec_hits AS MATERIALIZED (
    SELECT v.episode_id AS id, v.embedding <=> %(qv)s::vector AS distance
      FROM {spec.actor_graph} v
     ORDER BY v.embedding <=> %(qv)s::vector
     LIMIT %(k_vec)s
)"""
    if spec.agent_only and agent_rows > 2 * spec.exact_max:
        rows_sql = "SELECT %(exact_cap)s::bigint AS n"
    elif known_rows is not None:
        spec.params["known_rows"] = known_rows
        rows_sql = "SELECT %(known_rows)s::bigint AS n"
    else:
        rows_sql = f"""SELECT count(*) AS n FROM (
        SELECT 1 FROM {spec.table} e WHERE {spec.where_sql} LIMIT %(exact_cap)s
    ) counted"""
    return f"""
vec_rows AS MATERIALIZED (
    {rows_sql}
),
vec_exact AS MATERIALIZED (
    SELECT e.id, e.embedding <=> %(qv)s::vector AS distance
      FROM {spec.table} e
     WHERE (SELECT n FROM vec_rows) <= %(exact_max)s
       AND {spec.where_sql} AND e.embedding IS NOT NULL
     ORDER BY (e.embedding <=> %(qv)s::vector) + 0, e.id
     LIMIT %(k_vec)s
),
vec_ann AS MATERIALIZED (
    SELECT e.id, e.embedding <=> %(qv)s::vector AS distance
      FROM {spec.table} e
     WHERE (SELECT n FROM vec_rows) > %(exact_max)s AND {spec.where_sql}
     ORDER BY e.embedding <=> %(qv)s::vector
     LIMIT %(k_vec)s
),
vec_hits AS (SELECT id, distance FROM vec_exact UNION ALL SELECT id, distance FROM vec_ann)"""


def _exact_vector_sql(spec: _Spec) -> str:
    return f"""
SELECT e.id, e.embedding <=> %(qv)s::vector AS distance
  FROM {spec.table} e
 WHERE {spec.where_sql} AND e.embedding IS NOT NULL
 ORDER BY (e.embedding <=> %(qv)s::vector) + 0, e.id
 LIMIT %(k_vec)s"""


_SHARED_SQL = (
    "cardinality(ARRAY(SELECT unnest(e.entities::text[])"
    " INTERSECT SELECT unnest(%(entities)s::text[])))"
)


# The column is varchar[] and is compared as such, so its GIN index can answer:
# cast to text[], the planner could only scan every row.
ENTITY_MATCH_SQL = "e.entities && %(entities)s::varchar[]"


def _entity_cte(spec: _Spec, entities: Sequence[str], k: int) -> str:
    spec.params.update(entities=list(entities), k_ent=k)
    return f"""
entity_hits AS MATERIALIZED (
    SELECT e.id, {_SHARED_SQL} AS shared
      FROM {spec.table} e
     WHERE {spec.live_where_sql} AND {ENTITY_MATCH_SQL}
     ORDER BY shared DESC, e.occurred_at DESC, e.id
     LIMIT %(k_ent)s
)"""


# What the hybrid statement adds to each candidate's key columns. Its rows
# are read by these names (_positions), never by offset.
_EXTRA = ("text_rank", "distance", "shared", "coverage", "embedded", "vec_rows", "dfs")


def _positions(cursor) -> dict[str, int]:
    """{column name: its index} in the rows of the statement `cursor` ran last."""
    return {column.name: i for i, column in enumerate(cursor.description)}


def _statement(
    spec: _Spec,
    lexemes: list[_Lexeme],
    agent_rows: int,
    total_rows: float,
    vector: Sequence[float] | None,
    entities: Sequence[str],
    k: int,
    known_rows: int | None = None,
    context: bool = False,
) -> str:
    """The hybrid statement: each candidate's key columns and _EXTRA; with
    `context`, also their session neighbours' (see the end)."""
    ctes, sources, joins = [], [], []
    if lexemes:
        text_sql, pooled = _text_ctes(spec, lexemes, agent_rows, total_rows, k)
        ctes.append(text_sql)
        if pooled:
            sources.append("SELECT id FROM text_hits")
        joins.append("CROSS JOIN weights w")
    if vector is not None:
        spec.params["qv"] = vector_param(vector)
        ctes.append(_vector_ctes(spec, k, agent_rows, known_rows))
        sources.append("SELECT id FROM vec_hits")
        joins.append("LEFT JOIN vec_hits v ON v.id = e.id")
    if entities:
        ctes.append(_entity_cte(spec, entities, k))
        sources.append("SELECT id FROM entity_hits")
        joins.append("LEFT JOIN entity_hits n ON n.id = e.id")
    extra = [
        _rank_sql(len(lexemes), "w.w{i}") if lexemes else "NULL::float8",
        "v.distance" if vector is not None else "NULL::float8",
        "n.shared" if entities else "NULL::int",
        _coverage_sql(len(lexemes), "w.w{i}") if lexemes else "NULL::float8",
        "e.embedding IS NOT NULL",
        "(SELECT n FROM vec_rows)" if vector is not None else "NULL::bigint",
        "w.dfs" if lexemes else "NULL::float8[]",
    ]
    columns = [f"e.{c}" for c in spec.key_columns]
    named = [f"{sql} AS {name}" for sql, name in zip(extra, _EXTRA, strict=True)]
    found = f"""SELECT {", ".join(columns + named)}
  FROM candidates c
  JOIN {spec.table} e ON e.id = c.id
  {" ".join(joins)}
 WHERE {spec.live}"""
    head = f"""WITH {",".join(ctes)},
candidates AS ({" UNION ".join(sources)})"""
    if not context:
        return f"{head}\n{found}"
    # The candidates' session neighbours in the same statement, as rows whose
    # of_id names the candidate they neighbour (NULL on the candidates).
    distance = "e.embedding <=> %(qv)s::vector" if vector is not None else "NULL::float8"
    neighbours = neighbours_sql(
        table=spec.table,
        where_sql=spec.live_where_sql,
        candidates="in_session",
        distance_sql=distance,
        columns=spec.key_columns,
    )
    extra = ", ".join("distance" if name == "distance" else "NULL" for name in _EXTRA)
    key = ", ".join(spec.key_columns)
    return f"""{head},
found AS MATERIALIZED ({found}),
in_session AS (SELECT id, session_id, occurred_at FROM found WHERE session_id <> ''),
neighbours (of_id, {key}, distance) AS ({neighbours})
SELECT found.*, NULL::uuid AS of_id FROM found
UNION ALL
SELECT {key}, {extra}, of_id FROM neighbours"""


def _rows_by_id_sql(spec: _Spec, lexemes: list[_Lexeme], entities: Sequence[str]) -> str:
    """The main statement's columns for the rows %(ids)s (rows an exact scan
    added after the index gave up), with the weights the main statement used."""
    rank = _rank_sql(len(lexemes), "%(w{i})s") if lexemes else "NULL::float8"
    coverage = _coverage_sql(len(lexemes), "%(w{i})s") if lexemes else "NULL::float8"
    extra = [
        rank,
        "NULL::float8",
        _SHARED_SQL if entities else "NULL::int",
        coverage,
        "e.embedding IS NOT NULL",
        "NULL::bigint",
        "NULL::float8[]",
    ]
    columns = [f"e.{c}" for c in spec.key_columns]
    named = [f"{sql} AS {name}" for sql, name in zip(extra, _EXTRA, strict=True)]
    return (
        f"SELECT {', '.join(columns + named)}"
        f"  FROM {spec.table} e WHERE e.id = ANY(%(ids)s::uuid[]) AND {spec.live}"
    )
