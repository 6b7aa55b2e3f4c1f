"""A large actor's own HNSW graph: a leaf of episodes_actorvector, kept in step by
triggers, built once, and read by the actor's searches (episodes.actor_graphs)."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction

from episodes.actor_graphs import (
    BUILD_LOCK,
    actor_graph_build,
    actor_graphs,
    actor_graphs_build_missing,
    agent_partition_name,
)
from episodes.agent_graphs import BuildRunning, agent_graphs_build_missing
from episodes.models import ACTOR_VECTOR_TABLE, ActorGraph, Episode
from episodes.retrieval import SearchFilters, episode_search
from episodes.services import rebuild_projection
from episodes.tasks import build_agent_graphs
from episodes.tests.retrieval_fixtures import T0, drop_vector_graphs, record, set_embedding, topic
from piper.tenancy.services import agent_create

# The builds create tables and run outside a transaction: these tests commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _drop_graphs():
    yield
    drop_vector_graphs()


@pytest.fixture(autouse=True)
def _no_embedding_tasks(monkeypatch):
    # These tests commit, and a real Celery worker that another test of this
    # process started would embed the rows left without a vector (with the real
    # model) while a test runs. Which vectors exist is the tests' to say here.
    from episodes.services import queueing

    monkeypatch.setattr(queueing, "queue_embedding", lambda *args: None)
    monkeypatch.setattr(queueing, "queue_backlog", lambda *args: None)


@pytest.fixture
def sizes(settings):
    # An agent of 10+ rows gets its own graph; an actor of 20+ vectors its own too.
    settings.EPISODES_AGENT_GRAPH_MIN_ROWS = 10
    settings.EPISODES_ACTOR_GRAPH_MIN_ROWS = 20
    return settings


@pytest.fixture
def agent(sizes):
    """40 of "ops", 5 of "dev", 3 of "ops" without a vector yet; its own graph built."""
    agent = agent_create(name="actor-graphs")
    for i in range(45):
        record(
            agent,
            summary=f"actor episode {i}",
            actor="ops" if i < 40 else "dev",
            embedding=topic(i % 5, noise=0.2, seed=i),
        )
    for i in range(3):
        record(agent, summary=f"waiting episode {i}", actor="ops")
    agent_graphs_build_missing()
    return agent


def copies(agent, actor) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT episode_id, embedding::text FROM {ACTOR_VECTOR_TABLE}"
            " WHERE agent_id = %s AND actor = %s",
            [agent.pk, actor],
        )
        return dict(cursor.fetchall())


def vectors(agent, actor) -> dict:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, embedding::text FROM episodes_episode"
            " WHERE agent_id = %s AND actor = %s AND embedding IS NOT NULL",
            [agent.pk, actor],
        )
        return dict(cursor.fetchall())


def table_exists(name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        return cursor.fetchone()[0]


# --------------------------------------------------------------------- building


def test_an_actor_above_the_size_gets_a_leaf_with_its_vectors_and_its_own_graph(agent):
    assert [(s.actor, s.rows, s.state) for s in actor_graphs()] == [("ops", 40, "missing")]

    runs = actor_graphs_build_missing()

    assert [(r.actor_set.actor, r.seconds is not None) for r in runs] == [("ops", True)]
    graph = ActorGraph.objects.get()
    assert (graph.agent_id, graph.actor, graph.rows) == (agent.pk, "ops", 40)
    assert graph.built_at is not None
    assert copies(agent, "ops") == vectors(agent, "ops")
    assert copies(agent, "dev") == {}  # 5 vectors: below the size, no leaf
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [agent_partition_name(agent.pk)],
        )
        assert cursor.fetchall() == [(graph.table_name, "FOR VALUES IN ('ops')")]
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [graph.index_name])
        definition = cursor.fetchone()[0]
    assert "USING hnsw (embedding vector_cosine_ops)" in definition
    assert "m='16'" in definition and "ef_construction='128'" in definition
    # A second run has nothing to build.
    again = actor_graphs_build_missing()
    assert [(r.actor_set.state, r.seconds) for r in again] == [("present", None)]


def test_only_agents_with_their_own_graph_are_considered(sizes):
    agent = agent_create(name="no-own-graph")
    for i in range(25):
        record(agent, summary=f"e{i}", actor="ops", embedding=topic(1, noise=0.2, seed=i))

    assert actor_graphs() == []  # its own graph is not built yet
    agent_graphs_build_missing()
    assert [s.actor for s in actor_graphs()] == ["ops"]


def test_building_inside_a_transaction_is_refused(agent):
    with pytest.raises(RuntimeError, match="inside a transaction"), transaction.atomic():
        actor_graph_build(agent_id=agent.pk, actor="ops")


def test_a_failed_build_leaves_no_table_and_no_registry_row(agent, monkeypatch):
    from episodes import actor_graphs as module

    def fail(*args, **kwargs):
        raise RuntimeError("the registry write failed")

    monkeypatch.setattr(module.ActorGraph.objects, "create", fail)
    with pytest.raises(RuntimeError, match="the registry write failed"):
        actor_graph_build(agent_id=agent.pk, actor="ops")

    assert not ActorGraph.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", [ACTOR_VECTOR_TABLE + "\\_%"]
        )
        assert cursor.fetchall() == []  # neither the leaf nor the agent's partition
    assert copies(agent, "ops") == {}
    monkeypatch.undo()
    assert actor_graphs_build_missing()[0].seconds is not None  # the next run builds it


def test_one_build_at_a_time(agent):
    import psycopg

    from testsupport.plugin import database_url

    other = psycopg.connect(database_url(connection.settings_dict), autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(hashtext(%s))", [BUILD_LOCK])
        with pytest.raises(BuildRunning):
            actor_graphs_build_missing()
    finally:
        other.execute("SELECT pg_advisory_unlock(hashtext(%s))", [BUILD_LOCK])
        other.close()
    assert not ActorGraph.objects.exists()


# ---------------------------------------------------------------- kept in step


def test_the_triggers_keep_the_leaf_in_step_with_the_episodes(agent):
    actor_graphs_build_missing()
    waiting = list(Episode.objects.filter(agent=agent, embedding__isnull=True).order_by("id"))
    new = record(agent, summary="a new one", actor="ops", embedding=topic(3, seed=77))
    other_actor = record(agent, summary="someone else", actor="dev", embedding=topic(3, seed=78))

    set_embedding(waiting[0], topic(2, seed=79))  # embedded later, as the task does
    set_embedding(new, topic(4, seed=80))  # re-embedded
    set_embedding(waiting[1], topic(1, seed=81))
    Episode.objects.filter(pk=waiting[1].pk).update(embedding=None, embedding_model="")
    moved = (
        Episode.objects.filter(agent=agent, actor="ops", embedding__isnull=False)
        .exclude(pk__in=[new.pk, waiting[0].pk])
        .order_by("id")
        .first()
    )
    Episode.objects.filter(pk=moved.pk).update(actor="dev")

    held = copies(agent, "ops")
    assert held == vectors(agent, "ops")
    assert new.pk in held and waiting[0].pk in held
    assert waiting[1].pk not in held and moved.pk not in held
    assert other_actor.pk not in held
    assert copies(agent, "dev") == {}  # no leaf for "dev": nothing copied


def test_a_vector_written_while_the_leaf_is_registered_is_in_it(agent):
    """A writer whose statement ran before the registry row existed (so its trigger
    copied nothing) and committed during the build: the build waits for it at the
    agent's lock, then copies what it wrote."""
    import threading
    import time

    import psycopg

    from testsupport.plugin import database_url

    waiting = Episode.objects.filter(agent=agent, embedding__isnull=True).order_by("id").first()
    writer = psycopg.connect(database_url(connection.settings_dict))
    try:
        writer.execute(
            "UPDATE episodes_episode SET embedding = %s::vector, embedding_model = 'late',"
            " embedded_at = now() WHERE id = %s",
            [str(topic(3, seed=12)), waiting.pk],
        )
        failures = []

        def build():
            from django.db import connections

            try:
                actor_graph_build(agent_id=agent.pk, actor="ops")
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
            finally:
                connections.close_all()

        builder = threading.Thread(target=build)
        builder.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the build waits for the writer
            row = writer.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            ).fetchone()
            if row[0]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the build never waited for the writer's lock")
        writer.commit()
        builder.join(timeout=120)
    finally:
        writer.close()

    assert failures == []
    assert waiting.pk in copies(agent, "ops")
    assert copies(agent, "ops") == vectors(agent, "ops")


