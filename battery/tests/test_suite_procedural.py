"""Suite D: the draw is deterministic, its house rules are exact and the code the
reference agent writes computes them; the grading classifies and counts
exactly; the gates sit where the issue puts them; and items pointed at a
service with one fault fail with the right code.

Runs against the real service drive the real sandbox (bubblewrap). Celery
runs eagerly there (`eager`): each validation and execution runs in this
process as soon as its request commits (transaction=True), as a worker would
run it from the queue. The command's run is checked once with a real worker.
"""

from __future__ import annotations

import dataclasses
import io
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from battery.models import BatteryRun
from battery.registry import ItemOutcome, designed_suites, suites_select
from battery.scoring import score_run, suite_result
from battery.suites import procedural
from battery.suites.procedural import draw
from battery.suites.procedural.judge import (
    Run,
    judge_premature,
    judge_probe,
    judge_undeclared,
    judge_use,
    summarize,
)
from battery.tests.helpers import Faulty, run_suite_small
from battery.transport import ApiResponse, InProcessTransport
from skills import conditions
from skills.services.definitions import schema_errors

KINDS = ("d1", "d2", "d3", "d4", "d5", "d6", "d7")
NONE = dict.fromkeys(KINDS, 0)
V1, V2, OTHER = "v1-id", "v2-id", "other-id"


def specs_for(seed: int, **counts: int):
    suite = suites_select(codes=["D"])[0]
    if counts:
        return draw.generate(random.Random(f"{seed}:D:procedural:generate"), {**NONE, **counts})
    return suite.specs(suite.generators[0], seed=seed)


class _Tools:
    """The sandbox's tools object, in this process: only sha256 is ever declared."""

    def sha256(self, args):
        import hashlib

        return hashlib.sha256(args["text"].encode()).hexdigest()


def run_code(source: str, entry: str, *args):
    scope: dict[str, Any] = {}
    exec(compile(source, "<skill>", "exec"), scope)
    return scope[entry](*args)


# ----------------------------------------------------------------------------- the draw


def test_suite_D_is_registered_with_its_design_weight_and_gates():
    suite = suites_select(codes=["D"])[0]
    assert (suite.name, suite.weight, suite.gate) == ("Procedural memory", 20, 0.95)
    assert [gate.name for gate in suite.metric_gates] == [
        "held_out_execution_success >= 0.95",
        "misapplied_skill_rate <= 0.01",
        "obsolete_execution_count <= 0",
        "undeclared_refusal_rate >= 0.66",
    ]
    assert (suite.items, [g.key for g in suite.generators]) == ([], ["procedural"])
    assert suite.item_count(seed=0) == 104


def test_the_same_seed_draws_the_same_items_and_another_seed_others():
    first = specs_for(21)
    assert specs_for(21) == first
    other = specs_for(22)
    assert [s.key for s in other] == [s.key for s in first]
    assert [s.data for s in other] != [s.data for s in first]


@pytest.mark.parametrize("seed", [0, 21])
def test_a_run_draws_104_items_of_seven_kinds_and_counts_what_it_plans(seed):
    specs = specs_for(seed)
    assert Counter(s.metrics["kind"] for s in specs) == {
        "D1": 16,
        "D2": 12,
        "D3": 16,
        "D4": 16,
        "D5": 16,
        "D6": 12,
        "D7": 16,
    }
    planned = Counter()
    for spec in specs:
        assert spec.metrics["planned"] == Counter(c["metric"] for c in spec.data["checks"])
        planned.update(spec.metrics["planned"])
    assert planned == {
        "held_out": 16 * 2 + 16 * 3 + 16 * 2 + 12,  # D1, D3, D4, D6
        "learned": 12,
        "negative_transfer": 16 * 2,
        "control": 16 + 16,  # D5, D7
        "lifecycle": 16 * 2 + 12 + 16 * 4 + 12 * 6,  # D1, D2, D3 (+ transfer), D6
        "undeclared": 16 * 3,
        "undeclared_held_out": 16 * 3,
    }
    houses = [s.data["rule"]["house"] for s in specs]
    assert len(set(houses)) == 104
    assert len({s.data["rule"]["family"] for s in specs}) == 4


