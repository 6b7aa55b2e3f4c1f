"""A large agent's own HNSW graph: built concurrently, once, and used by its searches."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from episodes.agent_graphs import (
    BUILD_LOCK,
    BuildRunning,
    agent_graph_build,
    agent_graphs,
    agent_graphs_build_missing,
    graph_name,
)
from episodes.retrieval import SearchFilters, episode_search
from episodes.tasks import build_agent_graphs
from episodes.tests.retrieval_fixtures import drop_vector_graphs, record, topic
from piper.tenancy.services import agent_create

# CREATE INDEX CONCURRENTLY cannot run inside a transaction: these tests commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _drop_agent_graphs():
    yield
    drop_vector_graphs()


def index_definition(name: str) -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [name])
        row = cursor.fetchone()
    return row and row[0]


@pytest.fixture
def agents():
    big, small = agent_create(name="graphs-big"), agent_create(name="graphs-small")
    for i in range(12):
        record(big, summary=f"big episode {i}", embedding=topic(i % 4, noise=0.1, seed=i))
    for i in range(3):
        record(small, summary=f"small episode {i}", embedding=topic(i, noise=0.1, seed=i))
    return big, small


def run(*args) -> str:
    out = StringIO()
    call_command("episodes_agent_graphs", *args, stdout=out)
    return out.getvalue()


def test_an_agent_above_the_size_gets_its_own_graph_with_the_own_graph_parameters(agents, settings):
    big, small = agents
    settings.EPISODES_AGENT_GRAPH_M, settings.EPISODES_AGENT_GRAPH_EF_CONSTRUCTION = 12, 48

    output = run("--min-rows", "10")

    definition = index_definition(graph_name(big.pk))
    assert definition is not None
    assert "USING hnsw (embedding vector_cosine_ops)" in definition
    assert "m='12'" in definition and "ef_construction='48'" in definition
    assert f"WHERE (agent_id = '{big.pk}'::uuid)" in definition
    assert index_definition(graph_name(small.pk)) is None  # 3 rows: below the size
    assert f"{big.pk}  12 episodes  {graph_name(big.pk)}: missing -> built in" in output
    assert "\n1 large agent(s); built 1\n" in output
    # Its episodes name no actor: no actor graph to build.
    assert output.endswith("\n0 large actor(s); built 0\n")


def test_a_second_run_builds_nothing_and_a_dry_run_writes_nothing(agents):
    big, _ = agents
    assert "\n1 large agent(s); would build 1\n" in run("--min-rows", "10", "--dry-run")
    assert index_definition(graph_name(big.pk)) is None

    run("--min-rows", "10")
    again = run("--min-rows", "10")

    assert f"{graph_name(big.pk)}: present\n" in again
    assert "\n1 large agent(s); built 0\n" in again


def test_a_build_left_invalid_is_redone(agents):
    big, _ = agents
    run("--min-rows", "10")
    with connection.cursor() as cursor:  # what a build that failed half-way leaves
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
            [graph_name(big.pk)],
        )
    assert [g.state for g in agent_graphs(min_rows=10)] == ["invalid"]

    run("--min-rows", "10")

    assert [g.state for g in agent_graphs(min_rows=10)] == ["present"]


def test_a_graph_built_with_other_parameters_is_rebuilt_with_the_settings(agents, settings):
    big, _ = agents
    settings.EPISODES_AGENT_GRAPH_M, settings.EPISODES_AGENT_GRAPH_EF_CONSTRUCTION = 12, 48
    run("--min-rows", "10")
    settings.EPISODES_AGENT_GRAPH_EF_CONSTRUCTION = 40
    assert [g.state for g in agent_graphs(min_rows=10)] == ["outdated"]
    assert "would build 1" in run("--min-rows", "10", "--dry-run")

    output = run("--min-rows", "10")

    assert f"{graph_name(big.pk)}: outdated -> built in" in output
    definition = index_definition(graph_name(big.pk))
    assert "m='12'" in definition and "ef_construction='40'" in definition
    assert [g.state for g in agent_graphs(min_rows=10)] == ["present"]


def test_the_agents_search_plans_its_own_graph_and_answers_the_same(agents):
    big, _ = agents
    query = topic(1, noise=0.05, seed=99)
    before = episode_search(agent=big, query="qqqzzz", query_embedding=query)
    run("--min-rows", "10")

    with connection.cursor() as cursor:
        # A dozen rows: left alone the planner sorts them. Without sorting, it
        # has the global graph and the agent's own to choose from.
        cursor.execute("ANALYZE episodes_episode")
        cursor.execute("SET enable_sort = off")
        try:
            cursor.execute(
                "EXPLAIN SELECT id FROM episodes_episode WHERE agent_id = %s"
                " ORDER BY embedding <=> %s::vector LIMIT 10",
                [big.pk, "[" + ",".join(str(x) for x in query) + "]"],
            )
            plan = "\n".join(r[0] for r in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_sort")
    after = episode_search(agent=big, query="qqqzzz", query_embedding=query)

    assert f"Index Scan using {graph_name(big.pk)}" in plan
    assert [h.obj.pk for h in after.hits] == [h.obj.pk for h in before.hits]


def test_building_inside_a_transaction_is_refused(agents):
    from django.db import transaction

    big, _ = agents
    (graph,) = agent_graphs(min_rows=10)
    with pytest.raises(RuntimeError, match="inside a transaction"), transaction.atomic():
        agent_graph_build(graph)


def test_past_the_limit_of_graphs_the_smaller_agents_get_none(agents):
    big, small = agents

    output = run("--min-rows", "3", "--max-graphs", "1")

    assert index_definition(graph_name(big.pk)) is not None
    assert index_definition(graph_name(small.pk)) is None
    assert f"{graph_name(small.pk)}: over-limit\n" in output
    assert "2 large agent(s); built 1; 1 over the limit of graphs, left without one\n" in output
    # An agent that has its graph keeps it when others outgrow it.
    assert [g.state for g in agent_graphs(min_rows=3, max_graphs=0)] == ["present", "over-limit"]


def test_a_limit_below_one_is_refused():
    with pytest.raises(CommandError, match="--max-graphs must be at least 1, not 0"):
        run("--max-graphs", "0")


def test_one_build_at_a_time(agents):
    import psycopg

    from testsupport.plugin import database_url

    big, _ = agents
    # Another session (as another worker would) holds the build lock.
    other = psycopg.connect(database_url(connection.settings_dict), autocommit=True)
    try:
        other.execute("SELECT pg_advisory_lock(hashtext(%s))", [BUILD_LOCK])
        with pytest.raises(BuildRunning):
            agent_graphs_build_missing(min_rows=10)
        with pytest.raises(CommandError, match="another agent graph build is running"):
            run("--min-rows", "10")
        assert build_agent_graphs.apply().get() == []
        assert index_definition(graph_name(big.pk)) is None
    finally:
        # Unlocked before closing: a closed session's backend lets go of its
        # locks only as it exits, which can come after the next line runs.
        other.execute("SELECT pg_advisory_unlock(hashtext(%s))", [BUILD_LOCK])
        other.close()

    assert build_agent_graphs.apply().get() == []  # 12 rows: below the default size
    runs = agent_graphs_build_missing(min_rows=10)
    assert [(r.graph.agent_id, r.seconds is not None) for r in runs] == [(big.pk, True)]
    # A second run lists the agent, now with its graph, and builds nothing.
    again = agent_graphs_build_missing(min_rows=10)
    assert [(r.graph.state, r.seconds) for r in again] == [("present", None)]


def test_the_beat_task_builds_the_missing_graphs(agents, settings):
    big, _ = agents
    settings.EPISODES_AGENT_GRAPH_MIN_ROWS = 10

    assert build_agent_graphs.apply().get() == [str(big.pk)]
    assert build_agent_graphs.apply().get() == []
    assert [g.state for g in agent_graphs()] == ["present"]


@pytest.fixture
def actor_agent():
    agent = agent_create(name="graphs-actor")
    for i in range(45):
        record(
            agent,
            summary=f"actor episode {i}",
            actor="ops" if i < 40 else "dev",
            embedding=topic(i % 5, noise=0.2, seed=i),
        )
    return agent


def test_with_its_own_graph_a_smaller_filtered_set_goes_through_the_graph(actor_agent, settings):
    # 40 of the agent's rows pass the filter: above the (lowered) limit with the
    # agent's own graph, below the usual one without it.
    settings.EPISODES_AGENT_GRAPH_EXACT_SCAN_MAX_ROWS = 35
    query = topic(2, noise=0.05, seed=7)
    ops = SearchFilters(actor="ops")

    def search():
        return episode_search(agent=actor_agent, query="qqqzzz", query_embedding=query, filters=ops)

    before = search()
    run("--min-rows", "10")
    after = search()
    with connection.cursor() as cursor:  # a failed build: not a graph to use
        cursor.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass",
            [graph_name(actor_agent.pk)],
        )
    invalid = search()

    assert before.vector_strategy == "exact"
    assert after.vector_strategy == "hnsw"
    assert invalid.vector_strategy == "exact"
    assert [h.obj.pk for h in after.hits] == [h.obj.pk for h in before.hits]
    assert all(h.obj.actor == "ops" for h in after.hits)


def test_the_admin_lists_the_graphs_and_a_superuser_queues_the_build(
    agents, admin_client, settings, monkeypatch
):
    from django.urls import reverse

    from piper.celery import app as celery_app

    big, small = agents
    settings.EPISODES_AGENT_GRAPH_MIN_ROWS = 10
    url = reverse("admin:episodes_episode_agent_graphs")
    assert url in admin_client.get(reverse("admin:episodes_episode_changelist")).text

    page = admin_client.get(url).text
    assert f"<td>{big.pk}</td>" in page and f"<td>{small.pk}</td>" not in page
    assert "<td>missing</td>" in page and "Build the 1 missing or outdated graph now" in page

    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)  # the worker, in-process
    response = admin_client.post(url, follow=True)

    assert "Queued: a worker builds the missing graphs" in response.text
    assert "<td>present</td>" in response.text and "outdated graph now" not in response.text
    assert index_definition(graph_name(big.pk)) is not None


def test_the_admin_page_is_for_staff_and_the_build_for_superusers(agents, client):
    from django.contrib.auth.models import Permission, User
    from django.urls import reverse

    url = reverse("admin:episodes_episode_agent_graphs")
    staff = User.objects.create_user("viewer", password="x", is_staff=True)
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(staff)
    assert client.get(url).status_code == 403
    staff.user_permissions.add(Permission.objects.get(codename="view_episode"))
    assert client.get(url).status_code == 200
    assert client.post(url).status_code == 403


def test_builds_get_their_memory_and_put_the_setting_back(agents, settings):
    settings.EPISODES_GRAPH_BUILD_MEMORY = "96MB"
    seen = []

    def watch(execute, sql, params, many, context):
        if sql.startswith("CREATE INDEX"):
            with connection.cursor() as cursor:  # as the build runs
                cursor.execute("SHOW maintenance_work_mem")
                seen.append(cursor.fetchone()[0])
        return execute(sql, params, many, context)

    with connection.cursor() as cursor:
        cursor.execute("SHOW maintenance_work_mem")
        before = cursor.fetchone()[0]
    with connection.execute_wrapper(watch):
        run("--min-rows", "10")
    with connection.cursor() as cursor:
        cursor.execute("SHOW maintenance_work_mem")
        after = cursor.fetchone()[0]

    assert seen == ["96MB"]
    assert after == before != "96MB"