def test_a_deleted_episode_takes_its_copy_with_it(agent):
    actor_graphs_build_missing()
    before = copies(agent, "ops")

    # The projection rebuilt from the ledger: every episode deleted and written
    # again, vectors put back by an UPDATE.
    rebuild_projection(agent=agent)

    assert copies(agent, "ops") == before == vectors(agent, "ops")
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM episodes_episode WHERE agent_id = %s", [agent.pk])
    assert copies(agent, "ops") == {}


def test_another_agents_actor_of_the_same_name_is_not_copied(agent):
    actor_graphs_build_missing()
    stranger = agent_create(name="stranger")
    theirs = record(stranger, summary="theirs", actor="ops", embedding=topic(1, seed=5))

    assert theirs.pk not in copies(agent, "ops")
    assert copies(stranger, "ops") == {}


# -------------------------------------------------------------------- searching


def search(agent, filters, query=None):
    return episode_search(
        agent=agent,
        query="qqqzzz",
        query_embedding=query or topic(2, noise=0.05, seed=7),
        filters=filters,
    )


def test_the_actors_search_walks_its_graph_and_answers_as_the_exact_scan(agent):
    ops = SearchFilters(actor="ops")
    before = search(agent, ops)
    unfiltered = search(agent, SearchFilters())
    actor_graphs_build_missing()
    after = search(agent, ops)

    assert before.vector_strategy == "exact"
    assert after.vector_strategy == "actor_graph"
    assert [h.obj.pk for h in after.hits] == [h.obj.pk for h in before.hits]
    assert [h.score for h in after.hits] == [h.score for h in before.hits]
    # Any other filter beside the actor: the leaf holds no other columns.
    window = SearchFilters(actor="ops", occurred_after=T0)
    assert search(agent, window).vector_strategy == "exact"
    assert search(agent, SearchFilters(actor="dev")).vector_strategy == "exact"
    # The agent's unfiltered search does not change.
    again = search(agent, SearchFilters())
    assert again.vector_strategy == unfiltered.vector_strategy
    assert [h.obj.pk for h in again.hits] == [h.obj.pk for h in unfiltered.hits]