def test_the_agents_code_computes_each_house_rule_and_its_validator_accepts_it():
    for spec in specs_for(3):
        data = spec.data
        for name, rule in (("definition", data["rule"]), ("definition_v2", data.get("revised"))):
            if name not in data:
                continue
            body = data[name]
            cases = [c["params"] for c in body["examples"] + body["holdout"]]
            tasks = data["uses"] if name == "definition_v2" or "revised" not in data else []
            for params in cases + [t["params"] for t in tasks] + data.get("trials", []):
                result = run_code(body["procedure"], "run", params, _Tools())
                assert result == draw.expected(rule, params), (spec.key, params)
                assert run_code(body["validator"], "validate", params, result, _Tools()) is True
                assert conditions.check_trigger(body["trigger"])
            # The validator is a check, not a rubber stamp.
            wrong = draw.expected(rule, cases[0])[:-1] + "!"
            assert run_code(body["validator"], "validate", cases[0], wrong, _Tools()) is False


def test_held_out_values_are_none_of_the_examples_trials_or_hold_out_cases():
    for spec in specs_for(4):
        data = spec.data
        seen = [c["params"] for c in data["definition"]["examples"] + data["definition"]["holdout"]]
        seen += data.get("trials", [])
        if "definition_v2" in data:
            v2 = data["definition_v2"]
            seen += [c["params"] for c in v2["examples"] + v2["holdout"]]
        for task in data["uses"] + data["probes"]:
            assert task["params"] not in seen, spec.key


def test_each_task_triggers_its_own_skill_and_no_other_house():
    specs = specs_for(5)
    triggers = {s.key: s.data["definition"]["trigger"] for s in specs}
    for spec in specs:
        for task in spec.data["uses"] + spec.data["probes"]:
            matched = [
                k for k, t in triggers.items() if conditions.trigger_match(t, task["task"]).matched
            ]
            assert matched == [spec.key], task["task"]


def test_d4_words_the_task_otherwise_than_the_canonical_phrase():
    for spec in specs_for(6, d4=16):
        family = spec.data["rule"]["family"]
        for use in spec.data["uses"]:
            canonical = draw.task_text(draw.CANONICAL[family], spec.data["rule"], use["params"])
            assert use["task"] != canonical


def test_d5_probes_are_contraindicated_and_its_control_is_not():
    for spec in specs_for(7, d5=16):
        contraindications = spec.data["definition"]["contraindications"]
        kinds = []
        for probe in spec.data["probes"]:
            applying = conditions.applying_contraindications(
                contraindications, probe["task"], probe["context"]
            )
            assert len(applying) == 1, probe
            kinds.append("keywords" if "keywords" in applying[0] else "condition")
        assert kinds == ["condition", "keywords"]
        (control,) = spec.data["uses"]
        assert not conditions.applying_contraindications(
            contraindications, control["task"], control["context"]
        )


def test_d2_fails_the_textbook_way_and_d6_changes_every_value_it_asks_for():
    for spec in specs_for(8, d2=12, d6=12):
        (use,) = spec.data["uses"]
        if spec.metrics["kind"] == "D2":
            assert use["naive"] != use["expected"]
            failure = spec.data["events"][0]["event"]["payload"]
            assert failure["result"] == draw.naive(spec.data["rule"], failure["params"])
            assert spec.data["provenance"] == ["failure", "evidence"]
        else:
            assert use["stale"] != use["expected"]
            assert use["expected"] == draw.expected(spec.data["revised"], use["params"])
            assert spec.data["promotion"] == "runs" and len(spec.data["trials"]) == 3


def test_d7_is_drawn_after_the_other_kinds_which_stay_as_they_were():
    without = draw.generate(random.Random("13:D:procedural:generate"), {"d7": 0})
    assert specs_for(13)[: len(without)] == without
    assert [s.key for s in specs_for(13)[len(without) :]] == [f"d7_{n:04d}" for n in range(1, 17)]


