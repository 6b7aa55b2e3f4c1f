"""Hybrid retrieval over episodes and source chunks, with abstention (DESIGN.md §5).

`episode_search` answers "what happened when…?" and "have I seen this
before?"; `chunk_search` finds passages of registered documents. Both are
scoped to one agent and combine ranked candidate lists by reciprocal rank
fusion (RRF: score = Σ weight / (RRF_K + position)):

* **text** — PostgreSQL full text over `search_vector`. The query's lexemes
  are OR-ed (plainto_tsquery would AND every word, and a natural question
  rarely shares all its words with the answer), and each lexeme's
  `ts_rank` is weighted by its inverse document frequency, which PostgreSQL's
  ranking lacks: a match on "oom" counts for more than one on "task".
  Frequencies come from the planner's statistics (`pg_stats`), cached.
* **vector** — cosine distance over `embedding`. When the agent's (filtered)
  rows are few, an exact scan; otherwise the HNSW index with pgvector's
  iterative scan (`hnsw.iterative_scan = relaxed_order`), so the agent and
  filter conditions cannot starve the result (a plain filtered HNSW scan sees
  only ef_search neighbours of every agent and returns what is left of them),
  re-ordered by true distance; and if the index still returns too few rows,
  an exact scan. Settings are put back afterwards, also inside a caller's
  transaction. A large agent with an HNSW graph of its own (a partial index,
  episodes.agent_graphs) is searched through that graph, which the planner
  takes for the agent's id, and a smaller filtered set goes through the graph
  (settings.EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS).
* **recency** — newer first, a small weight; `recency` in the signals is
  exp-decay with RECENCY_HALF_LIFE_DAYS.
* **entities** — episodes sharing names in `SearchFilters.entities` (also
  brought in as candidates).

Filters (actor, environment, session, goal, task, outcome, time window) apply
inside every list. Rows without an embedding are still found by full text.

Abstention: each candidate's *evidence* is its cosine similarity to the query
(a row without an embedding yet: its IDF-weighted share of the query's lexemes
× UNEMBEDDED_COVERAGE_EVIDENCE). When
the best evidence is below the threshold — the newest `AbstentionCalibration`
for the embedder in use and EVIDENCE_METRIC, else DEFAULT_ABSTENTION_THRESHOLD —
the result is abstained: no hits, the best candidates as near misses. Every
result says which threshold and model applied.

Episodes are read in their session's context (episodes.session_context): the
episode just before and just after each candidate in its session join the
candidates, and each candidate's text rank, coverage and similarity gain
CONTEXT_WEIGHTS × its best neighbour's (the lists rank by those; the signals
keep both, and abstention compares the episode's own values). After fusion
each episode gains SESSION_WEIGHT × the best fused score in its session, and
then its score is scaled within ±SALIENCE_WEIGHT/2 by its effective salience
(episodes.salience: the writer's salience, decayed with time since it
happened or was last used, lifted by uses): among equal matches the salient
and used come first, while a decayed memory asked for precisely still wins. It
is then scaled within ±AUTHORITY_WEIGHT/2 by the episode's authority (the
default order of piper.provenance, operator highest, third party lowest): a
third party's account ranks below the agent's own observation of the same
thing, and is still found when nothing else matches. The query
vector leaves out the names of the agent's actors (episodes.query_analysis)
when episode_search embeds the query itself.

Each signal is one function (`_text_list`, `_vector_list`, `_recency_list`,
`_entity_list`), and SIGNAL_WEIGHTS holds the fusion weights, so a new signal
is a new function and a weight.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from piper import generations
from piper.db import server_bound_cursor, vector_param
from piper.errors import InvalidInput
from piper.provenance import AUTHORITY_ORDER, authority_rank
from piper.tenancy.models import Agent

from .agent_graphs import graph_name
from .models import (
    TEXT_SEARCH_CONFIG,
    AbstentionCalibration,
    ActorGraph,
    Episode,
    EpisodeStatus,
    Outcome,
    SourceChunk,
)
from .salience import effective_salience
from .session_context import (
    neighbours_sql,
    read_neighbours,
    session_neighbours,
    spread,
    symmetric,
)

# ---------------------------------------------------------------- constants

MAX_QUERY_CHARS = 2_000
MAX_LIMIT = 100
# Lexemes a query keeps (the rarest, when it has more).
MAX_QUERY_LEXEMES = 24

# Reciprocal rank fusion: score = Σ SIGNAL_WEIGHTS[s] × contribution / (RRF_K + position
# in s), from 1. 20 rather than the usual 60: top positions count for more (on
# LoCoMo and the calibration set alike).
RRF_K = 20
SIGNAL_WEIGHTS: dict[str, float] = {
    "text": 1.5,
    "vector": 1.0,
    "entities": 0.5,
    "recency": 0.05,
}
# After fusion an episode's score is scaled by 1 + SALIENCE_WEIGHT × (effective
# salience − 0.5): within ±10%, enough to order equal matches by salience and
# use, not to put a vaguer match above a precise one. 0 turns it off.
SALIENCE_WEIGHT = 0.2
# Then by 1 + AUTHORITY_WEIGHT × (trust − 0.5), trust 0 (third party) … 1 (operator)
# from the episode's authority: within ±5%, so among near-equal matches the more
# trusted source comes first, and a precise match from a third party still wins.
AUTHORITY_WEIGHT = 0.1
# A text match contributes coverage ** TEXT_COVERAGE_POWER of the text weight.
TEXT_COVERAGE_POWER = 2
# Each list offers this many candidates per requested hit (at least MIN_CANDIDATES).
CANDIDATES_PER_HIT = 3
MIN_CANDIDATES = 30
MAX_CANDIDATES = 300

RECENCY_HALF_LIFE_DAYS = 30.0

# Session context: the share of its best session neighbour's value a candidate
# gains, per value (0 turns it off). Chosen on LoCoMo (docs/experiments.md).
CONTEXT_WEIGHTS: dict[str, float] = {"text_rank": 0.7, "similarity": 0.5, "coverage": 0.7}
# After fusion, an episode gains this × the best fused score in its session
# (itself included): evidence comes in sessions. 0 turns it off.
SESSION_WEIGHT = 0.5

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
# 200 rather than 100: the recall margin above 0.95 on clustered data is worth
# more than the millisecond or less that 100 saves (docs/experiments.md).
HNSW_EF_SEARCH = 200
# A search whose only filter is an actor with a graph of its own reads that graph
# (episodes.actor_graphs); False leaves the graphs unread, to compare.
READ_ACTOR_GRAPHS = True
# How far an iterative scan may walk the graph before giving up (pgvector's default).
HNSW_MAX_SCAN_TUPLES = 20_000

# Full text: which lexemes bring rows in as candidates (see _pool_plan).
POOL_MAX_GLOBAL_ROWS = 20_000
POOL_MAX_AGENT_ROWS = 1_000
POOL_GLOBAL_BUDGET = 40_000
# The text candidates are ranked among at most this many matching rows (a
# query of only very common words is otherwise a scan of the agent's rows).
POOL_MAX_ROWS = 1_000
ROW_COUNT_CACHE_SECONDS = 60.0
AGENT_COUNT_CAP = 200_000
# ts_rank normalization 1: divide by 1 + log(document length).
TS_RANK_NORMALIZATION = 1
STATS_CACHE_SECONDS = 300.0

# Abstention. A candidate's evidence is its cosine similarity to the query
# (+ COVERAGE_WEIGHT × its IDF-weighted share of the query's lexemes: 0, as any
# weight above 0 lowered balanced accuracy on the shipped calibration set;
# docs/experiments.md). EVIDENCE_METRIC names the formula:
# calibrations are looked up by it, so change it with the formula.
EVIDENCE_METRIC = "cosine"
COVERAGE_WEIGHT = 0.0
# A row without an embedding yet: evidence = this × its IDF-weighted coverage.
UNEMBEDDED_COVERAGE_EVIDENCE = 0.8
# Used until `calibrate_abstention` has recorded a threshold for the embedder in
# use: what it chooses on episodes/calibration_set.json for the default
# embedder (docs/episodes.md, abstention).
DEFAULT_ABSTENTION_THRESHOLD = 0.44
NEAR_MISSES = 5


# ------------------------------------------------------------- public types


@dataclass(frozen=True)
class SearchFilters:
    actor: str | None = None
    environment: str | None = None
    session_id: str | None = None
    goal_id: str | None = None
    task_id: str | None = None
    outcome: str | None = None
    occurred_after: datetime | None = None  # inclusive
    occurred_before: datetime | None = None  # exclusive
    entities: tuple[str, ...] = ()  # boosts episodes sharing them (not a hard filter)


@dataclass(frozen=True)
class Hit:
    kind: str  # "episode" | "chunk"
    obj: Episode | SourceChunk
    score: float  # fused score (reciprocal rank fusion)
    signals: dict[str, float | int | None]


@dataclass(frozen=True)
class SearchResult:
    hits: list[Hit]  # best first, at most `limit`; [] when abstained
    abstained: bool
    near_misses: list[Hit]
    threshold: float
    evidence_score: float | None
    embedding_model: str
    # Where the threshold came from: an AbstentionCalibration id, or "default".
    threshold_source: str = "default"
    metric: str = EVIDENCE_METRIC
    # How the vector list was found: "exact", "hnsw", "hnsw+exact" (the index
    # returned too few rows), "actor_graph" (the actor's own graph,
    # episodes.actor_graphs; "actor_graph+exact" as "hnsw+exact"), or "none"
    # (no embedding to compare with).
    vector_strategy: str = "none"
    lexemes: tuple[str, ...] = ()

    def by_session(self) -> list[dict]:
        """The hits grouped for multi-session synthesis.

        Episodes by session_id, chunks by source; each group's hits in time
        (document) order; groups in order of their first hit. Each group:
        {"session_id", "source_id", "first_at", "last_at", "best_score", "hits"}.
        """
        groups: dict[tuple[str, str], list[Hit]] = {}
        for hit in self.hits:
            groups.setdefault(_group_key(hit), []).append(hit)
        out = []
        for (kind, key), hits in groups.items():
            hits = sorted(hits, key=_time_key)
            if kind == "episode":
                first, last = hits[0].obj.occurred_at, hits[-1].obj.occurred_at
            else:
                first = last = None
            out.append(
                {
                    "session_id": key if kind == "episode" else None,
                    "source_id": uuid.UUID(key) if kind == "chunk" else None,
                    "first_at": first,
                    "last_at": last,
                    "best_score": max(h.score for h in hits),
                    "hits": hits,
                }
            )
        out.sort(key=lambda g: (g["first_at"] is None, g["first_at"] or 0, -g["best_score"]))
        return out


def _group_key(hit: Hit) -> tuple[str, str]:
    if hit.kind == "episode":
        return ("episode", hit.obj.session_id)
    return ("chunk", str(hit.obj.source_id))


def _time_key(hit: Hit):
    if hit.kind == "episode":
        return (hit.obj.occurred_at, str(hit.obj.pk))
    return (hit.obj.ordinal, 0)


# ------------------------------------------------------------ validation


def _clean_query(query: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("q: the query must not be empty", details={"q": ["required"]})
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"q: at most {MAX_QUERY_CHARS:,} characters; shorten the query",
            details={"q": [f"{len(query):,} characters sent"]},
        )
    return query.strip()


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(
            f"limit: must be an integer from 1 to {MAX_LIMIT}", details={"limit": [str(limit)]}
        )


def _check_filters(filters: SearchFilters) -> None:
    from .selectors import time_window_check

    for name in ("occurred_after", "occurred_before"):
        moment = getattr(filters, name)
        if moment is not None and timezone.is_naive(moment):
            raise InvalidInput(
                f"{name}: must carry a time zone, e.g. 2026-01-31T09:00:00Z",
                details={name: ["naive date-time"]},
            )
    time_window_check(filters.occurred_after, filters.occurred_before)
    if filters.outcome is not None and filters.outcome not in Outcome.values:
        raise InvalidInput(
            f"outcome: must be one of {Outcome.values}", details={"outcome": [filters.outcome]}
        )


def _check_embedding(query_embedding: Sequence[float] | None, dimension: int) -> None:
    if query_embedding is not None and len(query_embedding) != dimension:
        raise InvalidInput(
            f"query_embedding: must have {dimension} numbers",
            details={"query_embedding": [f"{len(query_embedding)} given"]},
        )


# ------------------------------------------------------- lexeme statistics

_cache_lock = threading.Lock()
_frequency_cache: dict[
    str, tuple[float, dict[str, float], float | None, float, dict[uuid.UUID, float]]
] = {}
_count_cache: dict[tuple[str, uuid.UUID], tuple[float, int]] = {}
# A filtered set's count (which decides exact scan or graph), also kept for
# ROW_COUNT_CACHE_SECONDS: counting on every search was a measurable share of
# an actor search (docs/benchmarks.md). A count up to a minute old can only
# pick the slower of two correct plans: an exact scan of a set that has grown,
# or the graph for one that has shrunk, which falls back to the exact scan when
# it finds too few.
_filtered_count_cache: dict[tuple, tuple[float, int]] = {}


def _global_frequencies(table: str) -> tuple[dict[str, float], float | None, float]:
    """(lexeme → share of all rows of `table` containing it, for the lexemes the
    planner's statistics list as most common (pg_stats); the share assumed for
    any other lexeme: half the least common listed, as the planner does), cached
    for STATS_CACHE_SECONDS; ({}, None) for a table never analysed; and the
    planner's row count of the whole table."""
    return _statistics(table)[:3]