def test_a_leaf_that_is_gone_is_not_read(agent):
    actor_graphs_build_missing()
    graph = ActorGraph.objects.get()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {graph.table_name}")

    assert search(agent, SearchFilters(actor="ops")).vector_strategy == "exact"


def test_another_agent_never_reads_the_leaf(agent):
    actor_graphs_build_missing()
    stranger = agent_create(name="stranger")
    theirs = record(stranger, summary="theirs", actor="ops", embedding=topic(2, seed=5))

    result = search(stranger, SearchFilters(actor="ops"))

    assert result.vector_strategy == "exact"
    assert [h.obj.pk for h in result.hits] == [theirs.pk]


def test_sequential_scans_come_back_on_after_a_search_inside_a_transaction(agent):
    actor_graphs_build_missing()
    with transaction.atomic(), connection.cursor() as cursor:
        assert search(agent, SearchFilters(actor="ops")).vector_strategy == "actor_graph"
        cursor.execute("SELECT current_setting('enable_seqscan')")
        assert cursor.fetchone()[0] == "on"


# ------------------------------------------------------------ beat and command


def test_the_beat_task_builds_the_actor_graphs_after_the_agents(sizes):
    agent = agent_create(name="beat")
    for i in range(25):
        record(agent, summary=f"e{i}", actor="ops", embedding=topic(1, noise=0.2, seed=i))

    assert build_agent_graphs.apply().get() == [str(agent.pk)]

    assert [(g.agent_id, g.actor) for g in ActorGraph.objects.all()] == [(agent.pk, "ops")]


