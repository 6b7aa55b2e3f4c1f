"""Recall in the agent's own words: facts stored as key-value state, asked in plain words."""

from __future__ import annotations

import re
import uuid

import pytest

from battery.suites.metamemory import paraphrase
from facts.fact_texts import fact_texts_refresh
from facts.services import predicate_define
from facts.tests.factories import at, claim
from piper.tenancy.tests.factories import AgentFactory
from recall import about, lexicon
from recall.services import recall


@pytest.fixture
def agent(db):
    return AgentFactory()


def key_value_state(agent) -> None:
    """What an ordinary agent writes: the export's deadline moved from March 3
    to March 10; the search squad works on Project Kite; the offsite is in
    Lisbon. The Kestrel offsite has a start date, nothing else."""
    claim(agent, "billing export", "deadline", "March 3", at(2024))
    claim(agent, "billing export", "deadline", "March 10", at(2025))
    claim(agent, "billing export", "owner", "Priya Jansen", at(2024))
    claim(agent, "search squad", "allocation", "Project Kite", at(2024))
    claim(agent, "search squad", "headcount", 7, at(2024))
    claim(agent, "offsite", "location", "Lisbon office", at(2024))
    claim(agent, "offsite", "budget", "12000 EUR", at(2024))
    claim(agent, "Kestrel offsite", "start_date", "May 11", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="now")


def current_values(result) -> list:
    return [
        e.obj.object_value for e in result.evidence if e.memory_status["currentness"] == "current"
    ]


@pytest.mark.parametrize(
    ("question", "value"),
    [
        ("When is the billing export due?", "March 10"),
        ("Which project is the search squad working on?", "Project Kite"),
        ("Where is the offsite being held?", "Lisbon office"),
    ],
)
def test_the_issues_questions_are_answered_on_route_auto(agent, question, value):
    key_value_state(agent)
    result = recall(agent=agent, query=question)
    assert (result.decision.route, result.abstained) == ("current_fact", False), result.details
    assert current_values(result)[:1] == [value]
    about_it = result.evidence[0].signals["about"]
    assert about_it["subject"] == "named"
    assert about_it["predicate"] in about.PREDICATE_ACCEPTED


def test_a_superseded_value_is_never_presented_as_current(agent):
    key_value_state(agent)
    result = recall(agent=agent, query="When is the billing export due?")
    shown = [(e.obj.object_value, e.memory_status["currentness"]) for e in result.evidence]
    assert ("March 3", "current") not in shown
    assert shown[0] == ("March 10", "current")


def test_words_the_route_rules_give_to_another_route_still_reach_the_fact(agent):
    key_value_state(agent)
    result = recall(agent=agent, query="What is due for the billing export?")
    # "is due" is what_to_do's marker; one known subject and one of its stated
    # attributes asked make it a current fact.
    assert result.decision.overridden == "what_to_do"
    assert result.decision.rule == "current_fact.one_subject_attribute"
    assert current_values(result)[:1] == ["March 10"]


@pytest.mark.parametrize(
    "question",
    [
        "When is the billing import due?",  # a look-alike subject: never told of it
        "Where is the billing export being held?",  # another subject's predicate
        "How much money does the search squad have?",  # never stated about it
        "When is the Kestrel offsite due?",  # the only time it has is a start
        "How is the billing export doing?",  # a status, never stated: not everything known
    ],
)
def test_abstention_stays_honest(agent, question):
    key_value_state(agent)
    result = recall(agent=agent, query=question)
    assert result.evidence == [], [(e.text, e.signals.get("about")) for e in result.evidence]


def test_a_declared_alias_makes_the_predicate_asked(agent):
    key_value_state(agent)
    claim(agent, "billing export", "sla_tier", "gold", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="now")
    before = recall(agent=agent, query="What service level does the billing export get?")
    assert all(e.signals["about"]["predicate"] != "alias" for e in before.evidence)
    predicate_define(agent=agent, name="sla_tier", aliases=["service level"])
    fact_texts_refresh(agent_id=agent.pk, embed="now")
    after = recall(agent=agent, query="What service level does the billing export get?")
    assert current_values(after)[:1] == ["gold"]
    about_it = after.evidence[0].signals["about"]
    assert (about_it["predicate"], about_it["via"]) == ("alias", "service level")