def _statistics(table: str):
    """_global_frequencies, and the agents the statistics list as most common
    (agent id → share of the rows), in one cached look-up."""
    now = time.monotonic()
    cached = _frequency_cache.get(table)
    if cached is not None and now - cached[0] < STATS_CACHE_SECONDS:
        return cached[1:]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs,"
            "       greatest(c.reltuples, 0)::float8,"
            "       a.most_common_vals::text::uuid[], a.most_common_freqs"
            "  FROM pg_class c"
            "  LEFT JOIN pg_stats s ON s.schemaname = current_schema()"
            "   AND s.tablename = c.relname AND s.attname = 'search_vector'"
            "  LEFT JOIN pg_stats a ON a.schemaname = current_schema()"
            "   AND a.tablename = c.relname AND a.attname = 'agent_id'"
            " WHERE c.oid = %s::regclass",
            [table],
        )
        row = cursor.fetchone()
    frequencies: dict[str, float] = {}
    other = None
    if row and row[0] and row[1]:
        # most_common_elem_freqs: one per element, then min, max and the null share.
        frequencies = dict(zip(row[0], row[1], strict=False))
        other = min(row[1][: len(row[0])]) / 2
    total = float(row[2]) if row else 0.0
    agents = dict(zip(row[3], row[4], strict=True)) if row and row[3] and row[4] else {}
    with _cache_lock:
        _frequency_cache[table] = (now, frequencies, other, total, agents)
    return frequencies, other, total, agents


