"""Suite G: the draw is deterministic and covers what it claims (a stale value's
predicate really is volatile, an unknowable really was never told), the
grading is exact, the gates sit where the issue puts them, and every kind of
item, pointed at a service with one fault, fails with the right code."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from collections import Counter

import pytest
from django.core.management import CommandError, call_command

from battery.models import BatteryRun
from battery.registry import ItemOutcome, designed_suites, suites_select
from battery.scoring import score_run, suite_result
from battery.suites import metamemory
from battery.suites.episodic.api import answer_of
from battery.suites.metamemory import draw, phrasing
from battery.suites.metamemory.draw import PREDICATES, ROUTES, STALE_SECONDS
from battery.suites.metamemory.judge import (
    judge_answered,
    judge_g1,
    judge_route,
    judge_staleness,
    judge_store,
    judge_value,
    summarize,
)
from battery.tests.helpers import Faulty, run_suite_small
from battery.transport import ApiResponse, InProcessTransport
from piper.celery import app as celery_app

NONE = {"g1": 0, "g2": 0, "g3": 0, "g2_words": 0}
SPLITS = ("template", phrasing.SEEN, phrasing.HELD_OUT)


def specs_for(seed: int, **counts: int):
    suite = suites_select(codes=["G"])[0]
    if counts:
        rng = random.Random(f"{seed}:G:metamemory:generate")
        return draw.generate(rng, {**NONE, **counts})
    return suite.specs(suite.generators[0], seed=seed)


def of_kind(specs, kind: str) -> list:
    return [s for s in specs if s.metrics["kind"] == kind]


# ----------------------------------------------------------------------------- the draw


def test_suite_G_is_registered_with_its_design_weight_and_gates():
    suite = suites_select(codes=["G"])[0]
    assert (suite.name, suite.weight, suite.gate) == ("Metamemory", 5, 0.80)
    assert [gate.name for gate in suite.metric_gates] == [
        "route_accuracy >= 0.95",
        "route_store_accuracy >= 0.95",
        "look_accuracy >= 0.95",
        "abstention_accuracy >= 0.95",
        "paraphrase_false_answer_rate <= 0.02",
        "stale_as_current_rate <= 0",
    ]
    assert (suite.items, [g.key for g in suite.generators]) == ([], ["metamemory"])
    assert suite.item_count(seed=0) == 208


def test_the_same_seed_draws_the_same_items_and_another_seed_others():
    first = specs_for(21)
    assert specs_for(21) == first
    other = specs_for(22)
    assert [s.key for s in other] == [s.key for s in first]
    assert [s.data for s in other] != [s.data for s in first]


@pytest.mark.parametrize("seed", [0, 21])
def test_a_run_draws_48_look_questions_and_twenty_of_each_memory_type(seed):
    specs = specs_for(seed)
    assert Counter(
        (s.metrics["kind"], s.metrics.get("look"), s.metrics.get("how"))
        for s in specs
        if s.metrics["kind"] == "G1"
    ) == {
        ("G1", "stable", "no_volatility"): 8,
        ("G1", "stable", "fresh"): 8,
        ("G1", "stale", "older_than_volatility"): 16,
        ("G1", "unknowable", "unknown_subject"): 8,
        ("G1", "unknowable", "unknown_predicate"): 8,
    }
    assert Counter((s.metrics["route"], s.metrics["split"]) for s in of_kind(specs, "G2")) == {
        (route, split): 10 if split == "template" else 5 for route in ROUTES for split in SPLITS
    }
    # The template items first, as they were drawn before G2 in other words
    # existed; those after G3, numbered on.
    keys = [s.key for s in specs]
    assert keys[48:108] == [f"g2_{n:04d}" for n in range(1, 61)]
    assert keys[148:] == [f"g2_{n:04d}" for n in range(61, 121)]
    planned = Counter()
    for spec in specs:
        assert json.loads(json.dumps(spec.data)) == spec.data
        assert spec.metrics["planned"] == Counter(spec.data["checks"])
        planned.update(spec.metrics["planned"])
    assert planned == {
        "abstain": 48,
        "value": 32,
        "staleness": 32,
        "route": 120,
        "store": 120,
        "stale": 20,
        "false_answer": 20,
    }
    assert Counter((s.metrics["g3"], s.metrics["split"]) for s in of_kind(specs, "G3")) == {
        ("answer", "seen"): 10,
        ("answer", "held_out"): 10,
        ("never_stated", "seen"): 5,
        ("never_stated", "held_out"): 5,
        ("lookalike", "seen"): 5,
        ("lookalike", "held_out"): 5,
    }
    refs = [f["ref"] for s in specs for f in s.data["facts"]]
    assert len(refs) == len(set(refs))
    texts = [s.data["question"]["text"] for s in specs]
    assert len(set(texts)) >= 100  # an unknown predicate may be asked of one subject twice


def told(specs) -> dict[str, set[str]]:
    """Every subject the run tells the service about, with its predicates."""
    known: dict[str, set[str]] = {}
    for spec in specs:
        for fact in spec.data["facts"]:
            claim = fact["claim"]
            known.setdefault(claim["subject"].lower(), set()).add(claim["predicate"])
            if "object_entity" in claim:
                known.setdefault(claim["object_entity"].lower(), set())
    return known


def test_g1_stores_what_is_stable_or_stale_and_nothing_of_what_is_unknowable():
    specs = specs_for(4)
    known = told(specs)
    for spec in of_kind(specs, "G1"):
        question, look = spec.data["question"], spec.metrics["look"]
        subject, predicate = question["subject"], question["predicate"]
        assert subject in question["text"]
        volatility = PREDICATES[predicate]["volatility"]
        if look == "unknowable":
            assert spec.data["facts"] == [] and question["expects"] is None
            if spec.metrics["how"] == "unknown_subject":
                assert subject.lower() not in known
                # ... but named like one the agent knows: the same codename
                assert any(k.split()[0] == subject.split()[0].lower() for k in known)
            else:
                assert predicate not in known[subject.lower()] and known[subject.lower()]
            continue
        fact, other = spec.data["facts"]
        assert (fact["claim"]["subject"], fact["claim"]["predicate"]) == (subject, predicate)
        assert fact["claim"]["value"] == question["expects"]["value"]
        assert other["claim"]["subject"] == subject and other["claim"]["predicate"] != predicate
        assert PREDICATES[other["claim"]["predicate"]]["volatility"] is None
        assert question["needs_recheck"] == (look == "stale")
        expected = {"stale": {"stale"}, "stable": {None, "fresh"}}[look]
        assert volatility in expected
        assert (spec.metrics["how"] == "fresh") == (volatility == "fresh")
    definitions = draw.predicate_definitions()
    assert {definitions[name] for name in draw.predicates_of("stale")} == {STALE_SECONDS}
    assert {definitions[name] for name in draw.predicates_of("fresh")} == {30 * 86400}
    assert {definitions[name] for name in draw.predicates_of(None)} == {None}


def test_g2_stores_one_thing_of_its_memory_type_and_asks_about_it():
    specs = of_kind(specs_for(6), "G2")
    for spec in specs:
        data, route = spec.data, spec.metrics["route"]
        question = data["question"]
        assert (question["route"], question["expected_route"]) == ("auto", route)
        stored = {k for k in ("episode", "skill", "intention", "source") if k in data}
        expects = question["expects"]
        if route == "current_fact":
            [fact] = data["facts"]
            assert stored == set() and fact["claim"]["subject"] in question["text"]
            assert (expects["kind"], expects["value"]) == ("fact", fact["claim"]["value"])
        elif route == "multi_hop":
            works_for, based_in = (f["claim"] for f in data["facts"])
            assert works_for["object_entity"] == based_in["subject"]
            assert works_for["subject"] in question["text"]
            assert based_in["subject"] not in question["text"]  # the hop in between
            assert based_in["object_entity"] not in question["text"]
        else:
            kind = {
                "what_happened": "episode",
                "how_to": "skill",
                "what_to_do": "intention",
                "source": "source",
            }[route]
            assert stored == {kind} and data["facts"] == []
            if route == "source":
                assert data["source"]["title"] in question["text"]
                assert expects["sentence"] in data["source"]["content"]
    names = [s.data["skill"]["name"] for s in specs if "skill" in s.data]
    assert len(names) == len(set(names)) == 20
    texts = [s.data["question"]["text"] for s in specs if s.metrics["split"] != "template"]
    assert len(set(texts)) == 60


def test_g2_in_other_words_asks_each_half_in_its_own_words():
    specs = [s for s in of_kind(specs_for(9), "G2") if s.metrics["split"] != "template"]
    for spec in specs:
        split, text = spec.metrics["split"], spec.data["question"]["text"]
        assert spec.data["question"]["split"] == split
        other = phrasing.HELD_OUT if split == phrasing.SEEN else phrasing.SEEN
        # What it stores is named in its half's nouns, never the other's.
        stored = json.dumps(spec.data)
        if spec.metrics["route"] != "multi_hop":
            assert any(f" {noun}" in stored for noun in phrasing.NOUNS[split]), stored
        assert not any(f" {noun}" in stored for noun in phrasing.NOUNS[other]), stored
        templates = [t.split("{")[0] for t in phrasing.phrasings(split)]
        assert any(text.startswith(t) for t in templates), text


# ----------------------------------------------------------------------------- grading


def recalled(*evidence: dict, abstained: bool = False, route: str = "current_fact", near=()):
    body = {
        "id": "trace",
        "route": {"chosen": route, "rule": f"{route}.rule"},
        "abstained": abstained,
        "evidence": list(evidence),
        "near_misses": list(near),
        "groups": [],
    }
    return answer_of(ApiResponse(status=201, body=body, headers={}, text=json.dumps(body)))


def fact(ident: str, value, *, needs_recheck=False, subject: str = "Vela service") -> dict:
    status = {} if needs_recheck is None else {"needs_recheck": needs_recheck}
    return {
        "kind": "fact",
        "id": ident,
        "text": f"owning team — {subject}: {value}",
        "memory_status": status,
        "fact": {"id": ident, "value": value, "subject": {"name": subject}},
    }


REFUSED = answer_of(ApiResponse(status=400, body={"error": {}}, headers={}, text="bad"))


@pytest.mark.parametrize(
    ("answered", "verdict"),
    [
        (recalled(fact("f", "Data")), (True, "", "")),
        (
            recalled(fact("f", "Infra")),
            (False, "U0", 'the stored fact came back as "Infra", not "Data"'),
        ),
        (
            recalled(fact("x", "Data", subject="Lyra service"), fact("f", "Data")),
            (
                False,
                "R3",
                "fact 'owning team — Lyra service: Data' came first; the one asked about ranked 2",
            ),
        ),
        (
            recalled(fact("x", "Search", subject="Lyra service")),
            (
                False,
                "R2",
                "fact 'owning team — Lyra service: Search' came back instead of the one asked about",
            ),
        ),
        (recalled(abstained=True), (False, "R2", "no fact among the evidence")),
        (REFUSED, (False, "R2", "the recall was refused: HTTP 400 bad")),
    ],
)
def test_a_value_answer_wants_the_stored_fact_first(answered, verdict):
    result = judge_value(answered, "f", "Data")
    assert (result.ok, result.code, result.detail) == verdict


@pytest.mark.parametrize(
    ("flag", "stale", "verdict"),
    [
        (True, True, (True, "", "")),
        (False, False, (True, "", "")),
        (
            False,
            True,
            (False, "R0", "older than its predicate's volatility, but not flagged for re-check"),
        ),
        (
            True,
            False,
            (False, "R0", "flagged for re-check, but it is younger than any volatility it has"),
        ),
        (None, True, (False, "R0", "its memory_status does not say whether to re-check it")),
    ],
)
def test_the_recheck_flag_must_say_what_is_true(flag, stale, verdict):
    result = judge_staleness(recalled(fact("f", "Data", needs_recheck=flag)), "f", stale=stale)
    assert (result.ok, result.code, result.detail) == verdict
    missing = judge_staleness(recalled(fact("x", "Data")), "f", stale=stale)
    assert (missing.code, missing.detail) == ("R2", "the stored fact is not among the evidence")


def test_a_stored_value_must_be_answered_and_an_unknowable_abstained():
    stored = {"expects": {"value": "Data"}, "needs_recheck": False}
    good = judge_g1(recalled(fact("f", "Data")), stored, "f")
    assert {name: v.ok for name, v in good.items()} == {
        "abstain": True,
        "value": True,
        "staleness": True,
    }
    abstained = judge_answered(recalled(abstained=True))
    assert (abstained.code, abstained.detail) == (
        "R2",
        "the recall abstained, but the value is stored",
    )
    unknowable = {"expects": None, "needs_recheck": False}
    assert list(judge_g1(recalled(abstained=True), unknowable, None)) == ["abstain"]
    assert judge_g1(recalled(abstained=True), unknowable, None)["abstain"].ok
    offered = judge_g1(recalled(fact("x", "Search")), unknowable, None)["abstain"]
    assert (offered.code, offered.detail) == (
        "R3",
        "a false memory: offered fact 'owning team — Vela service: Search' for what never happened",
    )


def test_a_route_is_right_or_names_who_decided_and_the_store_must_hold_the_thing():
    assert judge_route(recalled(route="source"), "source").ok
    wrong = judge_route(recalled(route="what_happened"), "source")
    assert (wrong.code, wrong.detail) == (
        "R1",
        "routed to 'what_happened' (by 'what_happened.rule'), not 'source'",
    )
    assert judge_route(REFUSED, "source").code == "R2"
    skill = {"kind": "skill", "id": "v1", "text": "Rotate the keys"}
    found = lambda hit: hit.kind == "skill" and hit.id == "v1"  # noqa: E731
    assert judge_store(recalled(skill, route="how_to"), found, "the skill stored").ok
    assert judge_store(recalled(near=[skill], abstained=True), found, "the skill stored").ok
    missing = judge_store(recalled(fact("x", "Data")), found, "the skill stored")
    assert (missing.code, missing.detail) == (
        "R2",
        "the skill stored is neither evidence nor a near miss "
        "(first: fact 'owning team — Vela service: Data')",
    )


def outcome(passed: bool, planned: dict, correct: dict | None = None, kind: str = "G1", **extra):
    metrics = {"kind": kind, "planned": planned, **extra}
    if correct is not None:
        metrics["correct"] = correct
    return ItemOutcome(
        suite="G",
        item=f"i{len(planned)}",
        title="t",
        passed=passed,
        failure_code="" if passed else "R1",
        detail="",
        metrics=metrics,
        duration_ms=1.0,
        generator="metamemory",
    )


def test_the_summary_counts_checks_and_an_item_that_crashed_counts_all_it_planned():
    stored = {"abstain": 1, "value": 1, "staleness": 1}
    routed = {"route": 1, "store": 1}
    summary = summarize(
        [
            outcome(True, stored, stored),
            outcome(False, stored, {"abstain": 1, "value": 1}),
            outcome(False, {"abstain": 1}),  # crashed
            outcome(True, {"abstain": 1}, {"abstain": 1}),
            outcome(True, routed, routed, "G2", split="template"),
            outcome(False, routed, {"route": 1}, "G2", split="template"),
            outcome(False, routed, {}, "G2", split="seen"),
            outcome(True, routed, routed, "G2", split="held_out"),
            outcome(False, routed, {"store": 1}, "G2", split="held_out"),
            outcome(False, routed, {}, "G2", split="held_out"),
        ]
    )
    assert summary.score == 40.0
    assert summary.metrics == {
        "abstention_accuracy": 0.75,
        "staleness_accuracy": 0.5,
        "route_accuracy": 1.0,
        "route_store_accuracy": 0.5,
        "route_accuracy_seen": 0.0,
        "route_store_accuracy_seen": 0.0,
        "route_accuracy_held_out": 1 / 3,
        "route_store_accuracy_held_out": 2 / 3,
        "look_accuracy": 0.5,
    }


def g_result(*, routed: int = 60, abstained: int = 40, worded: int = 60, looked: int = 40):
    checks = {"route": 1, "store": 1}
    outcomes = [
        outcome(True, checks, {"route": int(i < routed), "store": 1}, "G2", split="template")
        for i in range(60)
    ]
    # In other words: `worded` of 60 routed right, those alone passing; never gated.
    outcomes += [
        outcome(i < worded, checks, dict.fromkeys(checks, int(i < worded)), "G2", split=split)
        for i in range(60)
        for split in [(phrasing.SEEN, phrasing.HELD_OUT)[i % 2]]
    ]
    outcomes += [
        outcome(i < looked, {"abstain": 1}, {"abstain": int(i < abstained)}) for i in range(40)
    ]
    outcomes += [
        outcome(True, {"stale": 1}, {"stale": 1}, "G3", g3="answer", split=split, answered=True)
        for split in ("seen", "held_out")
    ]
    outcomes += [
        outcome(True, {"false_answer": 1}, {"false_answer": 1}, "G3", g3="lookalike")
        for _ in range(3)
    ]
    return suite_result(suite=suites_select(codes=["G"])[0], outcomes=outcomes)


def test_the_gates_hold_at_95_percent_exactly_and_the_pass_rate_at_80():
    card = score_run(
        [g_result(routed=57, abstained=38, worded=29, looked=38)], designed=designed_suites()
    )
    assert [(g.name, g.passed, g.detail) for g in card.gates if g.kind != "cap"] == [
        ("G pass rate >= 80%", True, "132/165 items passed (80.0%)"),
        ("G route_accuracy >= 0.95", True, "route_accuracy 0.95"),
        ("G route_store_accuracy >= 0.95", True, "route_store_accuracy 1"),
        ("G look_accuracy >= 0.95", True, "look_accuracy 0.95"),
        ("G abstention_accuracy >= 0.95", True, "abstention_accuracy 0.95"),
        ("G paraphrase_false_answer_rate <= 0.02", True, "paraphrase_false_answer_rate 0"),
        ("G stale_as_current_rate <= 0", True, "stale_as_current_rate 0"),
    ]
    # The words the router never saw, routed half right: reported, not gated.
    result = g_result(routed=57, abstained=38, worded=29, looked=38)
    assert (result.metrics["route_accuracy_seen"], result.metrics["route_accuracy_held_out"]) == (
        15 / 30,
        14 / 30,
    )
    failed = score_run(
        [g_result(routed=56, abstained=37, worded=28, looked=37)], designed=designed_suites()
    )
    assert [(g.name, g.detail) for g in failed.gates if not g.passed and g.kind != "cap"] == [
        ("G pass rate >= 80%", "130/165 items passed (78.8%)"),
        ("G route_accuracy >= 0.95", "route_accuracy 0.9333"),
        ("G look_accuracy >= 0.95", "look_accuracy 0.925"),
        ("G abstention_accuracy >= 0.95", "abstention_accuracy 0.925"),
    ]


# ------------------------------------------------------------- against the real service


@pytest.fixture
def eager(monkeypatch):
    """Embeddings, fact texts and skill validations computed in this process as
    each write commits (a worker's job)."""
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)


