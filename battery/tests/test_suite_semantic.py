"""Suite C: the draw is deterministic and covers what it claims, the grading
counts exactly, the gates sit where DESIGN and the issue put them, and every
kind of item, pointed at a service with one fault, fails with the right code."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import re
from collections import Counter
from datetime import UTC, datetime
from difflib import SequenceMatcher
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from django.core.management import CommandError, call_command

from battery.judging import miss
from battery.models import BatteryRun
from battery.registry import ItemFailure, ItemOutcome, designed_suites, suites_select
from battery.scoring import score_run, suite_result
from battery.suites import semantic
from battery.suites.episodic import draw as episodic_draw
from battery.suites.episodic.api import answer_of
from battery.suites.forgetting import consolidation_draw, skill_draw
from battery.suites.forgetting import draw as forgetting_draw
from battery.suites.metamemory import draw as metamemory_draw
from battery.suites.procedural import draw as procedural_draw
from battery.suites.prospective import draw as prospective_draw
from battery.suites.semantic import asked, draw
from battery.suites.semantic.draw import value_key
from battery.suites.semantic.judge import (
    Tally,
    failing_checks,
    judge_paths,
    judge_recall_false_answer,
    judge_recall_found,
    judge_recall_stale,
    judge_values,
    recall_metrics,
    summarize,
)
from battery.suites.working_state import draw as working_state_draw
from battery.taxonomy import FailureCode as F
from battery.tests.helpers import Faulty, live_use, run_suite_small
from battery.transport import ApiResponse, InProcessTransport
from piper.celery import app as celery_app
from recall import about

KINDS = ("c1", "c2", "c3", "c4", "c5")
NONE = dict.fromkeys(KINDS, 0)


def specs_for(seed: int, **counts: int):
    suite = suites_select(codes=["C"])[0]
    if counts:
        return draw.generate(random.Random(f"{seed}:C:semantic:generate"), {**NONE, **counts})
    return suite.specs(suite.generators[0], seed=seed)


def claims(spec) -> list[dict]:
    return [w["claim"] for w in spec.data["writes"] if w["op"] == "assert"]


# ----------------------------------------------------------------------------- the draw


def test_suite_C_is_registered_with_its_design_weight_and_gates():
    suite = suites_select(codes=["C"])[0]
    assert (suite.name, suite.weight, suite.gate) == ("Semantic and temporal memory", 20, 0.99)
    assert [gate.name for gate in suite.metric_gates] == [
        "current_value_accuracy >= 0.99",
        "as_of_accuracy >= 0.99",
        "authority_temporal_resolution_accuracy >= 0.99",
        "bitemporal_accuracy >= 0.99",
        "multihop_accuracy >= 0.99",
        "stale_value_rate <= 0.005",
        "recall_stale_as_current_rate <= 0",
        "recall_current_found_rate >= 0.95",
        "recall_false_answer_rate <= 0",
    ]
    assert (suite.items, [g.key for g in suite.generators]) == ([], ["semantic", "semantic_recall"])
    assert suite.item_count(seed=0) == 540 + 72


def test_the_same_seed_draws_the_same_items_and_another_seed_others():
    first = specs_for(21)
    assert specs_for(21) == first
    other = specs_for(22)
    assert [s.key for s in other] == [s.key for s in first]
    assert [s.data for s in other] != [s.data for s in first]


@pytest.mark.parametrize("seed", [0, 21])
def test_a_run_draws_540_items_of_all_five_kinds(seed):
    specs = specs_for(seed)
    assert len(specs) == 540
    assert Counter(s.metrics["kind"] for s in specs) == {
        "C1": 200,
        "C2": 120,
        "C3": 80,
        "C4": 80,
        "C5": 60,
    }
    assert [s.key for s in specs[:2]] == ["c1_0001", "c1_0002"]
    assert len({s.key for s in specs}) == 540
    planned = Counter()
    for spec in specs:
        assert spec.metrics["planned"] == Counter(q["metric"] for q in spec.data["questions"])
        planned.update(spec.metrics["planned"])
    ended = sum("ended" in s.title for s in specs if s.metrics["kind"] == "C5")
    assert 0 < ended < 60
    assert planned == {
        "current_value": 200 + 120 + 80,  # C1, C2, C4
        "as_of": 120 * 4 + 80 * 2,  # C2, C4
        "authority_temporal_resolution": 80 * 10,  # C3
        "bitemporal": 80 * 3,  # C4
        "multihop": 3 * (60 - ended) + 4 * ended,  # C5
    }
    # What it writes and asks survives JSON, value for value.
    for spec in specs:
        assert json.loads(json.dumps(spec.data)) == spec.data


def test_names_are_look_alikes_but_never_the_same_name_in_another_case():
    spellings: dict[str, set[str]] = {}
    for spec in specs_for(3):
        for claim in claims(spec):
            for name in (claim["subject"], claim.get("object_entity")):
                if name:
                    spellings.setdefault(name.lower(), set()).add(name)
    assert all(len(names) == 1 for names in spellings.values())
    subjects = sorted({c["subject"] for s in specs_for(3, c1=200) for c in claims(s)})
    # Nearly every C1 subject has a look-alike (the last cluster may be cut short).
    alike = [
        name
        for name in subjects
        if any(
            SequenceMatcher(None, name, other).ratio() >= 0.8 for other in subjects if other != name
        )
    ]
    assert len(alike) >= len(subjects) - 2
    assert len({name.split()[0] for name in subjects}) > 10


def test_c1_states_each_fact_once_and_asks_for_it_in_any_case():
    specs = specs_for(5, c1=200)
    predicates = Counter(claims(s)[0]["predicate"] for s in specs)
    assert len(predicates) > 12
    asked = Counter()
    for spec in specs:
        (write,) = spec.data["writes"]
        (question,) = spec.data["questions"]
        assert (write["round"], question["q"], question["metric"]) == (
            1,
            "current",
            "current_value",
        )
        assert question["subject"].lower() == write["claim"]["subject"].lower()
        assert question["expect"] == {"value": write["claim"]["value"]}
        asked[question["subject"] == write["claim"]["subject"]] += 1
    assert asked[True] > 0 and asked[False] > 0


def test_c2_chains_have_2_to_6_versions_in_valid_time_order_from_one_source():
    specs = specs_for(5, c2=120)
    lengths = Counter()
    for spec in specs:
        chain = claims(spec)
        lengths[len(chain)] += 1
        starts = [c["valid_from"] for c in chain]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)
        assert len({value_key(c["value"]) for c in chain}) == len(chain)
        assert len({c["authority"] for c in chain}) == 1
        assert [w["round"] for w in spec.data["writes"]] == list(range(1, len(chain) + 1))
        current, *as_ofs = spec.data["questions"]
        assert current["expect"] == {"value": chain[-1]["value"]}
        assert current["stale"] == [c["value"] for c in chain[:-1]]
        assert [q["q"] for q in as_ofs] == ["as_of"] * 4
        assert as_ofs[-1]["expect"] is None  # before the first version: nothing
    assert sorted(lengths) == [2, 3, 4, 5, 6]


def test_c3_puts_a_weaker_claim_against_a_stronger_then_a_correction_at_least_as_strong():
    rank = {authority: index for index, authority in enumerate(draw.RANKED)}
    variants = Counter()
    for spec in specs_for(5, c3=80):
        high, low, fix = spec.data["writes"]
        assert [w["round"] for w in (high, low, fix)] == [1, 2, 3]
        fix_authority = (fix.get("claim") or fix.get("body"))["authority"]
        assert rank[low["claim"]["authority"]] > rank[high["claim"]["authority"]]
        assert rank[fix_authority] <= rank[high["claim"]["authority"]]
        assert low["claim"]["valid_from"] > high["claim"]["valid_from"]
        variants[fix["op"]] += 1
        questions = spec.data["questions"]
        assert [q.get("at") for q in questions] == [2] * 5 + [None] * 5
        assert {q["metric"] for q in questions} == {"authority_temporal_resolution"}
        assert questions[1]["expect"] == {"value": high["claim"]["value"]}
    assert sorted(variants) == ["assert", "correct"]


def test_c4_tells_values_out_of_order_one_arrival_per_round():
    for spec in specs_for(5, c4=80):
        arrivals = claims(spec)
        starts = [c["valid_from"] for c in arrivals]
        assert starts != sorted(starts)
        assert 3 <= len(arrivals) <= 5
        assert [w["round"] for w in spec.data["writes"]] == list(range(1, len(arrivals) + 1))
        known = [q for q in spec.data["questions"] if q["q"] == "as_known_at"]
        assert [q["record_offset_us"] for q in known][:2] == [-1, 0]
        assert known[0]["record_ref"] == known[1]["record_ref"]  # just before, and at, one arrival
        assert known[0]["expect"] != known[1]["expect"]


def test_the_reference_model_of_late_evidence():
    t = [datetime(2010 + i, 1, 1, tzinfo=UTC) for i in range(4)]
    arrivals = [(t[2], "c"), (t[0], "a"), (t[1], "b")]  # told c, then a, then b
    belief = draw._belief
    assert [belief(arrivals, upto, t[1]) for upto in (1, 2, 3)] == [None, "a", "b"]
    assert [belief(arrivals, upto, t[3]) for upto in (1, 2, 3)] == ["c", "c", "c"]


def test_c5_draws_2_to_4_hop_chains_intact_and_ended_three_ways():
    hops, variants = Counter(), Counter()
    for spec in specs_for(5, c5=60):
        chain = [w for w in spec.data["writes"] if w["ref"].startswith("hop")]
        hops[len(chain)] += 1
        for a, b in zip(chain, chain[1:], strict=False):
            assert a["claim"]["object_entity"] == b["claim"]["subject"]
        variant = spec.title.rsplit("(", 1)[1].rstrip(")") if "ended" in spec.title else None
        variants[variant] += 1
        questions = spec.data["questions"]
        assert len(questions) == (3 if variant is None else 4)
        assert questions[0]["expect"][0]["nodes"][0] == chain[0]["claim"]["subject"]
    assert sorted(hops) == [2, 3, 4]
    assert set(variants) == {None, "end", "supersede", "valid_to"}


# ----------------------------------------------------------------------------- grading


def value_question(expect, *, nothing=False, stale=(), forbidden=(), confusable=()):
    return {
        "q": "current",
        "metric": "current_value",
        "expect": None if nothing else {"value": expect},
        "stale": list(stale),
        "forbidden": list(forbidden),
        "confusable": list(confusable),
    }


@pytest.mark.parametrize(
    ("question", "got", "verdict"),
    [
        (value_question("b", stale=["a"]), ["b"], (True, "", False, "")),
        (value_question(100.0), [100], (True, "", False, "")),
        (
            value_question("b", stale=["a"]),
            ["a"],
            (False, "R3", True, 'expected ["b"], got ["a"] (a superseded or outdated value)'),
        ),
        (
            value_question("b", stale=["a"]),
            ["b", "a"],
            (False, "R3", True, 'expected ["b"], got ["b", "a"] (a superseded or outdated value)'),
        ),
        (
            value_question("b", forbidden=["z"]),
            ["z"],
            (False, "R3", False, 'expected ["b"], got ["z"] (a value not in force at that time)'),
        ),
        (
            value_question(None, nothing=True, forbidden=["z"]),
            ["z"],
            (False, "R3", False, 'expected nothing, got ["z"] (a value not in force at that time)'),
        ),
        (value_question("b"), [], (False, "R2", False, 'expected ["b"], got []')),
        (value_question(1), [True], (False, "R3", False, "expected [1], got [true]")),
        (
            value_question("Porto", confusable=["Portland"]),
            ["Portland"],
            (False, "R3", False, 'expected ["Porto"], got ["Portland"] (a look-alike\'s value)'),
        ),
        (
            value_question("b"),
            ["b", "x"],
            (False, "R3", False, 'expected ["b"], got ["b", "x"] (more than the one value)'),
        ),
    ],
)
def test_value_answers_are_classified_in_order(question, got, verdict):
    result = judge_values(question, got)
    assert (result.ok, result.code, result.stale, result.detail) == verdict


def path(*parts):
    return {"nodes": list(parts[::2]), "predicates": list(parts[1::2])}


@pytest.mark.parametrize(
    ("expect", "forbidden", "got", "verdict"),
    [
        ([path("A", "p", "B")], [], [path("a", "p", "b")], (True, "")),
        ([], [path("A", "p", "B")], [], (True, "")),
        ([path("A", "p", "B")], [], [], (False, "R2", "expected A -p-> B, got no path")),
        (
            [],
            [path("A", "p", "B")],
            [path("A", "p", "B")],
            (
                False,
                "R3",
                "expected no path, got A -p-> B (through a relation not valid at that time)",
            ),
        ),
        (
            [path("A", "p", "B")],
            [],
            [path("A", "q", "B")],
            (False, "R3", "expected A -p-> B, got A -q-> B"),
        ),
        (
            [path("A", "p", "B")],
            [],
            [path("A", "p", "B"), path("A", "q", "B")],
            (False, "R3", "expected A -p-> B, got A -p-> B; A -q-> B (paths that are not there)"),
        ),
    ],
)
def test_path_answers_are_classified(expect, forbidden, got, verdict):
    result = judge_paths({"expect": expect, "forbidden": forbidden}, got)
    assert (result.ok, result.code, result.detail)[: len(verdict)] == verdict


def test_an_item_fails_with_its_first_miss_and_keeps_every_count():
    tally = Tally(planned={"as_of": 3, "current_value": 1})
    tally.record({"metric": "current_value"}, "current X.p", judge_values(value_question(1), [1]))
    tally.record({"metric": "as_of"}, "as_of X.p at T1", miss(F.R3, "stale", stale=True))
    tally.record({"metric": "as_of"}, "as_of X.p at T2", judge_values(value_question(2), [2]))
    tally.record({"metric": "as_of"}, "as_of X.p at T3", miss(F.R2, "gone"))
    with pytest.raises(ItemFailure) as caught:
        tally.outcome()
    assert (caught.value.code, caught.value.detail) == (
        F.R3,
        "as_of X.p at T1: stale (and 1 more: R2)",
    )
    assert caught.value.metrics == {
        "correct": {"as_of": 1, "current_value": 1},
        "stale": 1,
        "misses": [
            {"q": "as_of X.p at T1", "code": "R3", "stale": True},
            {"q": "as_of X.p at T3", "code": "R2", "stale": False},
        ],
    }
    passing = Tally(planned={"multihop": 1})
    passing.record({"metric": "multihop"}, "paths", judge_paths({"expect": []}, []))
    assert passing.outcome() == {"correct": {"multihop": 1}, "stale": 0}


def outcome(passed: bool, planned: dict, correct: dict | None = None, stale: int = 0):
    metrics = {"kind": "CX", "planned": planned}
    if correct is not None:
        metrics.update(correct=correct, stale=stale)
    return ItemOutcome(
        suite="C",
        item=f"i{len(planned)}",
        title="t",
        passed=passed,
        failure_code="" if passed else "R1",
        detail="",
        metrics=metrics,
        duration_ms=1.0,
        generator="semantic",
    )


def test_the_summary_counts_answers_and_an_item_that_crashed_counts_all_it_planned():
    summary = summarize(
        [
            outcome(False, {"current_value": 1, "as_of": 4}, {"current_value": 1, "as_of": 3}, 1),
            outcome(
                True, {"authority_temporal_resolution": 10}, {"authority_temporal_resolution": 10}
            ),
            outcome(False, {"current_value": 1, "as_of": 2, "bitemporal": 3}),  # crashed
            outcome(True, {"multihop": 4}, {"multihop": 4}),
        ]
    )
    assert summary.score == 50.0
    assert summary.metrics == {
        "current_value_accuracy": 0.5,
        "as_of_accuracy": 0.5,
        "authority_temporal_resolution_accuracy": 1.0,
        "bitemporal_accuracy": 0.0,
        "multihop_accuracy": 1.0,
        "stale_value_rate": 1 / 25,
        "current_fact_accuracy": 0.5,
    }


def c_result(*, correct: int = 198, current: int = 198, stale: int = 5):
    """Suite C's result over 200 answers per metric (1,000 in all), and four
    C6 items, every check held."""
    outcomes = [
        outcome(
            True,
            {metric: 200},
            {metric: current if metric == "current_value" else correct},
            stale if metric == "multihop" else 0,
        )
        for metric in draw.METRICS
    ]
    outcomes += [
        c6_outcome(split, kind, held)
        for split in ("seen", "held_out")
        for kind, held in (
            ("chain", {"stale": True, "found": True}),
            ("ended", {"stale": True, "false_answer": True}),
        )
    ]
    return suite_result(suite=suites_select(codes=["C"])[0], outcomes=outcomes)


def test_the_gates_hold_at_99_percent_and_half_a_percent_stale_exactly():
    card = score_run([c_result()], designed=designed_suites())
    assert [(g.name, g.kind, g.passed, g.detail) for g in card.gates] == [
        ("C pass rate >= 99%", "suite", True, "9/9 items passed (100.0%)"),
        ("C current_value_accuracy >= 0.99", "metric", True, "current_value_accuracy 0.99"),
        ("C as_of_accuracy >= 0.99", "metric", True, "as_of_accuracy 0.99"),
        (
            "C authority_temporal_resolution_accuracy >= 0.99",
            "metric",
            True,
            "authority_temporal_resolution_accuracy 0.99",
        ),
        ("C bitemporal_accuracy >= 0.99", "metric", True, "bitemporal_accuracy 0.99"),
        ("C multihop_accuracy >= 0.99", "metric", True, "multihop_accuracy 0.99"),
        ("C stale_value_rate <= 0.005", "metric", True, "stale_value_rate 0.005"),
        (
            "C recall_stale_as_current_rate <= 0",
            "metric",
            True,
            "recall_stale_as_current_rate 0",
        ),
        ("C recall_current_found_rate >= 0.95", "metric", True, "recall_current_found_rate 1"),
        ("C recall_false_answer_rate <= 0", "metric", True, "recall_false_answer_rate 0"),
        (
            "cap 70: current_fact_accuracy, procedure_execution, handover_retention >= 0.6",
            "cap",
            False,
            "current_fact_accuracy 0.99; not reported: procedure_execution, handover_retention, "
            "so the cap applies (fail closed); total capped at 70",
        ),
        (
            "cap 85: current_fact_accuracy, as_of_accuracy, cancelled_intention_suppression, "
            "negative_transfer_safety >= 0.8",
            "cap",
            False,
            "current_fact_accuracy 0.99; as_of_accuracy 0.99; not reported: "
            "cancelled_intention_suppression, negative_transfer_safety, so the cap applies "
            "(fail closed); total capped at 85",
        ),
    ]
    assert (card.failed, card.status) == (False, "incomplete")  # C alone: no gate failed


def test_one_answer_fewer_or_one_stale_answer_more_fails_the_run():
    card = score_run([c_result(current=197, stale=6)], designed=designed_suites())
    failed = [(g.name, g.detail) for g in card.gates if not g.passed and not g.fail_closed]
    assert failed == [
        ("C current_value_accuracy >= 0.99", "current_value_accuracy 0.985"),
        ("C stale_value_rate <= 0.005", "stale_value_rate 0.006"),
    ]
    assert card.failed is True


# ------------------------------------------------------------- against the real service


def run_small(transport, *, seed: int = 11, **counts: int) -> tuple[list, list[ItemOutcome]]:
    """Suite C's items for `counts`, through suite_execute against `transport`."""
    return run_suite_small(
        transport,
        code="C",
        module=semantic,
        draw=draw,
        none=NONE,
        seed=seed,
        counts=counts,
        successors=False,
    )