def _cached_count(cache: dict, key) -> int | None:
    """A count remembered in `cache` less than ROW_COUNT_CACHE_SECONDS ago, else None."""
    cached = cache.get(key)
    if cached is not None and time.monotonic() - cached[0] < ROW_COUNT_CACHE_SECONDS:
        return cached[1]
    return None


def _remember_count(cache: dict, key, count: int) -> None:
    with _cache_lock:
        if len(cache) > 10_000:
            cache.clear()
        cache[key] = (time.monotonic(), count)


def _agent_rows(table: str, agent: Agent) -> int:
    """How many rows the agent has in `table` (the N of inverse document
    frequency): the planner's estimate for an agent its statistics list among
    the most common (counting a large agent costs more than a search), else
    counted (at most AGENT_COUNT_CAP); cached for ROW_COUNT_CACHE_SECONDS."""
    key = (table, agent.pk)
    cached = _cached_count(_count_cache, key)
    if cached is not None:
        return cached
    _, _, total, agents = _statistics(table)
    if agent.pk in agents and total > 0:
        count = max(int(agents[agent.pk] * total), 1)
    else:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE agent_id = %s LIMIT %s) c",
                [agent.pk, AGENT_COUNT_CAP],
            )
            count = cursor.fetchone()[0]
    _remember_count(_count_cache, key, count)
    return count