def test_d7_probes_are_uses_no_contraindication_names_and_its_control_fits():
    for spec in specs_for(14, d7=16):
        body = spec.data["definition"]
        schema, (precondition,) = body["parameter_schema"], body["preconditions"]
        assert "contraindications" not in body
        probes = spec.data["probes"]
        assert [(p["kind"], p["vocabulary"]) for p in probes] == [
            (kind, vocabulary)
            for kind in draw.UNDECLARED_KINDS
            for vocabulary in (draw.SEEN, draw.HELD_OUT)
        ]
        assert spec.metrics["undeclared_asked"] == dict.fromkeys(draw.UNDECLARED_KINDS, 2)
        (control,) = spec.data["uses"]
        for task in [control, *probes]:
            unmet = conditions.failed_preconditions([precondition], task["context"])
            assert bool(unmet) == (task.get("kind") == "precondition_unmet"), task
            errors = schema_errors(schema, task["params"])
            assert bool(errors) == (task.get("kind") == "wrong_domain"), task
        # one context lacks the precondition's path, the other contradicts it
        actual = [
            conditions.failed_preconditions([precondition], p["context"])[0]["actual"]
            for p in probes[2:4]
        ]
        assert sorted(a is None for a in actual) == [False, True]
        family = spec.data["rule"]["family"]
        for probe in probes[4:]:
            assert probe["task"] in [
                t.format(house=spec.data["rule"]["house"])
                for t in draw.MISUSE[probe["vocabulary"]][family]
            ]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def test_d7_held_out_phrasings_use_no_word_of_the_matching_code():
    code = set()
    for name in ("conditions.py", "selectors.py"):
        code |= _words((Path(conditions.__file__).parent / name).read_text())
    placeholders = {"house", "noun", "value"}
    trigger_words = {w for words in draw.SYNONYMS.values() for s in words for w in _words(s)}
    held_out = list(draw.LOOKALIKE[draw.HELD_OUT])
    held_out += [t for ts in draw.MISUSE[draw.HELD_OUT].values() for t in ts]
    for template in held_out:
        assert not (_words(template) - placeholders - trigger_words) & code, template
    # the check can fail: the seen phrasings share words with it
    seen = list(draw.LOOKALIKE[draw.SEEN]) + [
        t for ts in draw.MISUSE[draw.SEEN].values() for t in ts
    ]
    assert all((_words(t) - placeholders - trigger_words) & code for t in seen)


# ---------------------------------------------------------------------------- the judge


def answer(status: int, body: Any) -> ApiResponse:
    return ApiResponse(status=status, body=body, headers={}, text=str(body))


def candidate(version_id: str, name: str = "own", reasons=()) -> dict:
    return {"version_id": version_id, "skill_name": name, "reasons": list(reasons)}


def matched(applicable=(), near=()) -> ApiResponse:
    return answer(
        200,
        {
            "applicable": list(applicable),
            "no_applicable_skill": not applicable,
            "near_misses": list(near),
        },
    )


def finished(result, **changes) -> dict:
    return {
        "status": "finished",
        "succeeded": True,
        "validator_passed": True,
        "result": result,
        **changes,
    }


USE = {"expected": "ABC-1", "stale": "ABC-0", "naive": "abc"}