def code_words() -> set[str]:
    """Every word of the lists recall decides a paraphrase with (words it
    ignores, STOPWORDS and TIME_WORDS, and WordNet's own synset names aside)."""
    from recall import router

    texts = [
        " ".join(f"{k} {' '.join(v)}" for k, v in about.FAMILY_PHRASES.items()),
        " ".join(p.pattern for p, _ in about.KIND_CUES),
        " ".join(rule.pattern.pattern for rule in router.RULES),
        " ".join(q for qs in router.PROTOTYPES.values() for q in qs),
    ]
    return set(re.findall(r"[a-z]+", " ".join(texts).lower()))


def test_the_held_out_vocabulary_is_in_no_list_the_code_uses():
    distinctive = (
        paraphrase.vocabulary_words(paraphrase.HELD_OUT) - about.STOPWORDS - about.TIME_WORDS
    )
    assert distinctive & code_words() == set()


def test_judge_signals_say_which_words_made_the_predicate_asked():
    subject = uuid.uuid4()
    question = about.Question.of("What condition is the Kite squad in?", [subject])
    verdict = about.judge(
        question, subject_id=subject, subject_names=["Kite squad"], predicate_name="status"
    )
    assert (verdict.predicate, verdict.via) == ("synonym", "condition ~ status")
    question = about.Question.of("Which project is the Kite squad working on?", [subject])
    verdict = about.judge(
        question, subject_id=subject, subject_names=["Kite squad"], predicate_name="allocation"
    )
    assert (verdict.predicate, verdict.via) == ("phrased", "working on ~ allocation")


@pytest.mark.parametrize(
    ("word", "kind"),
    [("venue", "place"), ("deadline", "time"), ("headcount", "quantity"), ("steward", "person")],
)
def test_kinds_come_from_wordnet(word, kind):
    assert kind in lexicon.kinds(word)


@pytest.mark.parametrize(
    ("question", "kinds"),
    [
        ("When is it due?", {"time"}),
        ("Where is it?", {"place"}),
        ("Who runs it?", {"person", "group"}),
        ("How many people are on it?", {"quantity"}),
        ("In which city is it?", {"place"}),
        ("What is it?", set()),
    ],
)
def test_the_kind_of_value_a_question_asks_for(question, kinds):
    asked = about.asked_kinds(question)
    assert kinds <= asked and bool(asked) == bool(kinds)


def several_owners(agent) -> None:
    """Three things with an `owner`; the Moss pod's keeper is stored as its
    `custodian`, a name the agent uses for nothing else."""
    for subject, person in (
        ("billing export", "Priya Jansen"),
        ("search squad", "Dario Dubois"),
        ("offsite", "Ines Bianchi"),
    ):
        claim(agent, subject, "owner", person, at(2024))
    claim(agent, "billing export", "deadline", "March 10", at(2024))
    claim(agent, "search squad", "headcount", 7, at(2024))
    claim(agent, "Moss pod", "custodian", "Oskar Gallo", at(2024))
    claim(agent, "Moss pod", "headcount", 4, at(2024))


def test_another_name_of_the_same_attribute_does_not_outrank_the_subjects_own(agent):
    several_owners(agent)
    fact_texts_refresh(agent_id=agent.pk, embed="now")
    result = recall(agent=agent, query="Who keeps the Moss pod?")
    assert current_values(result)[:1] == ["Oskar Gallo"], result.details
    about_it = result.evidence[0].signals["about"]
    assert about_it["predicate"] == "meaning"
    assert "owner" in about_it["meaning"]["same_attribute"]


def test_two_names_stated_of_one_thing_are_two_attributes(agent):
    several_owners(agent)
    # The offsite has an owner and a custodian: they are not one attribute,
    # so the Moss pod's custodian does not answer who owns it.
    claim(agent, "offsite", "custodian", "Amara Albers", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="now")
    result = recall(agent=agent, query="Who keeps the Moss pod?")
    assert result.evidence == [], [(e.text, e.signals.get("about")) for e in result.evidence]