@generations.on_new_generation
def forget_agent_counts(agent_id: uuid.UUID) -> None:
    """An erasure of the agent's data: its cached counts go, and with them the
    filter values (actor names) their keys hold."""
    with _cache_lock:
        for cache in (_count_cache, _filtered_count_cache):
            for key in [k for k in cache if _names_agent(k, agent_id)]:
                del cache[key]


def _names_agent(key: Any, agent_id: uuid.UUID) -> bool:
    if key == agent_id or key == str(agent_id):
        return True
    if isinstance(key, tuple):
        return any(_names_agent(part, agent_id) for part in key)
    return False


def forget_statistics() -> None:
    """Drop the cached frequencies and row counts (after ANALYZE or a bulk load)."""
    with _cache_lock:
        _frequency_cache.clear()
        _count_cache.clear()
        _filtered_count_cache.clear()


def _filtered_count_key(spec: _Spec) -> tuple:
    """What a filtered set's count depends on: the table, the conditions and
    their values (taken before the statement adds its own parameters), and the
    limit the count is capped at."""
    return (spec.table, spec.where_sql, spec.exact_max, tuple(sorted(spec.params.items())))


def _cached_filtered_count(key: tuple) -> int | None:
    return _cached_count(_filtered_count_cache, key)


@dataclass(frozen=True)
class _Lexeme:
    text: str
    # Its share of all rows, from the statistics; None without statistics.
    frequency: float | None


def _lexemes(texts: list[str], table: str) -> list[_Lexeme]:
    frequencies, other, _ = _global_frequencies(table)
    out = [_Lexeme(t, frequencies.get(t, other)) for t in texts]
    if len(out) > MAX_QUERY_LEXEMES:
        keep = sorted(out, key=lambda lx: lx.frequency or 0.0)[:MAX_QUERY_LEXEMES]
        out = [lx for lx in out if lx in keep]
    return out


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


# --------------------------------------------------------- the SQL pieces


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
    # candidates load only these, the returned hits every column (_with_full_rows).
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


class _Key:
    """What fusion reads of a candidate (spec.key_columns: id, session_id,
    occurred_at; a chunk's id, source_id, ordinal), without a model instance:
    a search weighs ~100 candidates and returns ~10, and a Django instance
    for each was a tenth of the search (docs/benchmarks.md). `tiebreak` is
    computed once here instead of on every sort: equal matches put the newer
    episode first (a chunk: document order)."""

    __slots__ = (
        "pk",
        "session_id",
        "occurred_at",
        "source_id",
        "ordinal",
        "salience",
        "use_count",
        "last_used_at",
        "authority",
        "tiebreak",
    )

    def __init__(self, columns: Sequence[str], row: Sequence) -> None:
        self.session_id = self.occurred_at = self.source_id = self.ordinal = None
        self.salience = self.use_count = self.last_used_at = self.authority = None
        for column, value in zip(columns, row, strict=True):
            setattr(self, "pk" if column == "id" else column, value)
        if self.occurred_at is not None:
            self.tiebreak = (-self.occurred_at.timestamp(), str(self.pk))
        else:
            self.tiebreak = (str(self.source_id), self.ordinal)


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


# Extra columns after the model's, in this order.
_EXTRA = ("text_rank", "distance", "shared", "coverage", "embedded", "vec_rows", "dfs")


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
    # last column names the candidate they neighbour (NULL on the candidates).
    distance = "e.embedding <=> %(qv)s::vector" if vector is not None else "NULL::float8"
    neighbours = neighbours_sql(
        table=spec.table,
        where_sql=spec.live_where_sql,
        candidates="in_session",
        distance_sql=distance,
        columns=spec.key_columns,
    )
    blanks = ", ".join(["NULL"] * (len(_EXTRA) - 2))
    key = ", ".join(spec.key_columns)
    return f"""{head},
found AS MATERIALIZED ({found}),
in_session AS (SELECT id, session_id, occurred_at FROM found WHERE session_id <> ''),
neighbours (of_id, {key}, distance) AS ({neighbours})
SELECT found.*, NULL::uuid FROM found
UNION ALL
SELECT {key}, NULL, distance, {blanks}, of_id FROM neighbours"""


def _rows_by_id_sql(spec: _Spec, lexemes: list[_Lexeme], entities: Sequence[str]) -> str:
    """The main statement's columns for the rows %(ids)s (rows an exact scan
    added after the index gave up), with the weights the main statement used."""
    rank = _rank_sql(len(lexemes), "%(w{i})s") if lexemes else "NULL::float8"
    coverage = _coverage_sql(len(lexemes), "%(w{i})s") if lexemes else "NULL::float8"
    columns = [f"e.{c}" for c in spec.key_columns]
    return (
        f"SELECT {', '.join(columns)}, {rank}, NULL::float8,"
        f" {_SHARED_SQL if entities else 'NULL::int'}, {coverage}, e.embedding IS NOT NULL,"
        f" NULL::bigint, NULL::float8[]"
        f"  FROM {spec.table} e WHERE e.id = ANY(%(ids)s::uuid[]) AND {spec.live}"
    )


# ------------------------------------------------------------ the signals