def run_small(transport, *, seed: int = 11, **counts: int) -> tuple[list, list[ItemOutcome]]:
    return run_suite_small(
        transport,
        code="G",
        module=metamemory,
        draw=draw,
        none=NONE,
        seed=seed,
        counts=counts,
        successors=True,
    )


RECALL = "/api/v1/recall"


class RecallRewriter(Faulty):
    def rewrite(self, body: dict) -> dict:
        return body

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "POST" and path == RECALL and response.status == 201:
            rewritten = self.rewrite(json.loads(json.dumps(response.body)))
            return dataclasses.replace(response, body=rewritten)
        return response


class RecheckFlag(RecallRewriter):
    """Every fact's needs_recheck set to `flag` (None: left out)."""

    def __init__(self, inner, flag):
        super().__init__(inner)
        self.flag = flag

    def rewrite(self, body):
        for e in body["evidence"]:
            if e["kind"] == "fact":
                if self.flag is None:
                    e["memory_status"].pop("needs_recheck", None)
                else:
                    e["memory_status"]["needs_recheck"] = self.flag
        return body


class AlwaysAbstains(RecallRewriter):
    """Nothing offered unless the probe asks (prepare's own readiness check passes)."""

    def request(self, method, path, *, body=None, headers=None):
        self.probe = (
            isinstance(body, dict)
            and body.get("route") == "current_fact"
            and "?" not in body.get("query", "")
        )
        return super().request(method, path, body=body, headers=headers)

    def rewrite(self, body):
        if self.probe:
            return body
        body["near_misses"], body["evidence"], body["abstained"] = [], [], True
        return body