@pytest.mark.parametrize(
    ("value", "form"),
    [
        ("March 3", about.DATE),
        ("3 March 2025", about.DATE),
        ("2025-06-01", about.DATE),
        (7, about.COUNT),
        ("12", about.COUNT),
        (12.5, about.AMOUNT),
        ("12000 EUR", about.AMOUNT),
        ("$5k", about.AMOUNT),
        ("7.5%", about.AMOUNT),
        ("Lisbon office", None),
        ("Room 4B", None),
        ("in review", None),
        (True, None),
        ({"a": 1}, None),
    ],
)
def test_the_form_of_a_value(value, form):
    assert about.value_form(value) == form


def test_a_predicates_kinds_come_from_its_values_where_they_say():
    kickoff = about.predicate_kinds("kickoff", values=["May 11", "June 2"])
    assert (kickoff.of, kickoff.form) == ({"time"}, about.DATE)
    # WordNet reads a period of time into "phase"; its values say otherwise.
    phase = about.predicate_kinds("phase", values=["planning", "in review"])
    assert "time" not in phase.of and not phase.competes_for(frozenset({"time"}))
    assert phase.competes_for(frozenset())
    headcount = about.predicate_kinds("headcount", values=[4, 7])
    budget = about.predicate_kinds("budget", values=["12000 EUR", "7500 USD"])
    assert headcount.of == budget.of == {"quantity"}
    assert not headcount.alike(budget)  # a count of people is not an amount of money
    assert about.predicate_kinds("size", value_type="integer").of == {"quantity"}
    assert about.predicate_kinds("venue").of == {"place"}  # no values: WordNet's kind


def test_a_closed_compound_said_as_two_words_states_its_predicate():
    subject = uuid.uuid4()
    question = about.Question.of("When will the Kite launch kick off?", [subject])
    verdict = about.judge(
        question, subject_id=subject, subject_names=["Kite launch"], predicate_name="kickoff"
    )
    assert (verdict.predicate, verdict.via) == ("stated", "kick off")


def test_an_amount_does_not_answer_how_many(agent):
    # No count of anything is stored: the only quantity is a budget.
    claim(agent, "Glade guild", "budget", "7500 USD", at(2024))
    claim(agent, "Glade guild", "owner", "Priya Jansen", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="now")
    result = recall(agent=agent, query="How many people are on the Glade guild?")
    assert result.evidence == [], [(e.text, e.signals.get("about")) for e in result.evidence]
    result = recall(agent=agent, query="How much money does the Glade guild have?")
    assert current_values(result)[:1] == ["7500 USD"]


def test_an_example_question_teaches_recall_a_phrasing(agent):
    claim(agent, "Dune redesign", "progress", "in review", at(2024))
    claim(agent, "Dune redesign", "delivery_date", "June 2", at(2024))
    claim(agent, "Kite audit", "progress", "planning", at(2024))
    fact_texts_refresh(agent_id=agent.pk, embed="now")
    question = "How far along is the Dune redesign?"
    before = recall(agent=agent, query=question)
    assert current_values(before)[:1] != ["in review"]  # the embedding reads a date into it
    predicate_define(agent=agent, name="progress", examples=["How far along is it?"])
    after = recall(agent=agent, query=question)
    assert current_values(after)[:1] == ["in review"], after.details
    assert after.evidence[0].signals["about"]["predicate"] == "meaning"


def test_only_a_kind_the_question_words_ask_for_lifts_the_similarity_floor():
    from recall.services.facts import PredicateSimilarity

    kickoff = uuid.uuid4()
    time_kind = about.PredicateKinds(frozenset({"time"}), form=about.DATE)

    def nearness(cued):
        return PredicateSimilarity(
            agent=None,
            similarity={kickoff: 0.2},
            names={kickoff: "kickoff"},
            competing=frozenset({kickoff}),
            kinds={kickoff: time_kind},
            kinds_cued=cued,
        )

    # "What stage has it reached?": WordNet reads a time into "stage"; a
    # kickoff at 0.2 is not what it asks.
    assert about.cued_kinds("What stage has the Violet redesign reached?") == frozenset()
    assert not nearness(frozenset()).meaning(kickoff, [kickoff]).accepted
    # "When ...?" asks for a time in so many words: the kickoff is of that kind.
    assert about.cued_kinds("When does the Violet redesign begin?") == {"time"}
    assert nearness(frozenset({"time"})).meaning(kickoff, [kickoff]).accepted