def shown(value) -> str:
    return json.dumps([value], ensure_ascii=False)


def by_kind(outcomes, kind: str) -> list[ItemOutcome]:
    return [o for o in outcomes if o.metrics["kind"] == kind]


def _chain_for(transport, path, headers):
    chain_path = path.replace("/api/v1/facts/current?", "/api/v1/facts/chain?")
    return transport.inner.request("GET", chain_path, headers=headers)


class StaleCurrent(Faulty):
    """current answers with the first version ever recorded: a stale cache."""

    def request(self, method, path, *, body=None, headers=None):
        if method == "GET" and path.startswith("/api/v1/facts/current?"):
            chain = _chain_for(self, path, headers)
            return dataclasses.replace(chain, body={**chain.body, "facts": chain.body["facts"][:1]})
        return super().request(method, path, body=body, headers=headers)


class LatestClaimWins(Faulty):
    """current answers with the latest claim still open, whatever its authority."""

    def request(self, method, path, *, body=None, headers=None):
        if method == "GET" and path.startswith("/api/v1/facts/current?"):
            chain = _chain_for(self, path, headers)
            open_ = [f for f in chain.body["facts"] if f["memory_status"]["superseded_at"] is None]
            return dataclasses.replace(chain, body={**chain.body, "facts": open_[-1:]})
        return super().request(method, path, body=body, headers=headers)