@pytest.mark.parametrize(
    "run, verdict",
    [
        (Run(match=answer(400, {})), ("S0", False)),
        (
            Run(match=matched(near=[candidate(V2, reasons=[{"type": "below_similarity"}])])),
            ("S0", False),
        ),
        (Run(match=matched([candidate(V1)])), ("R3", False)),
        (Run(match=matched([candidate(OTHER, "x"), candidate(V2)])), ("R3", True)),
        (Run(match=matched([candidate(OTHER, "x")])), ("S2", True)),
        (Run(match=matched([candidate(V2)]), requested=answer(409, {})), ("S1", False)),
        (
            Run(
                match=matched([candidate(V2)]),
                requested=answer(202, {"id": "e"}),
                execution={"status": "queued"},
            ),
            ("S1", False),
        ),
        (
            Run(
                match=matched([candidate(V2)]),
                requested=answer(202, {"id": "e"}),
                execution=finished("ABC-1", validator_passed=False),
            ),
            ("S1", False),
        ),
        (
            Run(
                match=matched([candidate(V2)]),
                requested=answer(202, {"id": "e"}),
                execution=finished("ABC-0"),
            ),
            ("R3", False),
        ),
        (
            Run(
                match=matched([candidate(V2)]),
                requested=answer(202, {"id": "e"}),
                execution=finished("abc"),
            ),
            ("S1", False),
        ),
        (
            Run(
                match=matched([candidate(V2)]),
                requested=answer(200, {"id": "e"}),
                execution=finished("ABC-1"),
            ),
            ("", False),
        ),
    ],
)
def test_a_use_is_classified_in_order(run, verdict):
    decision = judge_use(run, USE, intended=V2, superseded=V1)
    assert (decision.verdict.code, decision.misapplied) == verdict


def test_a_probe_is_safe_only_when_nothing_applies_and_says_why():
    contraindicated = [{"type": "contraindicated", "reason": "legacy"}]
    cases = [
        (matched([candidate(V1)]), ("S2", True)),
        (matched([candidate(OTHER, "x")]), ("S2", True)),
        (matched(near=[candidate(V1, reasons=[{"type": "below_similarity"}])]), ("A0", False)),
        (matched(), ("R2", False)),
        (matched(near=[candidate(V1, reasons=contraindicated)]), ("", False)),
    ]
    for match, verdict in cases:
        decision = judge_probe(Run(match=match), version_id=V1)
        assert (decision.verdict.code, decision.misapplied) == verdict


WRONG = {"kind": "wrong_domain"}
UNMET = {"kind": "precondition_unmet"}
MISUSE = {"kind": "unsaid_misuse"}
INVALID = answer(422, {"error": {"code": "invalid_params"}})


@pytest.mark.parametrize(
    "probe, run, verdict",
    [
        (WRONG, Run(match=answer(500, None)), ("S0", False)),
        (WRONG, Run(match=matched()), ("", False)),
        (WRONG, Run(match=matched([candidate(V1)]), requested=INVALID), ("", False)),
        (WRONG, Run(match=matched([candidate(V1)])), ("S1", False)),
        (
            WRONG,
            Run(
                match=matched([candidate(V1)]),
                requested=answer(409, {"error": {"code": "not_validated"}}),
            ),
            ("S1", False),
        ),
        (
            WRONG,
            Run(
                match=matched([candidate(V1)]),
                requested=answer(202, {"id": "e"}),
                execution=finished("ABC-1"),
            ),
            ("S2", True),
        ),
        (
            WRONG,
            Run(
                match=matched([candidate(V1)]),
                requested=answer(202, {"id": "e"}),
                execution={"status": "finished", "succeeded": False, "outcome": "error"},
            ),
            ("S2", True),
        ),
        (WRONG, Run(match=matched([candidate(OTHER, "x")])), ("S2", True)),
        (UNMET, Run(match=matched([candidate(V1)])), ("S2", True)),
        (UNMET, Run(match=matched()), ("R2", False)),
        (
            UNMET,
            Run(match=matched(near=[candidate(V1, reasons=[{"type": "below_similarity"}])])),
            ("A0", False),
        ),
        (
            UNMET,
            Run(match=matched(near=[candidate(V1, reasons=[{"type": "precondition_failed"}])])),
            ("", False),
        ),
        (MISUSE, Run(match=matched([candidate(V1)])), ("S2", True)),
        (MISUSE, Run(match=matched([candidate(OTHER, "x")])), ("S2", True)),
        (MISUSE, Run(match=matched()), ("", False)),
    ],
)
def test_an_undeclared_probe_passes_only_when_the_service_refuses_it(probe, run, verdict):
    decision = judge_undeclared(run, probe, version_id=V1)
    assert (decision.verdict.code, decision.misapplied) == verdict


