"""Planner statistics and row counts a search plans with, cached per process.

Inverse document frequencies need each lexeme's share of the rows and the
agent's row count, and the vector list's choice between an exact scan and a
graph needs the filtered set's size. Reading them on every search would cost
more than the search, so they are kept for a while: a stale figure can only
pick the slower of two correct plans. An erasure drops the agent's entries
(piper.generations), since their keys hold filter values such as actor names.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connection

from piper import generations
from piper.tenancy.models import Agent

if TYPE_CHECKING:
    from .plan import _Spec

# Lexemes a query keeps (the rarest, when it has more).
MAX_QUERY_LEXEMES = 24
STATS_CACHE_SECONDS = 300.0
ROW_COUNT_CACHE_SECONDS = 60.0
AGENT_COUNT_CAP = 200_000

_cache_lock = threading.Lock()
_frequency_cache: dict[
    str, tuple[float, dict[str, float], float | None, float, dict[uuid.UUID, float]]
] = {}
_count_cache: dict[tuple[str, uuid.UUID], tuple[float, int]] = {}
# A filtered set's count (which decides exact scan or graph), also kept for
# ROW_COUNT_CACHE_SECONDS: a count up to a minute old can only pick the slower
# of two correct plans: an exact scan of a set that has grown, or the graph for
# one that has shrunk, which falls back to the exact scan when it finds too few.
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
            "SELECT s.most_common_elems::text::text[] AS lexemes,"
            "       s.most_common_elem_freqs AS lexeme_freqs,"
            "       greatest(c.reltuples, 0)::float8 AS total,"
            "       a.most_common_vals::text::uuid[] AS agents,"
            "       a.most_common_freqs AS agent_freqs"
            "  FROM pg_class c"
            "  LEFT JOIN pg_stats s ON s.schemaname = current_schema()"
            "   AND s.tablename = c.relname AND s.attname = 'search_vector'"
            "  LEFT JOIN pg_stats a ON a.schemaname = current_schema()"
            "   AND a.tablename = c.relname AND a.attname = 'agent_id'"
            " WHERE c.oid = %s::regclass",
            [table],
        )
        found = cursor.fetchone()
        row = dict(zip((c.name for c in cursor.description), found, strict=True)) if found else {}
    frequencies: dict[str, float] = {}
    other = None
    lexemes, lexeme_freqs = row.get("lexemes"), row.get("lexeme_freqs")
    if lexemes and lexeme_freqs:
        # most_common_elem_freqs: one per element, then min, max and the null share.
        frequencies = dict(zip(lexemes, lexeme_freqs, strict=False))
        other = min(lexeme_freqs[: len(lexemes)]) / 2
    total = float(row["total"]) if row else 0.0
    agents, agent_freqs = row.get("agents"), row.get("agent_freqs")
    agents = dict(zip(agents, agent_freqs, strict=True)) if agents and agent_freqs else {}
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


def _remember_filtered_count(key: tuple, count: int) -> None:
    _remember_count(_filtered_count_cache, key, count)


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
