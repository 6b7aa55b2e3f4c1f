"""The classifier's decisions: rules on a table of questions for every route, the
prototype fallback when no rule matches, and explicit routes."""

import pytest

from piper.errors import InvalidInput
from recall import router
from recall.router import classify_by_rules

DECISIONS = [
    # current_fact
    ("When is our deployment window now?", "current_fact", "current_fact.now"),
    ("Where does Alice currently live?", "current_fact", "current_fact.now"),
    ("Is Bob still the on-call engineer?", "current_fact", "current_fact.still"),
    ("What's the status of the billing service?", "current_fact", "current_fact.present_question"),
    ("Tell me the version of the kernel", "current_fact", "current_fact.attribute_of"),
    ("Who is the owner of the payments repo?", "current_fact", "current_fact.present_question"),
    # what_happened
    ("What happened when we deployed on Friday?", "what_happened", "what_happened.what_happened"),
    ("What did we do last time the disk filled up?", "what_happened", "what_happened.last_time"),
    ("Have I seen this stack trace before?", "what_happened", "what_happened.have_i_seen"),
    ("When did the nightly backup last fail?", "what_happened", "what_happened.when_did"),
    ("Why did the batch job crash yesterday?", "what_happened", "what_happened.past_marker"),
    ("Why did the export fail?", "what_happened", "what_happened.past_question"),
    # how_to
    ("How do I rotate the database credentials?", "how_to", "how_to.how_do_i"),
    ("Steps to roll back a release", "how_to", "how_to.steps_to"),
    ("how to compute the checksum of an invoice", "how_to", "how_to.how_to"),
    ("Walk me through setting up a new laptop", "how_to", "how_to.walk_through"),
    # what_to_do
    ("What am I supposed to do now?", "what_to_do", "what_to_do.supposed_to"),
    ("What's on my todo list?", "what_to_do", "what_to_do.todo"),
    ("Remind me what I told Carol", "what_to_do", "what_to_do.remind"),
    ("What did I promise the finance team?", "what_to_do", "what_to_do.promised"),
    ("Which tasks are overdue?", "what_to_do", "what_to_do.pending"),
    ("What should I do next?", "what_to_do", "what_to_do.what_next"),
    # source
    ("According to the runbook, what is the restart limit?", "source", "source.according_to"),
    ("What did the onboarding guide say about VPN access?", "source", "source.doc_says"),
    ("Is there anything in the security policy about USB sticks?", "source", "source.in_the_doc"),
    ("How do I restart it, according to the manual?", "source", "source.according_to"),
    # multi_hop
    ("How is Alice related to Acme Corp?", "multi_hop", "multi_hop.related_to"),
    ("What is the connection between billing and the ledger?", "multi_hop", "multi_hop.between"),
    ("What do Alice and Bob have in common?", "multi_hop", "multi_hop.connects"),
    ("Who manages the team that owns the billing service?", "multi_hop", "multi_hop.chained"),
]

# The rules added for questions that went to the wrong store, several ways each.
DECISIONS += [
    # a relation, then something about where it leads: two hops
    ("Where is Ines Hoffmann's employer headquartered?", "multi_hop", "multi_hop.possessive_chain"),
    ("Where does bob's manager live?", "multi_hop", "multi_hop.possessive_chain"),
    ("What city is Alice's company based in?", "multi_hop", "multi_hop.possessive_chain"),
    ("Who signs off Carol's team's budget?", "multi_hop", "multi_hop.possessive_chain"),
    ("Where is the employer of Dana Scully located?", "multi_hop", "multi_hop.possessive_chain"),
    ("In which city is the company that Ines works for based?", "multi_hop", "multi_hop.chained"),
    ("Which region hosts the service that the payments team owns?", "multi_hop", "multi_hop.chained"),
    # documents: reviews, audits, postmortems … and what they concluded, found, require
    ("What did the Audit log security review conclude about encryption?", "source", "source.doc_says"),
    ("What did the postmortem recommend?", "source", "source.doc_says"),
    ("What does the SLA require for uptime?", "source", "source.doc_says"),
    ("What did the capacity assessment find about peak load?", "source", "source.doc_says"),
    ("In the Export service security review, what was said about backups?", "source", "source.doc_says"),
    ("Is there anything in the Export security review about backups?", "source", "source.in_the_doc"),
    ("Anything in the vendor audit about data retention?", "source", "source.in_the_doc"),
    # a system named like a document, or "away from", is not a reading
    ("How do I drain traffic away from the status page?", "how_to", "how_to.how_do_i"),
    ("What are the steps to move jobs from the report builder to the queue?", "how_to", "how_to.steps_to"),
    # how something turned out
    ("What came of Bo Chen's upgrade of the billing service?", "what_happened", "what_happened.outcome_of"),
    ("How did it go with the database migration?", "what_happened", "what_happened.outcome_of"),
    ("How did the failover drill turn out?", "what_happened", "what_happened.outcome_of"),
    ("What was the outcome of the load test?", "what_happened", "what_happened.outcome_of"),
    # yes/no about the past
    ("Did someone accidentally expose a credential on GitHub?", "what_happened", "what_happened.past_yes_no"),
    ("Was the nightly export retried?", "what_happened", "what_happened.past_yes_no"),
    ("Were any customers charged twice?", "what_happened", "what_happened.past_yes_no"),
    ("Has the cache ever been purged by hand?", "what_happened", "what_happened.past_yes_no"),
    ("Had the certificate expired?", "what_happened", "what_happened.past_yes_no"),
    ("Did I forget anything for the Acme call?", "what_to_do", "what_to_do.forget"),
    # "still" is weak: what is left on a list is not a current fact
    ("What's still on my plate for the metrics pipeline?", "what_to_do", "what_to_do.what_next"),
    ("Are the replicas still lagging?", "current_fact", "current_fact.still"),
]  # fmt: skip


