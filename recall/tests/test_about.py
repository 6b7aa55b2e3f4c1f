"""Whether a proposed fact is about what the question asks: the word rules of
recall.about on a table of questions, subjects and predicates."""

import uuid

import pytest

from recall import about
from recall.about import Question, judge, stem

SUBJECT, OTHER = uuid.UUID(int=1), uuid.UUID(int=2)

# question, the known things it names (by entity-name lookup), the pair's subject
# names, its predicate (and description) -> subject verdict, predicate verdict
VERDICTS = [
    # named, in the forms questions use
    ("Which team owns the Sparrow service?", [SUBJECT], ["Sparrow service"], "owning_team", "named", "stated"),
    ("which team owns the sparrow service now?", [SUBJECT], ["Sparrow service"], "owning_team", "named", "stated"),
    ("Who is on call for the Sparrow service's API?", [SUBJECT], ["Sparrow service"], "on_call_engineer", "named", "stated"),
    ("Which team owns the service Sparrow?", [], ["Sparrow service"], "owning_team", "named", "stated"),
    ("Which team owns sparrow-service?", [], ["Sparrow service"], "owning_team", "named", "stated"),
    ("Where does Al live now?", [], ["Alice Smith", "Al"], "lives_in", "named", "stated"),
    # a known subject, a predicate never stated for it
    ("When is the deployment window of the Nimbus gateway?", [SUBJECT], ["Nimbus gateway"], "release_manager", "named", "not_asked"),
    ("Who is the on-call engineer for the Ibis portal?", [SUBJECT], ["Ibis portal"], "database_engine", "named", "not_asked"),
    ("Which database engine does the Ibis portal use?", [SUBJECT], ["Ibis portal"], "on_call_engineer", "named", "not_asked"),
    # another known thing named
    ("When is the deployment window of the Nimbus gateway?", [OTHER], ["Plover warehouse"], "deployment_window", "other_named", "stated"),
    # a subject the agent was never told of, named like one it knows
    ("Which team owns the Starling service?", [], ["Sparrow service"], "owning_team", "unnamed", "stated"),
    ("What is the health status of the Avocet portal?", [], ["Avocet service"], "health_status", "unnamed", "stated"),
    ("How many replicas does the starling cluster run?", [], ["Wren gateway"], "replica_count", "unnamed", "stated"),
    # part of a name, nothing else unexplained
    ("Which team owns Sparrow?", [], ["Sparrow service"], "owning_team", "partial", "stated"),
    # no subject in the question at all
    ("When is our deployment window now?", [], ["Alice"], "deployment_window", "implied", "stated"),
    ("How many replicas are there at the moment?", [], ["Wren gateway"], "replica_count", "implied", "stated"),
    ("How many replicas are running at the moment?", [], ["Wren gateway"], "replica_count", "unnamed", "stated"),
    # light stemming on both sides
    ("When do we deploy?", [], ["Alice"], "deployment_window", "implied", "stated"),
    ("Which cities does Alice have offices in?", [SUBJECT], ["Alice"], "office_city", "named", "stated"),
    # a predicate's description widens the words it is known by
    ("Who is responsible for the Sparrow service these days?", [SUBJECT], ["Sparrow service"], "owning_team", "named", "not_asked"),
    ("Who is responsible for the Sparrow service these days?", [SUBJECT], ["Sparrow service"], ("owning_team", "the team responsible for it"), "named", "described"),
    # the subject as a whole
    ("Tell me about the Sparrow service", [SUBJECT], ["Sparrow service"], "owning_team", "named", "whole_subject"),
    ("Everything about Sparrow", [], ["Sparrow service"], "primary_region", "partial", "whole_subject"),
]  # fmt: skip


@pytest.mark.parametrize("text, named, names, predicate, subject, verdict", VERDICTS)
def test_judge(text, named, names, predicate, subject, verdict):
    name, description = predicate if isinstance(predicate, tuple) else (predicate, "")
    got = judge(
        Question.of(text, named),
        subject_id=SUBJECT,
        subject_names=names,
        predicate_name=name,
        predicate_description=description,
    )
    assert (got.subject, got.predicate) == (subject, verdict)
    accepted = subject in about.SUBJECT_ACCEPTED and verdict in about.PREDICATE_ACCEPTED
    assert got.accepted is accepted


def test_an_unnamed_subject_says_which_words_nothing_explains():
    got = judge(
        Question.of("Which team owns the Starling service now?", []),
        subject_id=SUBJECT,
        subject_names=["Sparrow service"],
        predicate_name="owning_team",
    )
    assert got.as_dict() == {
        "subject": "unnamed",
        "predicate": "stated",
        "unexplained": ["starling"],
    }


def test_the_subject_as_a_whole_needs_the_subject_in_the_question():
    got = judge(
        Question.of("Tell me everything", []),
        subject_id=SUBJECT,
        subject_names=["Sparrow service"],
        predicate_name="owning_team",
    )
    assert (got.subject, got.predicate, got.accepted) == ("implied", "not_asked", False)


def test_named_comes_before_partial_before_implied():
    keys = [about.Verdict(s, "stated").sort_key() for s in ("implied", "named", "partial")]
    assert sorted(keys) == [(0, 0), (1, 0), (2, 0)]


@pytest.mark.parametrize(
    "word, stemmed",
    [
        ("owns", "own"),
        ("owning", "own"),
        ("replicas", "replica"),
        ("deployment", "deploy"),
        ("deployed", "deploy"),
        ("cities", "city"),
        ("status", "status"),
        ("engineer", "engineer"),
        ("engines", "engine"),
        ("thing", "thing"),
        ("running", "run"),
        ("stopped", "stop"),
        ("installed", "install"),
    ],
)
def test_stem(word, stemmed):
    assert stem(word) == stemmed