def test_a_premature_promotion_may_reach_experimental_never_validated():
    assert judge_premature(answer(409, {"error": {"code": "evidence_missing"}})).ok
    assert judge_premature(answer(200, {"status": "experimental"})).ok
    assert judge_premature(answer(200, {"status": "validated"})).code == "W1"
    assert judge_premature(answer(500, None)).code == "W0"


def outcome(kind: str, passed: bool = True, **metrics) -> ItemOutcome:
    return ItemOutcome(
        suite="D",
        item=f"{kind.lower()}_x",
        title="t",
        passed=passed,
        failure_code="" if passed else "S0",
        detail="",
        metrics={"kind": kind, **metrics},
        duration_ms=1.0,
    )


def test_the_summary_counts_checks_decisions_probes_and_obsolete_runs():
    outcomes = [
        outcome(
            "D1",
            planned={"held_out": 2, "lifecycle": 2},
            correct={"held_out": 2, "lifecycle": 2},
            decisions=2,
        ),
        outcome(
            "D3", False, planned={"held_out": 3}, correct={"held_out": 1}, decisions=3, misapplied=1
        ),
        outcome(
            "D5",
            planned={"negative_transfer": 2, "control": 1},
            correct={"negative_transfer": 2, "control": 1},
            decisions=3,
            probes=2,
            safe_probes=2,
        ),
        outcome("D5", False, planned={"negative_transfer": 2, "control": 1}, probes=2),  # crashed
        outcome("D6", False, planned={"held_out": 1}, correct={}, decisions=1, obsolete=2),
        outcome("D2", planned={"learned": 1}, correct={"learned": 1}, decisions=1),
    ]
    summary = summarize(outcomes)
    assert summary.score == pytest.approx(100 * 3 / 6)
    assert summary.metrics == {
        "held_out_execution_success": 3 / 6,
        "procedure_execution": 3 / 6,
        "misapplied_skill_rate": 1 / 10,
        "obsolete_execution_count": 2.0,
        "negative_transfer_safety": 2 / 4,
        "failure_learning": 1.0,
        "lifecycle_accuracy": 1.0,
    }


def test_the_summary_rates_undeclared_refusals_per_vocabulary_and_kind():
    asked = dict.fromkeys(draw.UNDECLARED_KINDS, 2)
    outcomes = [
        outcome(
            "D7",
            planned={"undeclared": 3, "undeclared_held_out": 3, "control": 1},
            correct={"undeclared": 2, "undeclared_held_out": 1, "control": 1},
            undeclared_asked=asked,
            undeclared_refused={"wrong_domain": 2, "precondition_unmet": 1, "unsaid_misuse": 0},
        ),
        outcome(  # crashed: what it planned counts, none refused
            "D7",
            False,
            planned={"undeclared": 3, "undeclared_held_out": 3, "control": 1},
            undeclared_asked=asked,
        ),
    ]
    metrics = summarize(outcomes).metrics
    assert {k: v for k, v in metrics.items() if k.startswith("undeclared")} == {
        "undeclared_refusal_rate": 2 / 6,
        "undeclared_refusal_rate_held_out": 1 / 6,
        "undeclared_refusal_rate_wrong_domain": 2 / 4,
        "undeclared_refusal_rate_precondition_unmet": 1 / 4,
        "undeclared_refusal_rate_unsaid_misuse": 0.0,
    }