class AllCurrent(RecallRewriter):
    """Every fact offered as current, the superseded value too."""

    def rewrite(self, body):
        for e in body["evidence"]:
            if e["kind"] == "fact":
                e["memory_status"]["currentness"] = "current"
        return body


class AnswersEverything(RecallRewriter):
    """What came nearest is offered as the answer, even when recall abstained."""

    def rewrite(self, body):
        if body["abstained"] and body["near_misses"]:
            body["evidence"], body["abstained"] = body["near_misses"], False
        return body


class RoutesEverythingTo(Faulty):
    """The service asked with route auto answers as if the route were `route`."""

    def __init__(self, inner, route):
        super().__init__(inner)
        self.route = route

    def request(self, method, path, *, body=None, headers=None):
        if method == "POST" and path == RECALL and body.get("route") == "auto":
            body = {**body, "route": self.route}
        return super().request(method, path, body=body, headers=headers)


class RefusesPredicates(Faulty):
    def request(self, method, path, *, body=None, headers=None):
        if method == "PUT" and path.startswith("/api/v1/predicates/"):
            return ApiResponse(status=503, body=None, headers={}, text="unavailable")
        return super().request(method, path, body=body, headers=headers)


def codes(outcomes, **by) -> list[str]:
    return [o.failure_code for o in outcomes if all(o.metrics.get(k) == v for k, v in by.items())]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_kind_passes_against_the_real_service(eager):
    specs, outcomes = run_small(InProcessTransport(), g1=12, g2=12, g3=8)
    assert [(o.item, o.failure_code, o.detail) for o in outcomes] == [
        (s.key, "", "") for s in specs
    ]
    metrics = summarize(outcomes).metrics
    assert (metrics["paraphrase_false_answer_rate"], metrics["stale_as_current_rate"]) == (0, 0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_superseded_value_shown_as_current_or_an_answer_where_none_is_stored_fails_G3(eager):
    _, outcomes = run_small(AllCurrent(InProcessTransport()), g3=8)
    stale = [o for o in outcomes if o.metrics.get("g3") == "answer" and o.failure_code]
    assert stale and {o.failure_code for o in stale} == {"R3"}
    assert all("shown as current" in o.detail for o in stale)
    assert summarize(outcomes).metrics["stale_as_current_rate"] > 0
    _, outcomes = run_small(AnswersEverything(InProcessTransport()), g3=8)
    negatives = [o for o in outcomes if o.metrics.get("g3") != "answer"]
    assert [o.failure_code for o in negatives] == ["R3"] * len(negatives) != []
    assert summarize(outcomes).metrics["paraphrase_false_answer_rate"] == 1.0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_abstaining_on_every_paraphrase_is_safe_and_reported_as_unanswered(eager):
    _, outcomes = run_small(AlwaysAbstains(InProcessTransport()), g3=8)
    assert [o.failure_code for o in outcomes] == [""] * 8
    metrics = summarize(outcomes).metrics
    assert (metrics["paraphrase_answer_rate"], metrics["paraphrase_answer_rate_held_out"]) == (
        0,
        0,
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_stale_values_never_flagged_and_fresh_ones_flagged_are_R0(eager):
    _, outcomes = run_small(RecheckFlag(InProcessTransport(), False), g1=6)
    assert codes(outcomes, look="stale") == ["R0", "R0"]
    assert [o.detail.split(": ", 2)[-1] for o in outcomes if o.metrics.get("look") == "stale"] == [
        "older than its predicate's volatility, but not flagged for re-check"
    ] * 2
    assert codes(outcomes, look="stable") == ["", ""]
    _, outcomes = run_small(RecheckFlag(InProcessTransport(), True), g1=6)
    assert codes(outcomes, look="stable") == ["R0", "R0"]
    assert codes(outcomes, look="stale") == ["", ""]
    _, outcomes = run_small(RecheckFlag(InProcessTransport(), None), g1=6)
    assert codes(outcomes, look="stale") + codes(outcomes, look="stable") == ["R0"] * 4
    assert summarize(outcomes).metrics["staleness_accuracy"] == 0.0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_recall_that_always_abstains_fails_what_is_stored_R2(eager):
    _, outcomes = run_small(AlwaysAbstains(InProcessTransport()), g1=6, g2=6)
    assert codes(outcomes, look="stable") + codes(outcomes, look="stale") == ["R2"] * 4
    assert codes(outcomes, look="unknowable") == ["", ""]
    assert codes(outcomes, kind="G2") == ["R2"] * 6  # nothing came back from any store
    metrics = summarize(outcomes).metrics
    assert (metrics["abstention_accuracy"], metrics["route_store_accuracy"]) == (2 / 6, 0.0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_router_that_sends_everything_to_one_store_is_R1_for_every_other_type(eager):
    specs, outcomes = run_small(RoutesEverythingTo(InProcessTransport(), "what_happened"), g2=12)
    for spec, result in zip(specs, outcomes, strict=True):
        if spec.metrics["route"] == "what_happened":
            assert result.passed, result.detail
        else:
            assert result.failure_code == "R1"
            assert "routed to 'what_happened' (by None), not" in result.detail
    assert summarize(outcomes).metrics["route_accuracy"] == 2 / 12


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_wrong_route_fails_a_question_in_other_words_too_and_counts_in_its_half(eager):
    specs, outcomes = run_small(
        RoutesEverythingTo(InProcessTransport(), "current_fact"), g2_words=12
    )
    assert [s.metrics["split"] for s in specs] == ["seen"] * 6 + ["held_out"] * 6
    for spec, result in zip(specs, outcomes, strict=True):
        if spec.metrics["route"] == "current_fact":
            assert result.passed, result.detail
        else:
            assert result.failure_code == "R1"
            assert "routed to 'current_fact' (by None), not" in result.detail
    metrics = summarize(outcomes).metrics
    assert (metrics["route_accuracy_seen"], metrics["route_accuracy_held_out"]) == (1 / 6, 1 / 6)
    assert "route_accuracy" not in metrics  # no template item ran


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_questions_in_other_words_fail_only_where_the_router_went_wrong(eager):
    specs, outcomes = run_small(InProcessTransport(), g2_words=12)
    wrong = [o for o in outcomes if not o.passed]
    assert {o.failure_code for o in wrong} <= {"R1"}
    assert all(o.metrics["correct"].get("route", 0) == 0 for o in wrong)
    metrics = summarize(outcomes).metrics
    for half in ("seen", "held_out"):
        assert metrics[f"route_store_accuracy_{half}"] == metrics[f"route_accuracy_{half}"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_predicates_that_cannot_be_defined_fail_every_item_W0(eager):
    specs, outcomes = run_small(RefusesPredicates(InProcessTransport()), g1=3, g2=2)
    assert [(o.failure_code, o.detail) for o in outcomes] == [
        ("W0", "world setup failed: PUT /predicates/owning_team refused: HTTP 503 unavailable")
    ] * 5


# --------------------------------------------------------------------------- the command


def battery(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", *args, stdout=out, no_color=True)
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_G_exits_non_zero_when_recall_always_abstains(
    eager, monkeypatch, tmp_path
):
    monkeypatch.setattr(draw, "COUNTS", {"g1": 3, "g2": 0, "g3": 0})
    monkeypatch.setattr(
        "battery.services.transport_open",
        lambda base_url, via=None: AlwaysAbstains(InProcessTransport()),
    )
    with pytest.raises(CommandError) as caught:
        battery("run", "--suite", "G", "--report", str(tmp_path), "--seed", "8")
    run = BatteryRun.objects.get()
    assert (caught.value.returncode, run.status) == (1, "failed")
    assert [g["name"] for g in run.gates if not g["passed"] and not g["fail_closed"]] == [
        "G pass rate >= 80%",
        "G route_accuracy >= 0.95",  # not reported: no G2 item ran
        "G route_store_accuracy >= 0.95",
        "G look_accuracy >= 0.95",
        "G abstention_accuracy >= 0.95",
        "G paraphrase_false_answer_rate <= 0.02",  # not reported: no G3 item ran
        "G stale_as_current_rate <= 0",
    ]
    assert Counter(run.items.values_list("failure_code", flat=True)) == {"R2": 2, "": 1}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_G_passes_its_gates_with_a_real_worker(celery_worker_process, tmp_path):
    output = battery("run", "--suite", "G", "--seed", "7", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    suite = run.suite_scores["G"]
    assert (run.status, run.suites, suite["items"], suite["gate_passed"]) == (
        "incomplete",
        ["G"],
        208,
        True,
    ), output
    assert [(g["name"], g["passed"]) for g in run.gates if g["kind"] != "cap"] == [
        ("G pass rate >= 80%", True),
        ("G route_accuracy >= 0.95", True),
        ("G route_store_accuracy >= 0.95", True),
        ("G look_accuracy >= 0.95", True),
        ("G abstention_accuracy >= 0.95", True),
        ("G paraphrase_false_answer_rate <= 0.02", True),
        ("G stale_as_current_rate <= 0", True),
    ]
    # Reported, not gated (issue #19 asks >= 0.95 held out): the figures of the run.
    assert {"paraphrase_answer_rate", "paraphrase_answer_rate_held_out"} <= set(suite["metrics"]), (
        suite
    )
    # G2 in other words, reported per half, not gated (issue 20 asks >= 0.95 held out).
    assert {
        "route_accuracy_seen",
        "route_accuracy_held_out",
        "route_store_accuracy_seen",
        "route_store_accuracy_held_out",
    } <= set(suite["metrics"]), suite
