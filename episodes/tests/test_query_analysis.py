"""The agent's actor names are left out of the text the query vector is computed from,
and the query vector is taken in one place (query_vector)."""

from datetime import timedelta

import pytest

from episodes.retrieval import query_analysis
from episodes.retrieval.query_analysis import analyse_query, dense_query_text
from piper.tenancy.services import agent_create

from .retrieval_fixtures import T0, record

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_actors():
    query_analysis.forget_actors()
    yield
    query_analysis.forget_actors()


@pytest.fixture
def speakers(agent_a):
    for i, actor in enumerate(["Caroline", "Melanie Brooks", "Mel", ""]):
        record(agent_a, summary=f"turn {i}", actor=actor, occurred_at=T0 + timedelta(minutes=i))
    return agent_a


@pytest.mark.parametrize(
    ("query", "dense", "named"),
    [
        (
            "What did Caroline's mother give Melanie?",
            "What did mother give ?",
            ("Caroline", "Melanie Brooks"),
        ),
        (
            "When did melanie brooks paint a sunrise?",
            "When did paint a sunrise?",
            ("Melanie Brooks",),
        ),
        ("Did Mel go camping?", "Did go camping?", ("Mel",)),  # "Mel" is an actor of its own
        ("Who are the Carolines of this world?", "Who are the Carolines of this world?", ()),
        ("What is the deploy window?", "What is the deploy window?", ()),
        ("Caroline?", "Caroline?", ("Caroline",)),  # nothing but the name: kept
    ],
)
def test_names_of_the_agents_actors_are_left_out(speakers, query, dense, named):
    analysis = analyse_query(agent_id=speakers.pk, query=query)
    assert (analysis.dense_text, analysis.actors_named) == (dense, named)
    assert dense_query_text(agent_id=speakers.pk, query=query) == dense


def test_an_actor_named_by_a_role_is_named_by_the_role_not_its_article(agent_a):
    record(agent_a, summary="x", actor="the on-call engineer", occurred_at=T0)
    purge = "We need to purge the CDN edge cache before the weekend"
    analysis = analyse_query(agent_id=agent_a.pk, query=purge)
    assert (analysis.dense_text, analysis.actors_named) == (purge, ())
    paged = analyse_query(agent_id=agent_a.pk, query="Who paged the on-call engineer?")
    assert (paged.dense_text, paged.actors_named) == ("Who paged ?", ("the on-call engineer",))


def test_another_agents_actors_are_not_names_here(speakers):
    other = agent_create(name="agent-other")
    record(other, summary="x", actor="Zed", occurred_at=T0)
    assert dense_query_text(agent_id=speakers.pk, query="What did Zed say?") == "What did Zed say?"
    assert dense_query_text(agent_id=other.pk, query="What did Zed say?") == "What did say?"


def test_actors_are_cached_until_forgotten(agent_a):
    assert query_analysis.agent_actors(agent_a.pk) == ()
    record(agent_a, summary="x", actor="Jon", occurred_at=T0)
    assert query_analysis.agent_actors(agent_a.pk) == ()  # cached
    query_analysis.forget_actors()
    assert query_analysis.agent_actors(agent_a.pk) == ("Jon",)


def test_too_many_actors_leaves_the_query_alone(agent_a, monkeypatch):
    monkeypatch.setattr(query_analysis, "MAX_ACTORS", 2)
    for i, actor in enumerate(["Ann", "Bob", "Cy"]):
        record(agent_a, summary="x", actor=actor, occurred_at=T0 + timedelta(minutes=i))
    assert dense_query_text(agent_id=agent_a.pk, query="What did Ann do?") == "What did Ann do?"


class _Recording:
    """An embedder that says which text it was given."""

    def __init__(self):
        self.texts = []

    def embed_one(self, text):
        self.texts.append(text)
        return [float(len(self.texts))]


def test_the_query_vector_leaves_the_names_out_and_never_asks_for_the_whole(speakers):
    embedder, asked = _Recording(), []
    vector = query_analysis.query_vector(
        agent_id=speakers.pk,
        query="Did Mel go camping?",
        embedder=embedder,
        whole=lambda: asked.append(True) or [9.0],
    )
    assert (vector, embedder.texts, asked) == ([1.0], ["Did go camping?"], [])


def test_a_query_naming_no_actor_reuses_the_whole_querys_vector(speakers):
    embedder = _Recording()
    vector = query_analysis.query_vector(
        agent_id=speakers.pk,
        query="What is the deploy window?",
        embedder=embedder,
        whole=lambda: [9.0],
    )
    assert (vector, embedder.texts) == ([9.0], [])


def test_without_the_whole_querys_vector_the_query_is_embedded(speakers):
    embedder = _Recording()
    vector = query_analysis.query_vector(
        agent_id=speakers.pk, query="What is  the deploy window?", embedder=embedder
    )
    assert (vector, embedder.texts) == ([1.0], ["What is the deploy window?"])