def test_the_gates_hold_at_95_percent_one_percent_no_obsolete_run_and_66_percent_refused():
    suite = suites_select(codes=["D"])[0]

    def gates(held_out: int, misapplied: int, obsolete: int, refused: int = 66) -> dict[str, bool]:
        outcomes = [
            outcome(
                "D3",
                planned={"held_out": 100},
                correct={"held_out": held_out},
                decisions=100,
                misapplied=misapplied,
            ),
            outcome("D6", planned={}, correct={}, obsolete=obsolete),
            outcome(
                "D7",
                planned={"undeclared": 100, "undeclared_held_out": 100},
                correct={"undeclared": refused, "undeclared_held_out": 0},
            ),
        ]
        card = score_run([suite_result(suite=suite, outcomes=outcomes)], designed=designed_suites())
        return {g.name: g.passed for g in card.gates if g.kind == "metric"}

    names = [
        "D held_out_execution_success >= 0.95",
        "D misapplied_skill_rate <= 0.01",
        "D obsolete_execution_count <= 0",
        "D undeclared_refusal_rate >= 0.66",
    ]
    assert gates(95, 1, 0) == dict.fromkeys(names, True)  # held out: reported, not gated
    assert gates(94, 1, 0)[names[0]] is False
    assert gates(95, 2, 0)[names[1]] is False
    assert gates(95, 1, 1)[names[2]] is False
    assert gates(95, 1, 0, refused=65)[names[3]] is False


# ------------------------------------------------------------- against the real service


@pytest.fixture
def eager(monkeypatch):
    """Celery tasks run in this process when their request commits."""
    from piper.celery import app

    monkeypatch.setattr(app.conf, "task_always_eager", True)
    monkeypatch.setattr(procedural, "STALL_SECONDS", 2.0)
    monkeypatch.setattr(procedural, "POLL_SECONDS", 0.01)


def run_small(transport, *, seed: int = 11, **counts: int) -> tuple[list, list[ItemOutcome]]:
    """Suite D's items for `counts`, through suite_execute against `transport`."""
    return run_suite_small(
        transport,
        code="D",
        module=procedural,
        draw=draw,
        none=NONE,
        seed=seed,
        counts=counts,
        successors=False,
    )


class IgnoresContraindications(Faulty):
    """match offers contraindicated versions as applicable."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if path == "/api/v1/skills/match" and response.status == 200:
            only = [
                c
                for c in response.body["near_misses"]
                if {r["type"] for r in c["reasons"]} == {"contraindicated"}
            ]
            applicable = response.body["applicable"] + [{**c, "reasons": []} for c in only]
            near = [c for c in response.body["near_misses"] if c not in only]
            body = {**response.body, "applicable": applicable, "near_misses": near}
            return dataclasses.replace(response, body=body)
        return response


class OffersFirstVersions(Faulty):
    """match offers each skill's first version, whatever superseded it; with
    `runs_anything`, execute runs versions that are not validated too."""

    def __init__(self, inner, *, runs_anything: bool = False):
        super().__init__(inner)
        self.first: dict[str, str] = {}
        self.runs_anything = runs_anything

    def request(self, method, path, *, body=None, headers=None):
        if self.runs_anything and path.endswith("/execute") and isinstance(body, dict):
            body = {**body, "allow_unvalidated": True}
        response = super().request(method, path, body=body, headers=headers)
        if method == "POST" and path == "/api/v1/skills" and response.status == 201:
            self.first[response.body["id"]] = response.body["versions"][-1]["id"]
        if path == "/api/v1/skills/match" and response.status == 200:
            applicable = [
                {**c, "version_id": self.first.get(c["skill_id"], c["version_id"])}
                for c in response.body["applicable"]
            ]
            return dataclasses.replace(response, body={**response.body, "applicable": applicable})
        return response


class DropsProvenance(Faulty):
    """Skills are stored without the events they were distilled from."""

    def request(self, method, path, *, body=None, headers=None):
        if method == "POST" and path == "/api/v1/skills" and isinstance(body, dict):
            body = {k: v for k, v in body.items() if k != "provenance"}
        return super().request(method, path, body=body, headers=headers)


class RunsAnyParams(Faulty):
    """execute takes params the schema refuses, and runs the skill on them
    (answered as finished within the request, as with ?wait)."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if path.endswith("/execute") and response.error_code() == "invalid_params":
            ran = {"id": "ran-anyway", **finished("HOUSE-0")}
            return dataclasses.replace(response, status=200, body=ran, text=str(ran))
        return response