def test_the_command_lists_and_builds_the_actor_graphs(agent):
    out = StringIO()
    call_command("episodes_agent_graphs", "--dry-run", stdout=out)
    assert f"{agent.pk}  actor ops  40 vectors: missing" in out.getvalue()
    assert not ActorGraph.objects.exists()

    out = StringIO()
    call_command("episodes_agent_graphs", stdout=out)
    assert f"{agent.pk}  actor ops  40 vectors: missing -> built in" in out.getvalue()
    assert out.getvalue().endswith("1 large actor(s); built 1\n")
    assert table_exists(ActorGraph.objects.get().table_name)


# ------------------------------------------------------------------ at scale


def test_at_scale_the_actors_search_walks_the_leafs_graph_with_full_recall(sizes):
    """2,400 of an agent's 3,000 episodes are one actor's, with vectors near 50
    shared centres: the search plans the leaf's graph (not a sort of the leaf's
    rows), and its 10 nearest are the exact scan's."""
    import random

    from django.test.utils import CaptureQueriesContext

    from episodes.tests.retrieval_fixtures import (
        bulk_episodes,
        clustered_vectors,
        hnsw_built_after,
        unit,
    )

    sizes.EPISODES_ACTOR_GRAPH_MIN_ROWS = 1_000  # "ops" only, not the ~85 of each other actor
    agent = agent_create(name="actor-graphs-at-scale")
    bulk_episodes(agent, 3_000)
    with connection.cursor() as cursor:  # four rows in five are "ops"
        cursor.execute(
            "UPDATE episodes_episode SET actor = 'ops'"
            " WHERE agent_id = %s AND abs(hashtext(summary)) %% 5 <> 0",
            [agent.pk],
        )
        cursor.execute("SELECT count(*) FROM episodes_episode WHERE actor = 'ops'")
        ops_rows = cursor.fetchone()[0]
    with hnsw_built_after(), transaction.atomic():
        centres = clustered_vectors([agent])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE episodes_episode")
    agent_graphs_build_missing()
    (built,) = [r for r in actor_graphs_build_missing() if r.seconds is not None]
    assert (built.actor_set.actor, built.actor_set.rows) == ("ops", ops_rows)
    leaf = ActorGraph.objects.get(agent=agent, actor="ops")

    rng = random.Random(11)
    recalls = []
    for _ in range(20):
        vector = unit([x + rng.gauss(0, 0.02) for x in rng.choice(centres)])
        result = episode_search(
            agent=agent,
            query="qqqzzz",
            query_embedding=vector,
            filters=SearchFilters(actor="ops"),
            limit=20,
            abstain=False,
        )
        assert result.vector_strategy == "actor_graph"
        ranked = sorted(
            (h for h in result.hits if h.signals.get("vector_position")),
            key=lambda h: h.signals["vector_position"],
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM episodes_episode WHERE agent_id = %s AND actor = 'ops'"
                " AND embedding IS NOT NULL ORDER BY (embedding <=> %s::vector) + 0, id LIMIT 10",
                [agent.pk, str(vector)],
            )
            exact = [row[0] for row in cursor.fetchall()]
        recalls.append(len({h.obj.pk for h in ranked[:10]} & set(exact)) / 10)
    assert sum(recalls) / len(recalls) >= 0.95, recalls

    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries:
            episode_search(
                agent=agent,
                query="qqqzzz",
                query_embedding=vector,
                filters=SearchFilters(actor="ops"),
            )
        prepare, main = (
            q["sql"]
            for q in queries.captured_queries
            if "lexeme" in q["sql"] or "vec_hits" in q["sql"]
        )
        with connection.cursor() as cursor:
            cursor.execute(prepare)  # the transaction's settings, as the search had them
            cursor.execute("EXPLAIN " + main)
            plan = "\n".join(r[0] for r in cursor.fetchall())
    assert f"Index Scan using {leaf.index_name} on {leaf.table_name}" in plan, plan