class HidesContests(Faulty):
    """current answers without the open contests in memory_status."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "GET" and path.startswith("/api/v1/facts/current?"):
            facts = [
                {**f, "memory_status": {**f["memory_status"], "contested_by": []}}
                for f in response.body["facts"]
            ]
            return dataclasses.replace(response, body={**response.body, "facts": facts})
        return response


class AuthorityBlindWrites(Faulty):
    """Writes lose their provenance on the way in: every claim is of equal authority."""

    def request(self, method, path, *, body=None, headers=None):
        if method == "POST" and isinstance(body, dict):
            strip = lambda c: {k: v for k, v in c.items() if k not in ("authority", "source_type")}  # noqa: E731
            body = {"facts": [strip(c) for c in body["facts"]]} if "facts" in body else strip(body)
        return super().request(method, path, body=body, headers=headers)


def _with_query(path: str, **changes) -> str:
    parts = urlsplit(path)
    query = dict(parse_qsl(parts.query))
    query.update({k: v for k, v in changes.items() if v is not None})
    for k in [k for k, v in changes.items() if v is None]:
        query.pop(k, None)
    return f"{parts.path}?{urlencode(query)}"


class ForgetsRecordTime(Faulty):
    """as_known_at answers with what is believed now, not what was believed then."""

    def request(self, method, path, *, body=None, headers=None):
        if path.startswith("/api/v1/facts/as-known-at?"):
            path = _with_query(path, record_time=datetime.now(UTC).isoformat())
        return super().request(method, path, body=body, headers=headers)


class PathsAlwaysNow(Faulty):
    """Path queries ignore valid_time: relations as they are now."""

    def request(self, method, path, *, body=None, headers=None):
        if path.startswith("/api/v1/graph/paths?"):
            path = _with_query(path, valid_time=None)
        return super().request(method, path, body=body, headers=headers)


@pytest.mark.django_db(transaction=True)  # C4 needs each round committed: its own record time
def test_every_kind_passes_against_the_real_service():
    specs, outcomes = run_small(InProcessTransport(), c1=6, c2=6, c3=6, c4=6, c5=8)
    assert [(o.item, o.passed, o.failure_code, o.detail) for o in outcomes] == [
        (s.key, True, "", "") for s in specs
    ]
    assert summarize(outcomes).metrics == {
        "current_value_accuracy": 1.0,
        "as_of_accuracy": 1.0,
        "authority_temporal_resolution_accuracy": 1.0,
        "bitemporal_accuracy": 1.0,
        "multihop_accuracy": 1.0,
        "stale_value_rate": 0.0,
        "current_fact_accuracy": 1.0,
    }


def test_a_stale_current_value_is_R3_and_counted_stale(db):
    specs, outcomes = run_small(StaleCurrent(InProcessTransport()), c1=4, c2=6)
    assert [o.passed for o in by_kind(outcomes, "C1")] == [True] * 4  # one version: not stale
    expected = []
    for spec in specs[4:]:
        chain = claims(spec)
        first, last = (shown(c["value"]) for c in (chain[0], chain[-1]))
        expected.append(
            (
                False,
                "R3",
                f"current {chain[0]['subject']}.{chain[0]['predicate']}: expected {last}, "
                f"got {first} (a superseded or outdated value)",
            )
        )
    assert [(o.passed, o.failure_code, o.detail) for o in by_kind(outcomes, "C2")] == expected
    metrics = summarize(outcomes).metrics
    assert (metrics["current_value_accuracy"], metrics["as_of_accuracy"]) == (0.4, 1.0)
    assert metrics["stale_value_rate"] == 6 / (4 + 6 * 5)


def test_a_service_that_lets_the_latest_claim_win_shows_the_contested_value_R3(db):
    specs, outcomes = run_small(LatestClaimWins(InProcessTransport()), c3=6)
    expected = []
    for spec in specs:
        high, low, _ = spec.data["writes"]
        expected.append(
            (
                "R3",
                f"current {high['claim']['subject']}.{high['claim']['predicate']}: expected "
                f"{shown(high['claim']['value'])}, got {shown(low['claim']['value'])} "
                "(a value not in force at that time)",
            )
        )
    assert [(o.failure_code, o.detail.split(" (and ")[0]) for o in outcomes] == expected
    assert summarize(outcomes).metrics["authority_temporal_resolution_accuracy"] < 0.99


def test_a_service_that_ignores_authority_on_write_is_W0(db):
    specs, outcomes = run_small(AuthorityBlindWrites(InProcessTransport()), c3=6)
    assert {o.failure_code for o in outcomes} == {"W0"}
    for spec, result in zip(specs, outcomes, strict=True):
        assert result.detail.startswith(
            "outcome of write 'low': the write's outcome: expected 'contested', got 'created' (and "
        )
        # The weak claim replaced the strong one: asked right then, current shows it.
        assert result.metrics["misses"][1]["q"].startswith("current ")
        assert result.metrics["misses"][1]["code"] == "R3"
        if spec.data["writes"][2]["op"] == "correct":  # the version it corrects is gone
            assert result.metrics["misses"][-1]["code"] == "W0"


def test_a_current_answer_that_hides_its_open_contest_is_A0(db):
    specs, outcomes = run_small(HidesContests(InProcessTransport()), c3=4)
    for spec, result in zip(specs, outcomes, strict=True):
        subject, predicate = (spec.data["writes"][0]["claim"][k] for k in ("subject", "predicate"))
        assert result.failure_code == "A0"
        assert re.fullmatch(
            rf"contest_flagged {re.escape(subject)}\.{predicate}: the current fact does not flag "
            r"its open contest [0-9a-f-]{36}",
            result.detail,
        ), result.detail
        assert result.metrics["correct"] == {"authority_temporal_resolution": 9}


@pytest.mark.django_db(transaction=True)
def test_as_known_at_that_answers_with_todays_belief_is_R3():
    _, outcomes = run_small(ForgetsRecordTime(InProcessTransport()), c4=6)
    assert {(o.failure_code, o.detail.split(": expected")[0].split(" ")[0]) for o in outcomes} == {
        ("R3", "as_known_at")
    }
    assert all("(a value not in force at that time)" in o.detail for o in outcomes)
    metrics = summarize(outcomes).metrics
    assert (metrics["current_value_accuracy"], metrics["as_of_accuracy"]) == (1.0, 1.0)
    assert metrics["bitemporal_accuracy"] < 0.99


def test_paths_that_ignore_valid_time_are_found_through_ended_relations(db):
    specs, outcomes = run_small(PathsAlwaysNow(InProcessTransport()), c5=8)
    for spec, result in zip(specs, outcomes, strict=True):
        if "ended" in spec.title:  # the old path at a past time is gone: not found
            assert (result.failure_code, "expected " in result.detail) == ("R2", True)
        else:  # the chain before it was complete: found anyway
            assert result.failure_code == "R3"
            assert result.detail.endswith("(through a relation not valid at that time)")


# ------------------------------------------------------------ C6, asked through recall


def asked_specs(seed: int, count: int = 72):
    return asked.generate(random.Random(f"{seed}:C:semantic_recall:generate"), {"c6": count})


def test_c6_draws_72_items_half_held_out_every_kind_in_both_vocabularies():
    specs = asked_specs(5)
    assert specs == asked_specs(5) != asked_specs(6)
    suite = suites_select(codes=["C"])[0]
    assert suite.specs(suite.generators[1], seed=5) == specs
    assert [s.key for s in specs[:2]] == ["c6_0001", "c6_0002"]
    assert Counter((s.metrics["split"], s.metrics["c6"]) for s in specs) == {
        (split, kind): 12 if kind == "chain" else 6
        for split in ("seen", "held_out")
        for kind in ("chain", "late", "corrected", "ended", "never_stated")
    }
    assert {(s.metrics["c6"], tuple(s.metrics["checks"])) for s in specs} == {
        ("chain", ("stale", "found")),
        ("late", ("stale", "found")),
        ("corrected", ("stale", "found")),
        ("ended", ("stale", "false_answer")),
        ("never_stated", ("false_answer",)),
    }
    subjects = [s.data["question"]["subject"] for s in specs]
    assert len({s.lower() for s in subjects}) == 72
    for spec in specs:
        assert json.loads(json.dumps(spec.data)) == spec.data
        assert spec.data["question"]["text"].count(spec.data["question"]["subject"]) == 1


def asked_claims(spec) -> list[dict]:
    """The item's writes of the attribute it asks, in the order it sends them."""
    predicate = spec.data["question"]["predicate"]
    return [w for w in spec.data["writes"] if w.get("claim", {}).get("predicate") == predicate]