@pytest.mark.parametrize(
    "query, route",
    [
        ("Who is Alice's employer?", "current_fact"),  # one hop: a current fact
        ("Why did AWS spending triple because forgotten machines stayed on?", "what_happened"),
        ("Is the billing service still on the same database engine?", "current_fact"),
        ("What did Bo Chen's load test of the data warehouse show?", "what_happened"),
    ],
)
def test_the_new_rules_leave_these_where_they_belong(query, route):
    assert classify_by_rules(query).route == route


@pytest.mark.parametrize("query, route, rule", DECISIONS)
def test_rules_decide(query, route, rule):
    decision = classify_by_rules(query)
    assert (decision.route, decision.rule, decision.method, decision.explicit) == (
        route,
        rule,
        "rules",
        False,
    )
    assert decision.scores[route] == max(decision.scores.values())
    assert rule in decision.matched


def test_every_route_is_decided_by_some_row():
    assert {route for _, route, _ in DECISIONS} == set(router.ROUTES)


def test_the_decision_shows_every_matched_rule_and_every_score():
    decision = classify_by_rules("What am I supposed to do now?")
    assert decision.as_dict() == {
        "chosen": "what_to_do",
        "explicit": False,
        "method": "rules",
        "rule": "what_to_do.supposed_to",
        "matched": ["what_to_do.supposed_to", "current_fact.now"],
        "scores": {
            "current_fact": 1.0,
            "what_happened": 0.0,
            "how_to": 0.0,
            "what_to_do": 1.0,
            "source": 0.0,
            "multi_hop": 0.0,
        },
        "nearest": None,
        "fallback": None,
        "overridden": None,
    }


def test_a_strong_marker_outweighs_a_weak_one():
    # "before" (weak, what_happened) against "currently" (strong, current_fact)
    decision = classify_by_rules("Before the migration, who was on call, and who is currently?")
    assert (decision.route, decision.scores["current_fact"], decision.scores["what_happened"]) == (
        "current_fact",
        1.0,
        0.5,
    )
    decision = classify_by_rules("What broke before the outage?")
    assert decision.route == "what_happened"


@pytest.mark.parametrize(
    "query",
    ["the batch job keeps dying halfway through", "ramen", "deployment window platform team"],
)
def test_no_rule_for_statements_without_markers(query):
    assert classify_by_rules(query) is None


def test_explicit_routes_bypass_the_rules():
    assert router.explicit("how_to").as_dict() == {
        "chosen": "how_to",
        "explicit": True,
        "method": "explicit",
        "rule": None,
        "matched": [],
        "scores": {},
        "nearest": None,
        "fallback": None,
        "overridden": None,
    }


@pytest.mark.parametrize("route", ["", "facts", "AUTO", None, 3])
def test_an_unknown_route_names_the_allowed_ones(route):
    with pytest.raises(InvalidInput) as raised:
        router.check_route(route)
    assert raised.value.code == "unknown_route"
    assert raised.value.details == {
        "route": [
            "one of: current_fact, what_happened, how_to, what_to_do, source, multi_hop, auto"
        ]
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    "query, route",
    [
        ("the batch job keeps dying halfway through", "what_happened"),
        ("rotate the api credentials for the staging cluster", "how_to"),
        ("bob's employer", "current_fact"),
    ],
)
def test_the_fallback_is_the_nearest_prototype(query, route):
    from piper.embeddings import get_embedder

    embedder = get_embedder()
    decision = router.classify_by_prototypes(embedder.embed_one(query), embedder)
    assert (decision.route, decision.method, decision.rule) == (
        route,
        "prototypes",
        f"prototype.{route}",
    )
    assert decision.scores[route] == max(decision.scores.values())
    assert decision.nearest in router.PROTOTYPES[route]