@dataclass
class _Candidate:
    obj: _Key  # the key columns only; the returned hits are loaded whole (_full_rows)
    text_rank: float | None
    similarity: float | None
    shared: int | None
    coverage: float | None
    embedded: bool
    signals: dict[str, float | int | None] = field(default_factory=dict)
    score: float = 0.0
    evidence: float | None = None
    # text_rank / similarity / coverage with the session context (what the lists rank by)
    context: dict[str, float | None] = field(default_factory=dict)

    def ranked(self, name: str) -> float | None:
        return self.context[name] if name in self.context else getattr(self, name)


# Each returns the candidates it ranks, best first, and records its signal;
# `_fuse` turns positions into the fused score.


def _text_list(cands: list[_Candidate], **_) -> list[_Candidate]:
    for c in cands:
        c.signals["text_rank"] = None if c.text_rank is None else round(c.text_rank, 6)
    ranked = [c for c in cands if c.ranked("text_rank") is not None]
    return sorted(ranked, key=lambda c: (-round(c.ranked("text_rank"), 9), *c.obj.tiebreak))


def _vector_list(cands: list[_Candidate], **_) -> list[_Candidate]:
    for c in cands:
        c.signals["vector_similarity"] = None if c.similarity is None else round(c.similarity, 6)
    ranked = [c for c in cands if c.ranked("similarity") is not None]
    return sorted(ranked, key=lambda c: (-round(c.ranked("similarity"), 9), *c.obj.tiebreak))


def _recency_list(cands: list[_Candidate], *, now: datetime, **_) -> list[_Candidate]:
    half_life = RECENCY_HALF_LIFE_DAYS * 86_400.0
    for c in cands:
        age = max((now - c.obj.occurred_at).total_seconds(), 0.0)
        c.signals["recency"] = round(math.exp(-math.log(2) * age / half_life), 6)
    return sorted(cands, key=lambda c: (-c.signals["recency"], *c.obj.tiebreak))


def _entity_list(cands: list[_Candidate], **_) -> list[_Candidate]:
    for c in cands:
        c.signals["shared_entities"] = c.shared or 0
    ranked = [c for c in cands if c.shared]
    return sorted(ranked, key=lambda c: (-c.shared, *c.obj.tiebreak))


# The lists each kind of search fuses; an entity list only when entities are given.
EPISODE_SIGNALS = {
    "text": _text_list,
    "vector": _vector_list,
    "recency": _recency_list,
    "entities": _entity_list,
}
CHUNK_SIGNALS = {"text": _text_list, "vector": _vector_list}


def _contribution(name: str, c: _Candidate) -> float:
    """How much of its list's weight a candidate's position carries: a text
    match counts by the square of the share of the query it covers, so a row
    sharing one common word with a question does not outrank the semantic
    match (see the module doc)."""
    if name == "text":
        return min(c.ranked("coverage") or 0.0, 1.0) ** TEXT_COVERAGE_POWER
    return 1.0


def _fuse(lists: dict[str, list[_Candidate]]) -> None:
    for name, ranked in lists.items():
        weight = SIGNAL_WEIGHTS[name]
        for position, c in enumerate(ranked, start=1):
            c.signals[f"{name}_position"] = position
            c.score += weight * _contribution(name, c) / (RRF_K + position)


def _session_boost(cands: list[_Candidate]) -> None:
    """Each episode with a session gains SESSION_WEIGHT × the best fused score
    among its session's candidates (`session_best` in its signals)."""
    best: dict[str, float] = {}
    for c in cands:
        if c.obj.session_id:
            best[c.obj.session_id] = max(best.get(c.obj.session_id, 0.0), c.score)
    for c in cands:
        if c.obj.session_id:
            c.signals["session_best"] = round(best[c.obj.session_id], 6)
            c.score += SESSION_WEIGHT * best[c.obj.session_id]


def _salience_scale(cands: list[_Candidate], now: datetime) -> None:
    """Scale each fused score by the episode's effective salience (`salience` in
    its signals; see SALIENCE_WEIGHT)."""
    for c in cands:
        value = effective_salience(
            salience=c.obj.salience,
            occurred_at=c.obj.occurred_at,
            last_used_at=c.obj.last_used_at,
            use_count=c.obj.use_count,
            now=now,
        )
        c.signals["salience"] = round(value, 6)
        c.score *= 1.0 + SALIENCE_WEIGHT * (value - 0.5)


def _trust(authority: str | None) -> float:
    """0 for the least trusted level of the default order, 1 for the most."""
    levels = len(AUTHORITY_ORDER)
    rank = authority_rank(authority or "", AUTHORITY_ORDER)
    return 0.0 if rank == 0 else (rank - 1) / (levels - 1)


def _authority_scale(cands: list[_Candidate]) -> None:
    """Scale each fused score by the episode's authority (`trust` in its signals;
    see AUTHORITY_WEIGHT)."""
    for c in cands:
        trust = _trust(c.obj.authority)
        c.signals["trust"] = round(trust, 6)
        c.score *= 1.0 + AUTHORITY_WEIGHT * (trust - 0.5)


def _evidence(c: _Candidate) -> float | None:
    """What abstention compares with the threshold (EVIDENCE_METRIC)."""
    if c.similarity is not None:
        return c.similarity + COVERAGE_WEIGHT * (c.coverage or 0.0)
    if c.coverage is not None:
        return UNEMBEDDED_COVERAGE_EVIDENCE * c.coverage
    return None