def one_edit(old: str, new: str) -> bool:
    """One digit changed, two neighbouring digits swapped, or one word changed."""
    if len(old) == len(new):
        diffs = [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
        if len(diffs) == 1:
            return True
        if len(diffs) == 2 and diffs[1] == diffs[0] + 1:
            return old[diffs[0]] == new[diffs[1]] and old[diffs[1]] == new[diffs[0]]
    words_old, words_new = re.split(r"[ -]", old), re.split(r"[ -]", new)
    changed = [a != b for a, b in zip(words_old, words_new, strict=False)]
    return len(words_old) == len(words_new) and sum(changed) == 1


def test_c6_old_values_are_a_small_edit_of_the_current_one_and_told_as_the_kind_says():
    for spec in asked_specs(7):
        question, kind = spec.data["question"], spec.metrics["c6"]
        writes, claims = spec.data["writes"], asked_claims(spec)
        told = [w["claim"]["value"] for w in claims]
        starts = [w["claim"]["valid_from"] for w in claims]
        others = [w for w in writes if w["ref"].startswith("other:")]
        assert 1 <= len(others) <= 2
        assert all(w["round"] == 1 for w in others)
        if kind == "never_stated":
            assert (claims, question["expect"], question["stale"]) == ([], None, [])
            continue
        rounds = [w["round"] for w in writes if not w["ref"].startswith("other:")]
        assert rounds == list(range(1, len(rounds) + 1))  # one change at a time
        current = question["expect"]["value"] if question["expect"] else None
        if current is not None:
            assert all(one_edit(old, current) for old in question["stale"]), question
        if kind == "chain":
            assert told == [*question["stale"], current] and starts == sorted(starts)
            assert len(told) in (2, 3)
        elif kind == "late":  # the current value first, the older ones arrive after it
            assert told == [current, *reversed(question["stale"])]
            assert starts == sorted(starts, reverse=True)
        elif kind == "corrected":
            fix = writes[-1]
            assert (fix["op"], fix["target"], fix["body"]["value"]) == ("correct", "v2", current)
            assert told == question["stale"] and len(told) == 2
        else:  # ended: nothing is current, every value told is stale
            end = writes[-1]
            assert (end["op"], question["expect"], question["stale"]) == ("end", None, told)
            assert starts[-1] < end["body"]["valid_to"] < "2023-06-01"


def test_c6_seen_questions_use_their_predicate_name_and_held_out_ones_none():
    for name, family in asked.FAMILIES.items():
        seen = asked.names(family, asked.SEEN)
        held_out = asked.names(family, asked.HELD_OUT)
        assert len(seen) == len(held_out) == 2, name
        for predicate in seen:
            for phrasing in asked.phrasings(family, asked.SEEN, predicate):
                assert about.content_words(about.humanize(predicate)) & about.content_words(
                    phrasing.replace("{s}", "")
                ), phrasing
        held_out_words = set().union(*(about.content_words(about.humanize(n)) for n in held_out))
        for phrasing in asked.phrasings(family, asked.HELD_OUT, held_out[0]):
            assert not held_out_words & about.content_words(phrasing.replace("{s}", "")), phrasing


def hit(value, currentness="current", *, subject="Quokka retro", predicate="room"):
    return {
        "kind": "fact",
        "id": f"f-{value}-{currentness}",
        "text": f"{predicate} — {subject}: {value}",
        "score": 1.0,
        "signals": {},
        "memory_status": {"currentness": currentness},
        "fact": {"subject": {"id": "s", "name": subject}, "predicate": predicate, "value": value},
    }


def recall_answer(*evidence, route="current_fact", abstained=None, status=201):
    body = {
        "route": {"chosen": route, "rule": f"{route}.rule"},
        "abstained": not evidence if abstained is None else abstained,
        "evidence": list(evidence),
        "near_misses": [],
    }
    return answer_of(ApiResponse(status=status, body=body, headers={}, text=json.dumps(body)))


ASKED = {
    "subject": "Quokka retro",
    "predicate": "room",
    "expect": {"value": "Room 4.21", "ref": "v2"},
    "stale": ["Room 4.12"],
}
NOTHING = {**ASKED, "expect": None, "stale": ["Room 4.12", "Room 4.21"]}


@pytest.mark.parametrize(
    ("evidence", "found", "stale"),
    [
        ([hit("Room 4.21"), hit("Room 4.12", "superseded")], ("", ""), ("", "")),
        (
            [hit("Room 4.21"), hit("Room 4.12")],
            ("", ""),
            ("R3", "fact 'room — Quokka retro: Room 4.12' (current) presented as in force"),
        ),
        (
            [hit("Room 4.12"), hit("Room 4.21", "superseded")],
            (
                "R3",
                "fact 'room — Quokka retro: Room 4.12' (current) came first; the current value "
                "ranked 2",
            ),
            ("R3", "fact 'room — Quokka retro: Room 4.12' (current) presented as in force"),
        ),
        (
            [hit("Room 4.21", "contested"), hit("Room 4.12", "contested")],
            ("U0", "the current value came back marked 'contested'"),
            ("R3", "fact 'room — Quokka retro: Room 4.12' (contested) presented as in force"),
        ),
        (
            [hit("Room 4.12", "superseded"), hit("Room 4.21")],
            (
                "R3",
                "fact 'room — Quokka retro: Room 4.12' (superseded) came first; the current "
                "value ranked 2",
            ),
            ("", ""),
        ),
        (
            [hit("Room 4.21", subject="Quokka gala")],  # a look-alike's value, the same words
            (
                "R2",
                "the current value is not among the evidence (first: fact 'room — Quokka gala: "
                "Room 4.21' (current))",
            ),
            ("", ""),
        ),
        (
            [hit("Room 4.12", predicate="hall")],  # another attribute with the old value
            ("R2",),
            ("", ""),
        ),
        ([], ("R2", "the recall abstained, but the value is stored"), ("", "")),
    ],
)
def test_c6_the_current_value_must_come_first_and_no_old_one_as_current(evidence, found, stale):
    answer = recall_answer(*evidence)
    got_found = judge_recall_found(answer, ASKED)
    got_stale = judge_recall_stale(answer, ASKED)
    assert (got_found.code, got_found.detail)[: len(found)] == found[:2]
    assert (got_stale.code, got_stale.detail) == stale
    assert got_stale.stale == bool(stale[0])


def test_c6_no_fact_from_another_store_is_R1_and_a_refused_recall_R2():
    answer = recall_answer(route="multi_hop")
    assert judge_recall_found(answer, ASKED) == miss(
        F.R1, "routed to 'multi_hop' (by 'multi_hop.rule'); no fact came back"
    )
    refused = recall_answer(status=400)
    for judge in (judge_recall_found, judge_recall_stale, judge_recall_false_answer):
        verdict = judge(refused, ASKED)
        assert (verdict.code, verdict.detail.split(":")[0]) == ("R2", "the recall was refused")


@pytest.mark.parametrize(
    ("evidence", "verdict"),
    [
        ([], ("", "")),
        ([hit("Room 4.21", "superseded"), hit("Room 4.12", "superseded")], ("", "")),
        ([hit("Room 4.21")], ("", "")),  # the ended value shown current: `stale` judges it
        (
            [hit("#quokka-alerts", predicate="channel")],
            (
                "R3",
                "answered fact 'channel — Quokka retro: #quokka-alerts' (current); nothing of "
                "the kind is in force",
            ),
        ),
        ([hit("Room 4.21", "contested", subject="Quokka gala")], ("R3",)),
    ],
)
def test_c6_where_nothing_is_in_force_any_fact_given_as_in_force_is_a_false_answer(
    evidence, verdict
):
    got = judge_recall_false_answer(recall_answer(*evidence), NOTHING)
    assert (got.code, got.detail)[: len(verdict)] == verdict
    stale = judge_recall_stale(recall_answer(*evidence), NOTHING)
    assert stale.ok == (evidence != [hit("Room 4.21")])


def c6_outcome(split: str, kind: str, held: dict | None, passed: bool = True) -> ItemOutcome:
    checks = {"chain": ["stale", "found"], "ended": ["stale", "false_answer"]}[kind]
    metrics = {"kind": "C6", "c6": kind, "split": split, "checks": checks}
    if held is not None:
        metrics["held"] = held
    return ItemOutcome(
        suite="C",
        item=f"c6_{split}_{kind}",
        title="t",
        passed=passed,
        failure_code="" if passed else "R2",
        detail="",
        metrics=metrics,
        duration_ms=1.0,
        generator="semantic_recall",
    )


def test_c6_rates_per_vocabulary_and_an_item_that_could_not_ask_failed_every_check():
    outcomes = [
        c6_outcome("seen", "chain", {"stale": True, "found": True}),
        c6_outcome("seen", "chain", {"stale": True, "found": False}, passed=False),
        c6_outcome("seen", "ended", {"stale": True, "false_answer": True}),
        c6_outcome("held_out", "chain", {"stale": True, "found": False}),
        c6_outcome("held_out", "chain", None, passed=False),  # crashed: nothing held
        c6_outcome("held_out", "ended", {"stale": False, "false_answer": False}, passed=False),
        c6_outcome("held_out", "ended", {"stale": True, "false_answer": True}),
    ]
    assert recall_metrics(outcomes) == {
        "recall_stale_as_current_rate": 2 / 7,
        "recall_current_found_rate": 0.5,
        "recall_current_found_rate_held_out": 0.0,
        "recall_false_answer_rate": 0.0,
        "recall_false_answer_rate_held_out": 0.5,
    }
    assert recall_metrics([outcome(True, {"as_of": 1}, {"as_of": 1})]) == {}
    assert failing_checks("seen") == ("stale", "false_answer", "found")
    assert failing_checks("held_out") == ("stale", "false_answer")


class AskedRewriter(Faulty):
    """Rewrites the answers to the items' own questions (route auto), not to
    prepare's readiness probes (route current_fact)."""

    def rewrite(self, body: dict) -> dict:
        return body

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if path == "/api/v1/recall" and body.get("route") == "auto" and response.status == 201:
            return dataclasses.replace(response, body=self.rewrite(json.loads(response.text)))
        return response


class EveryFactCurrent(AskedRewriter):
    """Every fact offered as current, the superseded values too."""

    def rewrite(self, body):
        for e in body["evidence"]:
            e["memory_status"]["currentness"] = "current"
        return body


class OldestFirst(AskedRewriter):
    """The facts in the order they were recorded: the stale value first."""

    def rewrite(self, body):
        body["evidence"].reverse()
        return body


class NearestAsAnswer(AskedRewriter):
    """What came nearest offered as the answer, even when recall abstained."""

    def rewrite(self, body):
        if body["abstained"] and body["near_misses"]:
            body["evidence"], body["abstained"] = body["near_misses"], False
        return body


class NeverAnswers(AskedRewriter):
    def rewrite(self, body):
        body["evidence"], body["near_misses"], body["abstained"] = [], [], True
        return body


def run_asked(transport, *, seed: int = 11, count: int = 12):
    """C6's items through suite_execute against `transport`."""
    module = SimpleNamespace(
        __name__="semantic_recall", prepare=semantic.prepare_asked, check=semantic.check_asked
    )
    return run_suite_small(
        transport,
        code="C",
        module=module,
        draw=asked,
        none={"c6": 0},
        seed=seed,
        counts={"c6": count},
        successors=False,
    )


@pytest.fixture
def eager(monkeypatch):
    """Fact texts rendered and embedded in this process as each write commits (a worker's job)."""
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_c6_against_the_real_service_no_old_value_is_current_and_the_seen_ones_are_found(eager):
    specs, outcomes = run_asked(InProcessTransport())
    assert len(outcomes) == 12
    metrics = recall_metrics(outcomes)
    assert metrics["recall_stale_as_current_rate"] == 0
    assert (metrics["recall_current_found_rate"], metrics["recall_false_answer_rate"]) == (1, 0)
    assert [(o.item, o.failure_code) for o in outcomes if o.metrics["split"] == "seen"] == [
        (s.key, "") for s in specs if s.metrics["split"] == "seen"
    ]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_c6_a_superseded_value_offered_as_current_or_first_fails_R3(eager):
    _, outcomes = run_asked(EveryFactCurrent(InProcessTransport()))
    stale = [o for o in outcomes if not o.metrics["held"].get("stale", True)]
    assert stale and {o.failure_code for o in stale} == {"R3"}
    assert all(
        o.detail.startswith("stale: ") and "presented as in force" in o.detail for o in stale
    )
    assert recall_metrics(outcomes)["recall_stale_as_current_rate"] > 0
    _, outcomes = run_asked(OldestFirst(InProcessTransport()))
    seen = [
        o for o in outcomes if o.metrics["split"] == "seen" and o.metrics["c6"] != "never_stated"
    ]
    outranked = [o for o in seen if "came first; the current value ranked" in o.detail]
    assert outranked and {o.failure_code for o in outranked} == {"R3"}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_c6_abstaining_everywhere_fails_the_seen_items_R2_and_answering_everywhere_the_negatives(
    eager,
):
    _, outcomes = run_asked(NeverAnswers(InProcessTransport()))
    assert [(o.metrics["split"], o.metrics["c6"], o.failure_code) for o in outcomes] == [
        (
            o.metrics["split"],
            o.metrics["c6"],
            "R2" if o.metrics["split"] == "seen" and o.metrics["c6"] in asked.ANSWER_KINDS else "",
        )
        for o in outcomes
    ]
    metrics = recall_metrics(outcomes)
    assert (
        metrics["recall_current_found_rate"],
        metrics["recall_current_found_rate_held_out"],
    ) == (0, 0)
    _, outcomes = run_asked(NearestAsAnswer(InProcessTransport()))
    negatives = [o for o in outcomes if o.metrics["c6"] == "never_stated"]
    assert negatives and {o.failure_code for o in negatives} == {"R3"}
    assert recall_metrics(outcomes)["recall_false_answer_rate"] > 0


# --------------------------------------------------------------------------- the command


def battery(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", *args, stdout=out, no_color=True)
    return out.getvalue()


SMALL = {"c1": 5, "c2": 5, "c3": 5, "c4": 5, "c5": 6}


@pytest.mark.django_db(transaction=True)
def test_battery_run_of_every_suite_still_works(monkeypatch, tmp_path):
    monkeypatch.setattr(draw, "COUNTS", SMALL)
    # C6: two old values asked of in each vocabulary, one seen and one held-out
    # never stated (its gated metrics).
    monkeypatch.setattr(asked, "COUNTS", {"c6": 6})
    monkeypatch.setattr(working_state_draw, "COUNTS", {"a1": 2, "a2": 2, "a3": 2, "a4": 2})
    monkeypatch.setattr(prospective_draw, "COUNTS", dict.fromkeys(prospective_draw.COUNTS, 2))
    monkeypatch.setattr(procedural_draw, "COUNTS", dict.fromkeys(procedural_draw.COUNTS, 1))
    # No B5 here: the service answers most near-domain never-happened questions
    # (a false memory, measured in test_suite_episodic), which would cost the
    # score this run pins at 100.
    monkeypatch.setattr(episodic_draw, "COUNTS", {"b1": 4, "b2": 1, "b3": 1, "b4": 2, "b5": 0})
    monkeypatch.setattr(episodic_draw, "NOISE", 8)
    monkeypatch.setattr(forgetting_draw, "ITEMS_PER_MODE", 1)
    # One item of each F3-F5 kind, all in documented phrasings.
    monkeypatch.setattr(consolidation_draw, "COUNTS", dict.fromkeys(consolidation_draw.COUNTS, 1))
    # F6: one procedure to learn, and two that must not teach (one held out: a gated
    # metric needs a documented item, or its gate fails closed).
    monkeypatch.setattr(skill_draw, "LEARNABLE", 1)
    monkeypatch.setattr(skill_draw, "REFUSED_WAYS", ("unverified", "failed"))
    # The run's plumbing, not G's measure (test_suite_metamemory has that): a
    # stable and a stale value, one current-fact question routed, and one block
    # of G3 (two to answer, one never stated, one look-alike: its gated metrics).
    monkeypatch.setattr(metamemory_draw, "COUNTS", {"g1": 2, "g2": 1, "g3": 4})
    # Suite D's skills run in the sandbox, suite B's episodes are embedded: here in
    # this process, as each request commits.
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    # Suite H judges real agents, not the battery's: one worked and handed over.
    live_use()
    battery("run", "--report", str(tmp_path), "--seed", "8")
    run = BatteryRun.objects.get()
    assert (run.status, run.suites, run.score, run.score_of_run, run.missing_suites) == (
        "passed",
        ["A", "B", "C", "D", "E", "F", "G", "H", "L"],
        100.0,
        100.0,
        {},
    )
    assert {code: s["items"] for code, s in run.suite_scores.items()} == {
        "A": 8,
        "B": 8,
        "C": 26 + 6,
        "D": 7,
        "E": 16,
        "F": 12,
        "G": 7,
        "H": 2,
        "L": 5,
    }


@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_C_exits_non_zero_when_a_gate_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(draw, "COUNTS", SMALL)
    # C6 small too, its fact texts rendered in this process on commit (not waited for).
    monkeypatch.setattr(asked, "COUNTS", {"c6": 6})
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    monkeypatch.setattr(
        "battery.services.transport_open",
        lambda base_url, via=None: StaleCurrent(InProcessTransport()),
    )
    with pytest.raises(CommandError) as caught:
        battery("run", "--suite", "C", "--report", str(tmp_path), "--seed", "8")
    run = BatteryRun.objects.get()
    assert caught.value.returncode == 1
    assert str(caught.value).startswith(f"battery run {run.pk} failed its gates: C pass rate")
    failed = [g["name"] for g in run.gates if not g["passed"] and not g["fail_closed"]]
    assert "C current_value_accuracy >= 0.99" in failed
    assert "C stale_value_rate <= 0.005" in failed
    assert run.status == "failed"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_C_passes_its_gates_against_the_real_service(monkeypatch, tmp_path):
    # C6 waits for the fact texts a worker renders: here in this process, on commit.
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    output = battery("run", "--suite", "C", "--seed", "7", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    # The only misses: C6 questions in the held-out vocabulary answered with
    # another attribute where nothing is in force (at this seed, "Which patch
    # level is the Puffin relay at?" with its rack position: WordNet has
    # "patch ~ spot"). They fail their items; their rate is reported, not gated.
    failed = list(run.items.exclude(failure_code="").values_list("item", "failure_code"))
    assert {(item[:3], code) for item, code in failed} <= {("c6_", "R3")}
    suite = run.suite_scores["C"]
    assert (suite["items"], suite["passed"], suite["gate_passed"]) == (612, 612 - len(failed), True)
    assert run.status == "incomplete" and run.suites == ["C"]
    reported = [
        suite["metrics"].pop(f"recall_{m}_held_out")
        for m in ("current_found_rate", "false_answer_rate")
    ]
    assert 0 < reported[0] < 1 and reported[1] == len(failed) / 12
    assert suite["metrics"] == {
        "current_value_accuracy": 1.0,
        "as_of_accuracy": 1.0,
        "authority_temporal_resolution_accuracy": 1.0,
        "bitemporal_accuracy": 1.0,
        "multihop_accuracy": 1.0,
        "stale_value_rate": 0.0,
        "current_fact_accuracy": 1.0,
        "recall_stale_as_current_rate": 0.0,
        "recall_current_found_rate": 1.0,
        "recall_false_answer_rate": 0.0,
    }
    assert [(g["name"], g["passed"]) for g in run.gates if g["kind"] != "cap"] == [
        ("C pass rate >= 99%", True),
        ("C current_value_accuracy >= 0.99", True),
        ("C as_of_accuracy >= 0.99", True),
        ("C authority_temporal_resolution_accuracy >= 0.99", True),
        ("C bitemporal_accuracy >= 0.99", True),
        ("C multihop_accuracy >= 0.99", True),
        ("C stale_value_rate <= 0.005", True),
        ("C recall_stale_as_current_rate <= 0", True),
        ("C recall_current_found_rate >= 0.95", True),
        ("C recall_false_answer_rate <= 0", True),
    ]
    assert Counter(run.items.values_list("failure_code", flat=True)) == {"": 612 - len(failed)} | (
        {"R3": len(failed)} if failed else {}
    )
    # No gate failed: FAIL is printed only for those items.
    assert all(line.lstrip().startswith("C.c6_") for line in output.splitlines() if "FAIL" in line)
    report = json.loads((tmp_path / "report.json").read_text())
    assert Counter(i["metrics"]["kind"] for i in report["items"]) == {
        "C1": 200,
        "C2": 120,
        "C3": 80,
        "C4": 80,
        "C5": 60,
        "C6": 72,
    }
