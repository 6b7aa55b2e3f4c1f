"""Tenant filtering must not cost recall: one agent's vector search, when the agent
holds a tenth of the rows, against an exact scan of its rows (the HNSW index on).

10 agents × 3,000 episodes with unit vectors near 50 random centres, set in bulk SQL
(no model; the same rows every run, only the HNSW graph's random levels differ).
A plain filtered HNSW scan sees only ef_search neighbours of every agent and
keeps this agent's few of them; the iterative scan keeps walking the graph.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from episodes import retrieval
from episodes.retrieval import SearchFilters, episode_search, plan
from episodes.tests.retrieval_fixtures import (
    T0,
    bulk_episodes,
    clustered_vectors,
    hnsw_built_after,
    record,
    unit,
)
from piper.tenancy.services import agent_create

pytestmark = pytest.mark.django_db

AGENTS, PER_AGENT, QUERIES, K = 10, 3_000, 20, 10
# Words no episode holds: the fused order is the vector order (and recency).
NO_WORDS = "qqqzzz"


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    """Built once for the module and committed (searches must see the index and
    the statistics); removed afterwards."""
    with django_db_blocker.unblock():
        run = uuid.uuid4().hex[:8]
        agents = [agent_create(name=f"recall-{run}-{i}") for i in range(AGENTS)]
        try:
            for i, agent in enumerate(agents):
                bulk_episodes(agent, PER_AGENT, start=T0 + timedelta(days=i))
            with hnsw_built_after(), transaction.atomic():
                # Not tighter clusters (noise 0.3): in about one graph build of
                # four the unfiltered HNSW search itself (ef_search 200, no
                # agent condition) missed whole clusters, and the test measured
                # the build's luck rather than the cost of the agent filter.
                centres = clustered_vectors(agents)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE episodes_episode")
            retrieval.forget_statistics()
            yield agents, centres
        finally:
            _remove(agents)
            retrieval.forget_statistics()


@pytest.fixture(autouse=True)
def _hnsw_above_2000_rows(monkeypatch):
    # The world's agents hold 3,000 rows each: above this, below the default
    # limit, so the agent-wide searches here take the index as a big agent's do.
    monkeypatch.setattr(plan, "EXACT_SCAN_MAX_ROWS", 2_000)


def _remove(agents) -> None:
    ids = [a.pk for a in agents]
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM episodes_episode WHERE agent_id = ANY(%s::uuid[])", [ids])
        # The ledger is append-only for everyone but a test's cleanup.
        cursor.execute("ALTER TABLE ledger_event DISABLE TRIGGER USER")
        try:
            cursor.execute("DELETE FROM ledger_event WHERE agent_id = ANY(%s::uuid[])", [ids])
        finally:
            cursor.execute("ALTER TABLE ledger_event ENABLE TRIGGER USER")
        cursor.execute("DELETE FROM ledger_chainhead WHERE agent_id = ANY(%s::uuid[])", [ids])
        cursor.execute("DELETE FROM tenancy_agent WHERE id = ANY(%s::uuid[])", [ids])


def _queries(centres, seed=11):
    rng = random.Random(seed)
    out = []
    for _ in range(QUERIES):
        centre = rng.choice(centres)
        out.append(unit([x + rng.gauss(0, 0.02) for x in centre]))
    return out


def _exact(agent, vector, *, where="", params=(), k=K) -> list:
    """The true nearest rows of the agent: a sequential scan, no index."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM episodes_episode WHERE agent_id = %s AND embedding IS NOT NULL"
            f" {where} ORDER BY (embedding <=> %s::vector) + 0, id LIMIT %s",
            [agent.pk, *params, str(vector), k],
        )
        return [row[0] for row in cursor.fetchall()]


def _vector_top(result, k=K) -> list:
    ranked = [h for h in result.hits if h.signals.get("vector_position")]
    ranked.sort(key=lambda h: h.signals["vector_position"])
    return [h.obj.pk for h in ranked[:k]]


def _search(agent, vector, filters=None):
    return episode_search(
        agent=agent,
        query=NO_WORDS,
        query_embedding=vector,
        filters=filters,
        limit=2 * K,
        abstain=False,
    )


def test_a_plain_filtered_hnsw_scan_returns_fewer_than_k(world):
    agents, centres = world
    agent = agents[3]
    short = []
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', 'off', true),"
            " set_config('hnsw.ef_search', '40', true), set_config('enable_sort', 'off', true)"
        )
        sql = (
            "SELECT id FROM episodes_episode WHERE agent_id = %s"
            " ORDER BY embedding <=> %s::vector LIMIT 10"
        )
        for vector in _queries(centres):
            cursor.execute("EXPLAIN " + sql, [agent.pk, str(vector)])
            assert "episodes_embedding_hnsw" in " ".join(r[0] for r in cursor.fetchall())
            cursor.execute(sql, [agent.pk, str(vector)])
            short.append(len(cursor.fetchall()))
    print("plain filtered HNSW rows of 10:", short)
    # The agent holds about a tenth of the 40 neighbours the scan looks at.
    assert sum(1 for n in short if n < K) >= QUERIES * 3 // 4
    assert sum(short) / len(short) < 6