class IgnoresPreconditions(Faulty):
    """match offers versions whose only fault is a precondition that does not hold."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if path == "/api/v1/skills/match" and response.status == 200:
            only = [
                c
                for c in response.body["near_misses"]
                if {r["type"] for r in c["reasons"]} == {"precondition_failed"}
            ]
            applicable = response.body["applicable"] + [{**c, "reasons": []} for c in only]
            near = [c for c in response.body["near_misses"] if c not in only]
            body = {**response.body, "applicable": applicable, "near_misses": near}
            return dataclasses.replace(response, body=body)
        return response


class RefusesEverything(Faulty):
    """match never offers anything."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if path == "/api/v1/skills/match" and response.status == 200:
            body = {**response.body, "applicable": [], "no_applicable_skill": True}
            return dataclasses.replace(response, body=body)
        return response


@pytest.mark.django_db(transaction=True)
def test_every_kind_passes_against_the_real_service(eager):
    specs, outcomes = run_small(InProcessTransport(), d1=2, d2=2, d3=2, d4=2, d5=2, d6=2, d7=2)
    assert [(o.item, o.passed, o.failure_code, o.detail) for o in outcomes] == [
        (s.key, True, "", "") for s in specs
    ]
    # D7: the service refuses params outside the schema and unmet preconditions;
    # it offers the skill where its trigger's words name an object of another kind.
    d7 = [o for o in outcomes if o.metrics["kind"] == "D7"]
    for result in d7:
        assert result.metrics["undeclared_refused"] == {
            "wrong_domain": 2,
            "precondition_unmet": 2,
            "unsaid_misuse": 0,
        }
        assert [(m["code"], m["q"].split(" ")[0]) for m in result.metrics["undeclared_misses"]] == [
            ("S2", "unsaid_misuse"),
            ("S2", "unsaid_misuse"),
        ]
        assert (
            "match offered the skill where it does not fit (similarity 0."
            in (result.metrics["undeclared_misses"][0]["detail"])
        )
    assert summarize(outcomes).metrics == {
        "held_out_execution_success": 1.0,
        "procedure_execution": 1.0,
        "misapplied_skill_rate": 0.0,
        "obsolete_execution_count": 0.0,
        "negative_transfer_safety": 1.0,
        "failure_learning": 1.0,
        "lifecycle_accuracy": 1.0,
        "undeclared_refusal_rate": 4 / 6,
        "undeclared_refusal_rate_held_out": 4 / 6,
        "undeclared_refusal_rate_wrong_domain": 1.0,
        "undeclared_refusal_rate_precondition_unmet": 1.0,
        "undeclared_refusal_rate_unsaid_misuse": 0.0,
    }
    # D7's probes are not decisions of misapplied_skill_rate; its control is
    assert sum(o.metrics["decisions"] for o in outcomes) == (
        2 * 2 + 2 + 2 * 3 + 2 * 2 + 2 * 3 + 2 + 2
    )


@pytest.mark.django_db(transaction=True)
def test_a_service_that_runs_params_outside_the_schema_or_ignores_preconditions_is_S2(eager):
    _, outcomes = run_small(RunsAnyParams(InProcessTransport()), seed=15, d7=2)
    for result in outcomes:
        assert result.passed  # measured by the rate, not by the item
        assert result.metrics["undeclared_refused"]["wrong_domain"] == 0
        wrong = [m for m in result.metrics["undeclared_misses"] if "wrong_domain" in m["q"]]
        assert [m["code"] for m in wrong] == ["S2", "S2"]
        assert wrong[0]["detail"] == (
            'execute accepted params outside the skill\'s schema: it returned "HOUSE-0"'
        )
    assert summarize(outcomes).metrics["undeclared_refusal_rate_wrong_domain"] == 0.0
    _, outcomes = run_small(IgnoresPreconditions(InProcessTransport()), seed=16, d7=2)
    for result in outcomes:
        assert result.metrics["undeclared_refused"]["precondition_unmet"] == 0
        unmet = [m for m in result.metrics["undeclared_misses"] if "precondition" in m["q"]]
        assert [m["code"] for m in unmet] == ["S2", "S2"]
        assert unmet[0]["detail"].startswith("match offered the skill where it does not fit")
    metrics = summarize(outcomes).metrics
    assert metrics["undeclared_refusal_rate_precondition_unmet"] == 0.0
    assert metrics["undeclared_refusal_rate"] == 1 / 3  # below the gate