# ------------------------------------------------------------ the search


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
    than walk their graph, which is several times faster (docs/experiments.md).
    The '[0]'::vector cast loads pgvector (and defines the hnsw.* settings)
    while the statement is planned."""
    extra, source = "", ""
    params: list[Any] = [TEXT_SEARCH_CONFIG, query, model_name, EVIDENCE_METRIC]
    if ef_search is not None:
        extra = (
            ", '[0]'::vector IS NOT NULL, "
            + ", ".join(f"current_setting('{n}')" for n in HNSW_SETTINGS)
            + ", set_config('hnsw.iterative_scan', 'relaxed_order', true)"
            ", set_config('hnsw.ef_search', %s, true)"
            ", set_config('hnsw.max_scan_tuples', %s, true)"
            ", set_config('max_parallel_workers_per_gather', '0', true)"
        )
        params += [str(ef_search), str(HNSW_MAX_SCAN_TUPLES)]
    if own_graph is not None:
        extra += (
            ", coalesce((SELECT indisvalid AND indisready FROM pg_index"
            " WHERE indexrelid = to_regclass(%s)), false)"
        )
        params.append(own_graph)
    if actor is not None:
        extra += (
            ", leaf.name, set_config('enable_seqscan',"
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
        "             ORDER BY positions[1], lexeme),"
        f" (SELECT ARRAY[id::text, threshold::text] FROM {AbstentionCalibration._meta.db_table}"
        "   WHERE embedding_model = %s AND metric = %s ORDER BY created_at DESC, id DESC LIMIT 1)"
        + extra
        + source,
        params + list(actor or ()),
    )
    row = cursor.fetchone()
    previous = tuple(row[3 : 3 + len(HNSW_SETTINGS)]) if ef_search is not None else None
    tail = len(row) - (2 if actor is not None else 0)
    has_graph = bool(row[tail - 1]) if own_graph is not None else False
    actor_graph = row[tail] if actor is not None else None
    return list(row[0]), row[1], previous, has_graph, actor_graph


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
            threshold, source = float(calibration[1]), calibration[0]
        strategy = "none"
        rows: list[tuple] = []
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
        n = len(spec.key_columns)
        neighbour_rows: list[tuple] | None = None
        if context:
            # (the candidate it neighbours, its key columns, its distance)
            neighbour_rows = [(r[-1], *r[:n], r[n + 1]) for r in rows if r[-1] is not None]
            rows = [r[:-1] for r in rows if r[-1] is None]
        if vector is not None:
            if spec.actor_graph is not None:
                strategy = "actor_graph"
            else:
                counted = known_rows
                if counted is None:
                    counted = next((r[n + 5] for r in rows if r[n + 5] is not None), None)
                if counted is None:
                    cursor.execute(
                        f"SELECT count(*) FROM (SELECT 1 FROM {spec.table} e"
                        f" WHERE {spec.where_sql} LIMIT %(exact_cap)s) c",
                        spec.params,
                    )
                    counted = cursor.fetchone()[0]
                if known_rows is None:
                    _remember_count(_filtered_count_cache, count_key, counted)
                strategy = "exact" if counted <= spec.exact_max else "hnsw"
            found = sum(1 for r in rows if r[n + 1] is not None)
            if strategy != "exact" and found < k:
                # A graph (the agent's or the actor's) gave up before k rows.
                rows = _with_exact_vectors(cursor, spec, rows, lexemes, entities)
                strategy += "+exact"
                neighbour_rows = None  # other candidates now: _with_session_context asks again
            if nested:
                cursor.execute(
                    "SELECT " + ", ".join(f"set_config('{s}', %s, true)" for s in HNSW_SETTINGS),
                    list(previous),
                )
    cands = []
    for row in rows:
        text_rank, distance, shared, coverage, embedded = row[n : n + 5]
        cands.append(
            _Candidate(
                obj=_Key(spec.key_columns, row[:n]),
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
    cursor, spec: _Spec, rows: list[tuple], lexemes: list[_Lexeme], entities: Sequence[str]
) -> list[tuple]:
    """The index scan gave up before finding k rows (a filter few rows pass):
    take the vector list from an exact scan instead, fetching the rows it adds."""
    n = len(spec.key_columns)
    cursor.execute(_exact_vector_sql(spec), spec.params)
    exact = dict(cursor.fetchall())
    id_at = spec.key_columns.index("id")
    by_id: dict[uuid.UUID, list] = {}
    for row in rows:
        row = list(row)
        row[n + 1] = exact.get(row[id_at])
        by_id[row[id_at]] = row
    missing = [pk for pk in exact if pk not in by_id]
    if missing:
        weights = {}
        dfs = next((r[n + 6] for r in rows if r[n + 6] is not None), None)
        if lexemes and dfs is not None:
            n_rows = spec.params["n_rows"]
            for i, d in enumerate(dfs):
                weights[f"w{i}"] = math.log(1 + (max(n_rows, d) - d + 0.5) / (d + 0.5))
        sql = _rows_by_id_sql(spec, lexemes if weights else [], entities)
        cursor.execute(sql, {**spec.params, **weights, "ids": missing})
        for row in cursor.fetchall():
            row = list(row)
            row[n + 1] = exact[row[id_at]]
            by_id[row[id_at]] = row
    return [
        tuple(r) for r in by_id.values() if r[n] is not None or r[n + 1] is not None or r[n + 2]
    ]


def _with_session_context(
    spec: _Spec,
    cands: list[_Candidate],
    vector: Sequence[float] | None,
    fetched: tuple[dict, dict] | None = None,
) -> list[_Candidate]:
    """The candidates plus their session neighbours (under the same filters:
    `fetched` when the hybrid statement brought them, else read here), each
    with its values spread from its neighbours into `context`."""
    if not cands:
        return cands
    by_id = {c.obj.pk: c for c in cands}
    if fetched is not None:
        neighbours, rows = fetched
    else:
        with connection.cursor() as cursor:
            neighbours, rows = session_neighbours(
                table=spec.table,
                where_sql=spec.live_where_sql,
                params=spec.params,
                ids=list(by_id),
                query_vector=spec.params.get("qv") if vector is not None else None,
                cursor=cursor,
                columns=spec.key_columns,
            )
    for pk, (row, distance) in rows.items():
        if pk in by_id:
            continue
        by_id[pk] = _Candidate(
            obj=_Key(spec.key_columns, row),
            text_rank=None,
            similarity=None if distance is None else 1.0 - distance,
            shared=None,
            coverage=None,
            embedded=distance is not None,
        )
    related = symmetric(neighbours)
    floors = {
        "similarity": min(
            (c.similarity for c in by_id.values() if c.similarity is not None), default=0.0
        )
    }
    for name, weight in CONTEXT_WEIGHTS.items():
        if not weight:
            continue
        values = spread(
            {pk: getattr(c, name) for pk, c in by_id.items()},
            related,
            weight=weight,
            floor=floors.get(name, 0.0),
        )
        for pk, c in by_id.items():
            c.context[name] = values.get(pk)
            if values.get(pk) != getattr(c, name):
                c.signals[f"context_{name}"] = round(values[pk], 6)
    return list(by_id.values())


def _full_rows(spec: _Spec, cands: list[_Candidate]) -> list[tuple[_Candidate, Any]]:
    """Each candidate with its row as a model instance, every column loaded
    (the candidates carry only spec.key_columns): one statement for all, its
    rows in binary, which load faster than text (docs/benchmarks.md)."""
    if not cands:
        return []
    columns = ", ".join(f"e.{c}" for c in spec.columns)
    with server_bound_cursor(binary=True) as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {spec.table} e WHERE e.id = ANY(%s::uuid[]) AND {spec.live}",
            [[c.obj.pk for c in cands]],
        )
        rows = cursor.fetchall()
    attnames = _attnames(spec.model, spec.columns)
    id_at = spec.columns.index("id")
    by_id = {row[id_at]: row for row in rows}
    out = []
    for c in cands:
        if c.obj.pk not in by_id:
            # deleted (a purge) or withdrawn since the search read it: not an answer any more
            continue
        obj = spec.model.from_db(connection.alias, attnames, by_id[c.obj.pk])
        obj.embedded = c.embedded  # as the selectors annotate it (the vector is not loaded)
        out.append((c, obj))
    return out


def _canonical_hits(spec: _Spec, cands: list[_Candidate], limit: int) -> list[Hit]:
    """The best `limit` candidates as hits, a collapsed duplicate answered by its
    canonical episode (once, at the duplicate's rank; signal `duplicate_of`). With no
    duplicate among them — almost always — this is exactly _full_rows over the first
    `limit`, and costs no statement more; a group that collapsed makes room, filled
    from the next candidates."""
    hits: list[Hit] = []
    shown: set = set()
    start = 0
    while len(hits) < limit and start < len(cands):
        chunk = cands[start : start + limit - len(hits)]
        start += len(chunk)
        loaded = _full_rows(spec, chunk)
        wanted = {obj.canonical_id for _, obj in loaded if obj.canonical_id is not None}
        canonical = _episodes_by_id(spec, wanted) if wanted else {}
        merged = False
        for c, obj in loaded:
            signals = c.signals
            if obj.canonical_id is not None and obj.canonical_id in canonical:
                answer = canonical[obj.canonical_id]
                signals = {**c.signals, "duplicate_of": str(answer.pk)}
                signals["collapsed_hit"] = str(obj.pk)
                obj = answer
            if obj.pk in shown:
                merged = True
                continue
            shown.add(obj.pk)
            hits.append(Hit(spec.kind, obj, round(c.score, 6), signals))
        if not merged:
            break  # nothing collapsed: what _full_rows kept is the answer, as before
    return hits


def _episodes_by_id(spec: _Spec, ids: set) -> dict:
    """{canonical episode id: the version that answers for its group}, every column but
    the search columns. A corrected canonical answers with the version that corrects it
    (its last correction): its duplicates repeated what it said, and a correction of
    what the search showed for them all is not to be undone by a copy of the old text.
    A retracted one (or one whose last correction was retracted) is not among them: its
    duplicates answer for themselves."""
    columns = ", ".join(f"e.{c}" for c in spec.columns)
    with server_bound_cursor(binary=True) as cursor:
        cursor.execute(
            f"WITH RECURSIVE v(asked, id, next) AS ("
            f" SELECT o.id, o.id, o.superseded_by FROM {spec.table} o"
            f"  WHERE o.id = ANY(%s::uuid[])"
            f" UNION ALL"
            f" SELECT v.asked, n.id, n.superseded_by FROM v JOIN {spec.table} n ON n.id = v.next)"
            f" SELECT v.asked, {columns}, e.embedding IS NOT NULL"
            f" FROM v JOIN {spec.table} e ON e.id = v.id"
            f" WHERE v.next IS NULL AND {spec.live}",
            [list(ids)],
        )
        rows = cursor.fetchall()
    attnames = _attnames(spec.model, spec.columns)
    found = {}
    for row in rows:
        obj = spec.model.from_db(connection.alias, attnames, row[1:-1])
        obj.embedded = row[-1]
        found[row[0]] = obj
    return found


def _search(
    *,
    spec: _Spec,
    agent: Agent,
    query: str,
    query_embedding: Sequence[float] | None,
    entities: Sequence[str],
    limit: int,
    now: datetime | None,
    abstain: bool,
    signals: dict[str, Callable[..., list[_Candidate]]],
) -> SearchResult:
    from piper.embeddings import get_embedder

    embedder = get_embedder()
    _check_embedding(query_embedding, embedder.dimension)
    vector = query_embedding if query_embedding is not None else embedder.embed_one(query)
    k = min(max(limit * CANDIDATES_PER_HIT, MIN_CANDIDATES), MAX_CANDIDATES)
    context = spec.kind == "episode" and any(CONTEXT_WEIGHTS.values())
    fetched = _fetch(spec, agent, query, vector, entities, k, embedder.name, context)
    cands = fetched.cands
    if context:
        cands = _with_session_context(spec, cands, vector, fetched.context)

    now = now or timezone.now()
    lists = {}
    for name, signal in signals.items():
        if name == "entities" and not entities:
            continue
        lists[name] = signal(cands, now=now)
    _fuse(lists)
    if spec.kind == "episode" and SESSION_WEIGHT:
        _session_boost(cands)
    if spec.kind == "episode" and SALIENCE_WEIGHT:
        _salience_scale(cands, now)
    if spec.kind == "episode" and AUTHORITY_WEIGHT:
        _authority_scale(cands)
    for c in cands:
        c.evidence = _evidence(c)
        c.signals["coverage"] = None if c.coverage is None else round(c.coverage, 6)
        c.signals["evidence"] = None if c.evidence is None else round(c.evidence, 6)
        c.signals["embedded"] = int(c.embedded)
    cands.sort(key=lambda c: (-round(c.score, 12), *c.obj.tiebreak))

    evidence = max((c.evidence for c in cands if c.evidence is not None), default=None)
    abstained = abstain and (evidence is None or evidence < fetched.threshold)
    shown = min(limit, NEAR_MISSES) if abstained else limit
    if spec.kind == "episode":
        hits = _canonical_hits(spec, cands, shown)
    else:
        hits = [
            Hit(spec.kind, obj, round(c.score, 6), c.signals)
            for c, obj in _full_rows(spec, cands[:shown])
        ]
    return SearchResult(
        hits=[] if abstained else hits,
        abstained=abstained,
        near_misses=hits if abstained else [],
        threshold=fetched.threshold,
        evidence_score=None if evidence is None else round(evidence, 6),
        embedding_model=embedder.name,
        threshold_source=fetched.threshold_source,
        vector_strategy=fetched.strategy,
        lexemes=fetched.lexemes,
    )


def episode_search(
    *,
    agent: Agent,
    query: str,
    query_embedding: list[float] | None = None,
    filters: SearchFilters | None = None,
    limit: int = 10,
    now: datetime | None = None,
    abstain: bool = True,
) -> SearchResult:
    """This agent's episodes that best answer `query`, best first (see the module doc).

    Filters are hard conditions on every candidate list; `filters.entities`
    only boosts. The query is embedded with the process embedder — without
    the names of the agent's actors (episodes.query_analysis.dense_query_text)
    — unless `query_embedding` (from the same model) is given. `now` anchors recency
    (default: the current time). With `abstain`, a result whose best evidence
    is below the threshold has no hits and up to NEAR_MISSES near misses.
    Raises InvalidInput for an empty query or one over MAX_QUERY_CHARS, a limit
    outside 1..MAX_LIMIT, an unknown outcome, a naive time, or a window that
    ends before it starts.
    """
    from .services import normalise_entities

    query = _clean_query(query)
    _check_limit(limit)
    filters = filters or SearchFilters()
    _check_filters(filters)
    generations.current(agent.pk)  # after an erasure, the cached counts and names go
    if query_embedding is None:
        from piper.embeddings import get_embedder

        from .query_analysis import dense_query_text

        # The agent's actor names weigh on the vector, not on what sets episodes apart.
        query_embedding = get_embedder().embed_one(dense_query_text(agent_id=agent.pk, query=query))
    return _search(
        spec=_episode_spec(agent, filters),
        agent=agent,
        query=query,
        query_embedding=query_embedding,
        entities=normalise_entities(filters.entities),
        limit=limit,
        now=now,
        abstain=abstain,
        signals=EPISODE_SIGNALS,
    )


def chunk_search(
    *,
    agent: Agent,
    query: str,
    query_embedding: list[float] | None = None,
    source_id: uuid.UUID | None = None,
    limit: int = 10,
    abstain: bool = True,
) -> SearchResult:
    """This agent's source chunks (of one source, with `source_id`) that best
    answer `query`: full text and vector fused as in episode_search, without
    recency or entities. Same errors and abstention."""
    query = _clean_query(query)
    _check_limit(limit)
    return _search(
        spec=_chunk_spec(agent, source_id),
        agent=agent,
        query=query,
        query_embedding=query_embedding,
        entities=(),
        limit=limit,
        now=None,
        abstain=abstain,
        signals=CHUNK_SIGNALS,
    )
