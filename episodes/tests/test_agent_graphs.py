"""A large agent's own HNSW graph: built concurrently, once, and used by its searches."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from episodes.agent_graphs import PREFIX, agent_graph_build, agent_graphs, graph_name
from episodes.retrieval import episode_search
from episodes.tests.retrieval_fixtures import record, topic
from piper.tenancy.services import agent_create

# CREATE INDEX CONCURRENTLY cannot run inside a transaction: these tests commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _drop_agent_graphs():
    # Indexes outlive the rows a transactional test's teardown truncates.
    yield
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE %s", [PREFIX + "%"])
        for (name,) in cursor.fetchall():
            cursor.execute(f"DROP INDEX IF EXISTS {name}")


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


def test_an_agent_above_the_size_gets_its_own_graph_with_the_global_parameters(agents):
    big, small = agents

    output = run("--min-rows", "10")

    definition = index_definition(graph_name(big.pk))
    assert definition is not None
    assert "USING hnsw (embedding vector_cosine_ops)" in definition
    assert "m='32'" in definition and "ef_construction='128'" in definition
    assert f"WHERE (agent_id = '{big.pk}'::uuid)" in definition
    assert index_definition(graph_name(small.pk)) is None  # 3 rows: below the size
    assert f"{big.pk}  12 episodes  {graph_name(big.pk)}: missing -> built in" in output
    assert output.endswith("1 large agent(s); built 1\n")


def test_a_second_run_builds_nothing_and_a_dry_run_writes_nothing(agents):
    big, _ = agents
    assert run("--min-rows", "10", "--dry-run").endswith("1 large agent(s); would build 1\n")
    assert index_definition(graph_name(big.pk)) is None

    run("--min-rows", "10")
    again = run("--min-rows", "10")

    assert f"{graph_name(big.pk)}: present\n" in again
    assert again.endswith("1 large agent(s); built 0\n")


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