@pytest.mark.django_db(transaction=True)
def test_refusing_everything_fails_d7_on_its_control(eager):
    _, outcomes = run_small(RefusesEverything(InProcessTransport()), seed=17, d7=2)
    for result in outcomes:
        assert (result.passed, result.failure_code) == (False, "S0")
        assert result.detail.startswith("use 1 (")
        assert result.metrics["undeclared_refused"] == dict.fromkeys(draw.UNDECLARED_KINDS, 2)


@pytest.mark.django_db(transaction=True)
def test_a_match_that_ignores_contraindications_is_S2_misapplied(eager):
    specs, outcomes = run_small(IgnoresContraindications(InProcessTransport()), d3=1, d5=3)
    d3, *d5 = outcomes
    assert d3.passed
    for result in d5:
        assert (
            result.failure_code,
            result.metrics["misapplied"],
            result.metrics["safe_probes"],
        ) == ("S2", 2, 0)
        assert result.detail.startswith("probe 1 (context ")
        assert (
            "match offered the contraindicated skill, which the agent would execute"
            in result.detail
        )
    metrics = summarize(outcomes).metrics
    assert metrics["negative_transfer_safety"] == 0.0
    assert metrics["misapplied_skill_rate"] == 6 / (3 + 3 * 3)


@pytest.mark.django_db(transaction=True)
def test_a_match_that_offers_the_superseded_version_is_R3_and_its_runs_obsolete(eager):
    _, outcomes = run_small(OffersFirstVersions(InProcessTransport()), d6=2)
    for result in outcomes:  # the service refuses to run v1: stale, but not run
        assert result.failure_code == "R3"
        assert result.detail.startswith("use 1 (")
        assert "match offered the superseded version first: the old rule" in result.detail
        assert result.metrics["obsolete"] == 0
    _, outcomes = run_small(
        OffersFirstVersions(InProcessTransport(), runs_anything=True), seed=12, d6=2
    )
    for result in outcomes:
        assert [m["code"] for m in result.metrics["misses"]] == ["R3", "R3", "R3"]
        assert [m["q"] for m in result.metrics["misses"][:2]] == [
            "stale handle refused",
            "no obsolete execution",
        ]
        assert result.metrics["obsolete"] == 2  # the stale handle and the stale match
    assert summarize(outcomes).metrics["obsolete_execution_count"] == 4.0


@pytest.mark.django_db(transaction=True)
def test_skills_stored_without_their_provenance_are_W0(eager):
    _, outcomes = run_small(DropsProvenance(InProcessTransport()), d2=2)
    for result in outcomes:
        assert result.failure_code == "W0"
        assert result.detail.startswith("provenance: provenance events: expected [")
        assert result.metrics["correct"] == {"learned": 1}


# --------------------------------------------------------------------------- the command


@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_D_passes_its_gates_with_a_real_worker(
    celery_worker_process, monkeypatch, tmp_path
):
    monkeypatch.setattr(draw, "COUNTS", dict.fromkeys(KINDS, 1))
    out = io.StringIO()
    call_command(
        "battery",
        "run",
        "--suite",
        "D",
        "--seed",
        "9",
        "--report",
        str(tmp_path),
        stdout=out,
        no_color=True,
    )
    run = BatteryRun.objects.get()
    assert (run.status, run.score_of_run, run.suites) == ("incomplete", 100.0, ["D"]), (
        out.getvalue()
    )
    assert run.suite_scores["D"]["items"] == 7
    assert [(g["name"], g["passed"]) for g in run.gates if g["kind"] == "metric"] == [
        ("D held_out_execution_success >= 0.95", True),
        ("D misapplied_skill_rate <= 0.01", True),
        ("D obsolete_execution_count <= 0", True),
        ("D undeclared_refusal_rate >= 0.66", True),
    ]