def test_iterative_hnsw_recall_against_exact_is_at_least_095(world):
    agents, centres = world
    agent = agents[3]
    recalls = []
    for vector in _queries(centres):
        result = _search(agent, vector)
        assert result.vector_strategy == "hnsw"
        exact = _exact(agent, vector)
        found = _vector_top(result)
        assert len(found) == K
        assert all(h.obj.agent_id == agent.pk for h in result.hits)
        recalls.append(len(set(found) & set(exact)) / K)
    print("recall@10 vs exact:", sum(recalls) / len(recalls))
    assert sum(recalls) / len(recalls) >= 0.95, recalls


def test_an_agent_far_above_the_exact_limit_is_not_counted_again(world, monkeypatch):
    agents, centres = world
    monkeypatch.setattr(plan, "EXACT_SCAN_MAX_ROWS", 1_000)  # 3,000 rows > 2 x 1,000
    with CaptureQueriesContext(connection) as queries:
        result = _search(agents[5], _queries(centres)[0])
    main = next(q["sql"] for q in queries.captured_queries if "vec_ann" in q["sql"])
    assert "counted" not in main
    assert result.vector_strategy == "hnsw"
    with CaptureQueriesContext(connection) as queries:
        _search(agents[5], _queries(centres)[0], SearchFilters(actor="actor-1"))
    main = next(q["sql"] for q in queries.captured_queries if "vec_ann" in q["sql"])
    assert "counted" in main  # a filter's rows are always counted


def test_the_search_statement_uses_the_hnsw_index(world):
    agents, centres = world
    vector = _queries(centres)[0]
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            _search(agents[5], vector)
        main = next(q["sql"] for q in queries.captured_queries if "vec_ann" in q["sql"])
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
                " set_config('max_parallel_workers_per_gather', '0', true)"
            )
            cursor.execute("EXPLAIN ANALYZE " + main)
            plan = "\n".join(r[0] for r in cursor.fetchall())
    assert "Index Scan using episodes_embedding_hnsw" in plan


def test_recall_holds_with_a_filter_inside_the_agent(world, monkeypatch):
    agents, centres = world
    agent = agents[7]
    # The graph walk under a filter, not the exact scan the actor's rows would get.
    monkeypatch.setattr(plan, "EXACT_SCAN_MAX_ROWS", 0)
    recalls = []
    for vector in _queries(centres, seed=12):
        result = _search(agent, vector, SearchFilters(actor="actor-3"))
        assert result.vector_strategy == "hnsw"
        assert {h.obj.actor for h in result.hits} == {"actor-3"}
        exact = _exact(agent, vector, where="AND actor = %s", params=["actor-3"])
        recalls.append(len(set(_vector_top(result)) & set(exact)) / K)
    print("recall@10 vs exact, actor filter:", sum(recalls) / len(recalls))
    assert sum(recalls) / len(recalls) >= 0.95, recalls


def test_a_narrow_time_window_is_an_exact_scan(world):
    agents, centres = world
    agent = agents[2]
    start = T0 + timedelta(days=2, minutes=PER_AGENT - 1000)
    for vector in _queries(centres)[:5]:
        result = _search(agent, vector, SearchFilters(occurred_after=start))
        assert result.vector_strategy == "exact"
        exact = _exact(agent, vector, where="AND occurred_at >= %s", params=[start])
        assert _vector_top(result) == exact


def test_an_actor_filter_counts_its_own_rows_and_scans_them_exactly(world):
    agents, centres = world
    agent = agents[6]
    for vector in _queries(centres, seed=13)[:5]:
        result = _search(agent, vector, SearchFilters(actor="actor-3"))
        assert result.vector_strategy == "exact"
        exact = _exact(agent, vector, where="AND actor = %s", params=["actor-3"])
        assert _vector_top(result) == exact


def test_a_filter_without_a_covering_index_allows_fewer_exact_rows(world, monkeypatch):
    agents, centres = world
    agent = agents[6]
    vector = _queries(centres, seed=14)[0]
    # ~430 rows are actor-3's (1 in 7); every row has the empty environment, so
    # adding it keeps the same rows, but each would be a heap and TOAST fetch.
    monkeypatch.setattr(plan, "EXACT_SCAN_HEAP_MAX_ROWS", 100)
    covered = _search(agent, vector, SearchFilters(actor="actor-3"))
    uncovered = _search(agent, vector, SearchFilters(actor="actor-3", environment=""))
    assert covered.vector_strategy == "exact"
    assert uncovered.vector_strategy == "hnsw"
    assert {h.obj.actor for h in uncovered.hits} == {"actor-3"}


def test_a_filter_few_rows_pass_falls_back_to_an_exact_scan(world, monkeypatch):
    agents, centres = world
    agent = agents[4]
    rare = [
        record(agent, summary=f"rare {i}", actor="rare-bot", embedding=centres[i % 3])
        for i in range(3)
    ]
    # Three rows would be counted and scanned exactly at once; make the index try first.
    monkeypatch.setattr(plan, "EXACT_SCAN_MAX_ROWS", 0)
    result = _search(agent, centres[0], SearchFilters(actor="rare-bot"))
    assert result.vector_strategy == "hnsw+exact"
    assert {h.obj.pk for h in result.hits} == {r.pk for r in rare}
    assert result.hits[0].obj.pk == rare[0].pk
    assert result.hits[0].signals["vector_similarity"] == pytest.approx(1.0, abs=1e-6)
