"""Suite E: the draw is deterministic and every check it plans is what the
documented trigger semantics say (a reference model replays each item), the
grading is exact, the gates sit where the issue puts them, and items pointed
at a service with one fault fail with the right code."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import re
from collections import Counter
from datetime import timedelta

import pytest
from dateutil.rrule import rrulestr
from django.core.management import CommandError, call_command
from django.utils.dateparse import parse_datetime

from battery.judging import CORRECT, miss
from battery.models import BatteryRun
from battery.registry import ItemOutcome, designed_suites, suites_select
from battery.scoring import score_run, suite_result
from battery.suites import prospective
from battery.suites.prospective import draw
from battery.suites.prospective.draw import (
    LAST,
    STEPS,
    condition_holds,
    event_matches,
    iso,
    phase_of,
)
from battery.suites.prospective.judge import (
    judge_after,
    judge_inherited,
    judge_listed,
    judge_once,
    judge_order,
    judge_pending,
    judge_quiet,
    judge_recall,
    judge_settled,
    summarize,
)
from battery.taxonomy import FailureCode as F
from battery.tests.helpers import Faulty, run_suite_small
from battery.transport import InProcessTransport

KINDS = ("e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8")
NONE = dict.fromkeys(KINDS, 0)


def specs_for(seed: int, **counts: int):
    suite = suites_select(codes=["E"])[0]
    if counts:
        rng = random.Random(f"{seed}:E:prospective:generate")
        return draw.generate(rng, {**NONE, **counts})
    return suite.specs(suite.generators[0], seed=seed)


def checks(spec, q: str) -> list[dict]:
    return [c for c in spec.data["checks"] if c["q"] == q]


def actions(spec, op: str) -> list[dict]:
    return [a for a in spec.data["actions"] if a["op"] == op]


# ------------------------------------------------------------------ a reference model


def model(spec, *, ignore: tuple[str, ...] = ()) -> dict[str, dict]:
    """Replay an item's actions step by step with the documented semantics
    (triggers.py's docstring, DESIGN §7), independently of how the draw
    computed its checks: {ref: {"due": {step: occurrence}, "fired": [(occurrence, step)],
    "status": at the end, "reason": of its last change}}.
    `ignore` names operations a faulty service would drop (e.g. "cancel")."""
    ordered = sorted(
        enumerate(spec.data["actions"]),
        key=lambda pair: (pair[1]["step"], phase_of(pair[1]), pair[0]),
    )
    intents: dict[str, dict] = {}
    events: list[tuple[int, dict]] = []
    facts: list[dict] = []
    sequence = 0

    def fire(ref: str, step: int) -> None:
        intent = intents[ref]
        intent["status"] = "due"
        intent["fired"].append((intent["occurrence"], step))

    def cancel(ref: str, reason: str) -> None:
        """Cancelled (or its dependency was): whatever waits on it, never done, goes too."""
        intents[ref].update(status="cancelled", reason=reason)
        if intents[ref]["done_once"]:
            return
        for other, intent in intents.items():
            if intent["status"] == "blocked" and ref in intent["deps"]:
                cancel(other, f"dependency {ref} cancelled")

    def release(step: int) -> None:
        for ref, intent in intents.items():
            if intent["status"] == "blocked" and all(
                intents[d]["status"] == "completed" for d in intent["deps"]
            ):
                fire(ref, step)

    def holds(trigger: dict, moment) -> bool:
        chain = [
            f
            for f in facts
            if f["subject"] == trigger["subject"]
            and f["predicate"] == trigger["predicate"]
            and parse_datetime(f["valid_from"]) <= moment
        ]
        if not chain:
            return trigger["op"] == "absent"
        value = max(chain, key=lambda f: f["valid_from"])["value"]
        return trigger["op"] == "exists" or condition_holds(
            trigger["op"], True, value, trigger.get("value")
        )

    for step in range(LAST + 1):
        for _, action in (pair for pair in ordered if pair[1]["step"] == step):
            sequence += 1
            op = action["op"]
            if op in ignore:
                continue
            if op == "create":
                body = action["body"]
                deps = action.get("deps", [])
                intents[action["ref"]] = {
                    "body": body,
                    "deps": deps,
                    "status": "blocked" if deps else "active",
                    "occurrence": 1,
                    "due": parse_datetime(body["due_at"]) if body.get("due_at") else None,
                    "armed": sequence,
                    "fired": [],
                    "history": {},
                    "done_once": False,
                    "reason": "created",
                }
                if deps and all(intents[d]["status"] == "completed" for d in deps):
                    fire(action["ref"], step)
            elif op in ("complete", "skip"):
                intent = intents[action["ref"]]
                rule = intent["body"].get("rrule")
                first = parse_datetime(intent["body"]["due_at"]) if rule else None
                following = rrulestr(rule, dtstart=first).after(intent["due"]) if rule else None
                if following is not None:
                    intent.update(
                        status="active", due=following, occurrence=intent["occurrence"] + 1
                    )
                else:
                    intent["status"] = "completed"
                if op == "complete":
                    intent["done_once"] = True
                    release(step)
            elif op == "cancel":
                cancel(action["ref"], "cancelled")
            elif op == "event":
                events.append((sequence, action["event"]))
            elif op == "fact":
                facts.append(action["claim"])
        for ref, intent in intents.items():  # the tick
            if intent["status"] != "active":
                continue
            trigger_type, body = intent["body"]["trigger_type"], intent["body"]
            if (
                (trigger_type == "time" and intent["due"] <= STEPS[step])
                or (
                    trigger_type == "event"
                    and any(
                        n > intent["armed"] and event_matches(body["trigger_spec"], e)
                        for n, e in events
                    )
                )
                or (trigger_type == "state" and holds(body["trigger_spec"], STEPS[step]))
            ):
                fire(ref, step)
        for intent in intents.values():
            if intent["status"] == "due":
                intent["history"][step] = intent["occurrence"]
    return {
        ref: {
            "due": i["history"],
            "fired": i["fired"],
            "status": i["status"],
            "reason": i["reason"],
        }
        for ref, i in intents.items()
    }


def model_verdict(check: dict, replay: dict) -> bool:
    q = check["q"]
    if q in ("listed", "unlisted", "order", "pending", "inherited"):
        return True  # about the resume, not the triggers
    seen = replay[check["ref"]]
    if q == "recall":
        return seen["due"].get(check["step"]) == check["occurrence"]
    if q == "quiet":
        return check["step"] not in seen["due"]
    if q in ("suppressed", "zombie"):
        return not any(s >= check["step"] for s in seen["due"]) and not any(
            s >= check["step"] for _, s in seen["fired"]
        )
    if q == "once":
        return sorted(o for o, _ in seen["fired"]) == sorted(check["occurrences"])
    if q == "settled":
        return (seen["fired"], seen["status"], seen["reason"]) == (
            [],
            "cancelled",
            f"dependency {check['dependency']} cancelled",
        )
    raise ValueError(q)


# ----------------------------------------------------------------------------- the draw


def test_suite_E_is_registered_with_its_design_weight_and_gates():
    suite = suites_select(codes=["E"])[0]
    assert (suite.name, suite.weight, suite.gate) == ("Prospective memory", 20, 0.99)
    assert [gate.name for gate in suite.metric_gates] == [
        "trigger_recall >= 0.99",
        "false_fire_rate <= 0.005",
        "cancelled_intention_suppression >= 1",
        "zombie_rate <= 0",
        "handover_retention >= 1",
    ]
    assert (suite.items, [g.key for g in suite.generators]) == ([], ["prospective"])
    assert suite.item_count(seed=0) == 320


def test_the_same_seed_draws_the_same_items_and_another_seed_others():
    first = specs_for(21)
    assert specs_for(21) == first
    other = specs_for(22)
    assert [s.key for s in other] == [s.key for s in first]
    assert [s.data for s in other] != [s.data for s in first]


@pytest.mark.parametrize("seed", [0, 21])
def test_a_run_draws_320_items_of_all_eight_kinds_and_counts_what_it_plans(seed):
    specs = specs_for(seed)
    assert Counter(s.metrics["kind"] for s in specs) == {
        "E1": 60,
        "E2": 60,
        "E3": 40,
        "E4": 30,
        "E5": 30,
        "E6": 40,
        "E7": 40,
        "E8": 20,
    }
    assert [s.key for s in specs[:2]] == ["e1_0001", "e1_0002"]
    assert len({s.key for s in specs}) == len({s.data["token"] for s in specs}) == 320
    planned = Counter()
    for spec in specs:
        assert spec.metrics["planned"] == Counter(c["metric"] for c in spec.data["checks"])
        planned.update(spec.metrics["planned"])
        assert json.loads(json.dumps(spec.data)) == spec.data
        assert all(0 <= a["step"] <= LAST for a in spec.data["actions"])
    fired = {(s.key, c["ref"]) for s in specs for c in s.data["checks"] if c["q"] == "recall"}
    assert planned["once"] == len(fired)
    assert planned["suppressed"] == sum(len(actions(s, "cancel")) for s in specs)
    assert planned["zombie"] == sum(
        1
        for s in specs
        for c in checks(s, "zombie")
        for a in s.data["actions"]
        if a["op"] in ("complete", "skip") and (a["ref"], a["step"]) == (c["ref"], c["step"])
    ) + sum(
        1
        for s in specs
        for c in checks(s, "settled")
        if s.metrics["variant"] == "cancelled_dependency"
        and any(a["op"] == "cancel" and a["ref"] == c["dependency"] for a in s.data["actions"])
    )
    assert {s.metrics["variant"] for s in specs if checks(s, "settled")} == {"cancelled_dependency"}
    by_kind = Counter()
    for spec in specs:
        for metric in ("handover", "handover_fire"):
            by_kind[spec.metrics["kind"], metric] += spec.metrics["planned"].get(metric, 0)
    assert {key for key, n in by_kind.items() if n} == {
        ("E5", "handover"),
        ("E5", "handover_fire"),
        ("E8", "handover"),
        ("E8", "handover_fire"),
    }
    # Enough of each for a stable rate.
    assert planned["recall"] + planned["handover_fire"] >= 300
    assert planned["quiet"] + planned["once"] >= 600
    assert planned["suppressed"] >= 40 and planned["zombie"] >= 300


@pytest.mark.parametrize("seed", [0, 5, 21])
def test_every_planned_check_is_what_the_documented_semantics_say(seed):
    for spec in specs_for(seed):
        replay = model(spec)
        wrong = [c for c in spec.data["checks"] if not model_verdict(c, replay)]
        assert wrong == [], (spec.key, spec.title)


def test_every_reference_is_made_before_it_is_used():
    for spec in specs_for(3):
        made = {}
        for action in spec.data["actions"]:
            if action["op"] in ("create", "thread"):
                made[action["ref"]] = (action["step"], phase_of(action))
        for action in spec.data["actions"]:
            if action["op"] in ("complete", "skip", "cancel", "handover", "resume", "acknowledge"):
                assert made[action["ref"]] <= (action["step"], phase_of(action))
            for ref in [
                *action.get("deps", []),
                *([action["thread"]] if "thread" in action else []),
            ]:
                assert made[ref] <= (action["step"], phase_of(action))
        for check in spec.data["checks"]:
            for ref in [check["ref"]] if "ref" in check else sum(check["groups"], []):
                assert made[ref][0] <= check.get("step", LAST), (spec.key, check)


def test_each_kind_draws_every_variant():
    variants = Counter((s.metrics["kind"], s.metrics["variant"]) for s in specs_for(0))
    assert {v for k, v in variants if k == "E1"} == set(draw.E1_VARIANTS)
    assert {v for k, v in variants if k == "E2"} == {"exact", "glob", "silent"}
    assert {v for k, v in variants if k == "E3"} == {"changes", "scheduled", "already", "silent"}
    assert {v for k, v in variants if k == "E4"} == {
        "fan_in",
        "cancelled_dependency",
        "made_after",
        "chain",
    }
    assert {v for k, v in variants if k == "E5"} == {"within_day", "across_gap"}
    assert {v for k, v in variants if k == "E6"} == {
        "time",
        "event",
        "state",
        "while_due",
        "recurring",
        "dependency",
    }
    assert {v for k, v in variants if k == "E7"} == {
        "time",
        "event",
        "state",
        "recurring",
        "recurring_skip",
    }


def test_e2_distractors_look_like_the_cue_and_never_match_it():
    stale = 0
    for spec in specs_for(4, e2=60):
        (create,) = actions(spec, "create")
        trigger = create["body"]["trigger_spec"]
        sent = actions(spec, "event")
        recall = checks(spec, "recall")
        cue_step = recall[0]["step"] if recall else None
        for action in sent:
            matches = event_matches(trigger, action["event"])
            if action.get("early"):
                stale += 1
                assert matches and action["step"] == create["step"]
            elif action["step"] == cue_step:
                assert matches
            else:  # a look-alike: the same family of event types
                assert not matches
                assert trigger["event_type"].split(".")[0] in action["event"]["event_type"]
        assert trigger["conditions"][0] == {
            "field": "payload.ref",
            "op": "eq",
            "value": spec.data["token"],
        }
    assert 5 < stale < 40


@pytest.mark.parametrize(
    ("condition", "event", "holds"),
    [
        ({"field": "payload.n", "op": "eq", "value": 3}, {"n": 3}, True),
        ({"field": "payload.n", "op": "eq", "value": 3}, {"n": "3"}, False),
        ({"field": "payload.n", "op": "eq", "value": True}, {"n": 1}, False),
        ({"field": "payload.n", "op": "eq", "value": 1}, {"n": True}, False),
        ({"field": "payload.n", "op": "gte", "value": 100}, {"n": "200"}, False),
        ({"field": "payload.n", "op": "gte", "value": 100}, {"n": 100}, True),
        ({"field": "payload.n", "op": "lt", "value": 10}, {"n": 10}, False),
        ({"field": "payload.n", "op": "in", "value": ["a", "b"]}, {"n": ["a"]}, False),
        ({"field": "payload.n", "op": "in", "value": ["a", "b"]}, {"n": "b"}, True),
        ({"field": "payload.n", "op": "contains", "value": "x"}, {"n": ["xy"]}, False),
        ({"field": "payload.n", "op": "contains", "value": "x"}, {"n": ["y", "x"]}, True),
        ({"field": "payload.n", "op": "exists"}, {}, False),
        ({"field": "payload.n", "op": "exists"}, {"n": None}, True),
        ({"field": "payload.n", "op": "absent"}, {"n": ""}, False),
        ({"field": "payload.a.b", "op": "eq", "value": 1}, {"a": {"b": 1}}, True),
        ({"field": "payload.a.b", "op": "eq", "value": 1}, {"a.b": 1}, False),
        ({"field": "payload.n", "op": "ne", "value": 1}, {}, False),
    ],
)
def test_the_suites_model_of_event_conditions(condition, event, holds):
    spec = {"event_type": "x.*", "conditions": [condition]}
    assert event_matches(spec, {"event_type": "x.y", "payload": event}) is holds


def test_event_types_match_exactly_or_by_glob():
    def matches(pattern, event_type):
        return event_matches({"event_type": pattern}, {"event_type": event_type, "payload": {}})

    assert [matches("deploy.*", t) for t in ("deploy.a", "deploy.a.b", "deploys.a", "deploy")] == [
        True,
        True,
        False,
        False,
    ]
    assert [matches("deploy.done", t) for t in ("deploy.done", "deploy.done.x", "Deploy.done")] == [
        True,
        False,
        False,
    ]


def test_e5_hands_over_every_thread_once_and_checks_its_open_intentions():
    for spec in specs_for(9, e5=30):
        (handover,), (resume,), (acknowledge,) = (
            actions(spec, op) for op in ("handover", "resume", "acknowledge")
        )
        assert resume["step"] == acknowledge["step"] == handover["step"] + 1
        assert handover["to"] == resume["session"] == acknowledge["session"] != handover["from"]
        creates = actions(spec, "create")
        assert all(a["thread"] == "t" and a["source_session"] == handover["from"] for a in creates)
        listed = {c["ref"] for c in checks(spec, "listed")}
        assert {c["ref"] for c in checks(spec, "inherited")} == listed
        assert {c["ref"] for c in checks(spec, "unlisted")} | listed == {a["ref"] for a in creates}
        assert {"early", "later"} <= listed
        (order,) = checks(spec, "order")
        assert order["groups"][0] == ["early"] and sorted(sum(order["groups"], [])) == sorted(
            listed
        )


def test_e7_recurring_items_fire_each_occurrence_after_the_last_was_done():
    for spec in specs_for(2, e7=40):
        if not spec.metrics["variant"].startswith("recurring"):
            continue
        (create,) = actions(spec, "create")
        count = int(re.search(r"COUNT=(\d+)", create["body"]["rrule"])[1])
        recalls = checks(spec, "recall")
        assert [c["occurrence"] for c in recalls] == list(range(1, count + 1))
        done = actions(spec, "skip" if spec.metrics["variant"] == "recurring_skip" else "complete")
        assert [a["step"] for a in done] == [c["step"] + 1 for c in recalls]
        (zombie,) = checks(spec, "zombie")
        assert zombie["step"] == done[-1]["step"]


# ----------------------------------------------------------------------------- grading


DUE = {2: {}, 3: {"x": 1}, 4: {"x": 1}, 5: {}, 6: {"x": 2}, 7: miss(F.R2, "unreadable")}


@pytest.mark.parametrize(
    ("args", "verdict"),
    [
        (("x", 3, 1), (True, "", "")),
        (
            ("x", 2, 1),
            (
                False,
                "P0",
                f"occurrence 1 not due at step 2 ({iso(STEPS[2])}); it came due only at step 3 ({iso(STEPS[3])})",
            ),
        ),
        (
            ("x", 5, 2),
            (
                False,
                "P0",
                f"occurrence 2 not due at step 5 ({iso(STEPS[5])}); it came due only at step 6 ({iso(STEPS[6])})",
            ),
        ),
        (("x", 4, 2), (False, "P0", f"due at step 4 ({iso(STEPS[4])}) with occurrence 1, not 2")),
        (("y", 5, 1), (False, "P0", f"occurrence 1 not due at step 5 ({iso(STEPS[5])})")),
        (("x", 7, 1), (False, "R2", "unreadable")),
        (("x", 8, 1), (False, "R2", f"nothing was read at step 8 ({iso(STEPS[8])})")),
    ],
)
def test_a_cue_is_recalled_when_due_at_its_step_with_its_occurrence(args, verdict):
    result = judge_recall(*args, DUE)
    assert (result.ok, result.code, result.detail) == verdict


def test_a_refused_tick_is_named_in_the_miss():
    result = judge_recall("y", 5, 1, DUE, tick_error="HTTP 500")
    assert (
        result.detail
        == f"occurrence 1 not due at step 5 ({iso(STEPS[5])}) (the tick was refused: HTTP 500)"
    )


def test_quiet_means_not_due_at_all():
    assert judge_quiet("x", 5, "why", DUE) == CORRECT
    assert judge_quiet("x", 6, "a distractor", DUE) == miss(
        F.P1, f"due at step 6 ({iso(STEPS[6])}), before its cue (a distractor)"
    )
    assert judge_quiet("x", 7, "why", DUE) == miss(F.R2, "unreadable")


def test_cancelled_and_completed_ones_are_never_due_nor_fired_again():
    due = {s: {} for s in range(LAST + 1)}
    fired = {"x": [(1, STEPS[2])]}
    assert judge_after("x", 3, due, fired, what="cancelled") == CORRECT
    assert judge_after("x", 2, due, fired, what="completed") == miss(
        F.P1,
        f"completed at step 2 ({iso(STEPS[2])}), but the ledger records it fired "
        f"(occurrence 1) at {iso(STEPS[2])}",
    )
    assert judge_after("x", 3, {**due, 9: {"x": 1}}, fired, what="cancelled") == miss(
        F.P1, f"cancelled at step 3 ({iso(STEPS[3])}), but due again at step 9 ({iso(STEPS[9])})"
    )
    unread = miss(F.R2, "no ledger")
    assert judge_after("x", 3, due, unread, what="cancelled") == unread


def test_a_dependent_of_a_cancelled_one_ends_cancelled_naming_it_never_fired():
    def answer(status, reason):
        return {"status": status, "transitions": [{"reason": "created"}, {"reason": reason}]}

    settled = answer("cancelled", "dependency d1 cancelled")
    assert judge_settled("x", "d1", settled, 200, {}) == CORRECT
    assert judge_settled("x", "d1", answer("blocked", "created"), 200, {}) == miss(
        F.P1,
        "its dependency was cancelled, but it is 'blocked' at the end: a zombie that can never fire",
    )
    assert judge_settled("x", "d1", answer("cancelled", "cancelled"), 200, {}) == miss(
        F.P1, "cancelled with the reason 'cancelled', not 'dependency d1 cancelled'"
    )
    assert judge_settled("x", "d1", settled, 200, {"x": [(1, STEPS[4])]}) == miss(
        F.P1,
        f"its dependency was cancelled, but the ledger records it fired (occurrence 1) at "
        f"{iso(STEPS[4])}",
    )
    assert judge_settled("x", "d1", None, 404, {}) == miss(
        F.R2, "GET /intentions/{id} answered HTTP 404"
    )
    unread = miss(F.R2, "no ledger")
    assert judge_settled("x", "d1", settled, 200, unread) == unread


def test_each_occurrence_fires_once_and_only_the_expected_ones():
    fired = {"x": [(1, None), (2, None)], "y": [(1, None), (1, None)]}
    assert judge_once("x", [1, 2], fired) == CORRECT
    assert judge_once("z", [1], fired) == CORRECT  # never fired: recall's business
    assert judge_once("y", [1], fired) == miss(
        F.P1, "the ledger records occurrence 1 fired 2 times"
    )
    assert judge_once("x", [1], fired) == miss(
        F.P1, "the ledger records occurrence 2 fired; only [1] should"
    )


PACKAGE = {
    "intentions": [{"id": "due1"}, {"id": "over"}, {"id": "rest1"}, {"id": "rest2"}],
    "pending": [
        {"intention_id": "due1", "kind": "fired"},
        {"intention_id": "rest1", "kind": "rehearsed"},
    ],
}


def test_a_resume_lists_open_intentions_due_and_overdue_first_with_the_fired_pending():
    assert judge_listed("rest2", PACKAGE, listed=True) == CORRECT
    assert judge_listed("gone", PACKAGE, listed=False) == CORRECT
    assert judge_listed("gone", PACKAGE, listed=True).code == "R2"
    assert judge_listed("rest1", PACKAGE, listed=False) == miss(
        F.R3, "a completed intention is listed on resume as open"
    )
    assert judge_order([["due1"], ["over"], ["rest2", "rest1"]], PACKAGE) == CORRECT
    assert judge_order([["due1"], [], ["over"]], PACKAGE) == CORRECT
    assert judge_order([["over"], ["due1"], []], PACKAGE) == miss(
        F.R3,
        "the resume does not list due and overdue intentions first: due at positions [1], "
        "later groups from 0",
    )
    assert judge_order([["due1"], ["rest2"], ["over"]], PACKAGE).code == "R3"
    assert judge_pending("due1", PACKAGE) == CORRECT
    assert judge_pending("rest1", PACKAGE).code == "R2"  # rehearsed, not fired
    assert judge_inherited({"inherited_by": "s2"}, 200, "s2") == CORRECT
    assert judge_inherited({"inherited_by": ""}, 200, "s2") == miss(
        F.W0, "inherited_by is '', not the successor 's2'"
    )
    assert judge_inherited(None, 404, "s2") == miss(F.R2, "GET /intentions/{id} answered HTTP 404")


def outcome(passed: bool, planned: dict, correct: dict | None = None):
    metrics = {"kind": "EX", "planned": planned}
    if correct is not None:
        metrics["correct"] = correct
    return ItemOutcome(
        suite="E",
        item=f"i{len(planned)}",
        title="t",
        passed=passed,
        failure_code="" if passed else "P0",
        detail="",
        metrics=metrics,
        duration_ms=1.0,
        generator="prospective",
    )


def test_the_summary_counts_checks_and_a_crashed_item_counts_all_it_planned_as_wrong():
    summary = summarize(
        [
            outcome(
                True,
                {"recall": 2, "quiet": 3, "once": 2, "zombie": 2},
                {"recall": 2, "quiet": 3, "once": 2, "zombie": 2},
            ),
            outcome(
                False,
                {"recall": 1, "quiet": 1, "suppressed": 1},
                {"recall": 1, "quiet": 0, "suppressed": 0},
            ),
            outcome(
                False,
                {"handover": 4, "handover_fire": 2, "zombie": 2},
                {"handover": 3, "handover_fire": 2, "zombie": 1},
            ),
            outcome(False, {"recall": 1, "quiet": 4}),  # crashed
        ]
    )
    assert summary.score == 25.0
    assert summary.metrics == {
        "trigger_recall": 5 / 6,
        "false_fire_rate": 5 / 10,
        "cancelled_intention_suppression": 0.0,
        "zombie_rate": 1 / 4,
        "handover_retention": 5 / 6,
    }


def e_result(*, recalled=198, false=1, suppressed=40, zombies=0, handed=100):
    """Suite E's result: 200 cues, 200 quiet checks, 40 cancellations, 300
    completions, 100 handover checks."""
    planned = {"recall": 200, "quiet": 200, "suppressed": 40, "zombie": 300, "handover": 100}
    correct = {
        "recall": recalled,
        "quiet": 200 - false,
        "suppressed": suppressed,
        "zombie": 300 - zombies,
        "handover": handed,
    }
    outcomes = [outcome(True, planned, correct)] + [outcome(True, {}, {})] * 99
    return suite_result(suite=suites_select(codes=["E"])[0], outcomes=outcomes)


def test_the_gates_hold_at_99_percent_recall_half_a_percent_false_fires_and_none_lost():
    card = score_run([e_result()], designed=designed_suites())
    assert [(g.name, g.kind, g.passed, g.detail) for g in card.gates] == [
        ("E pass rate >= 99%", "suite", True, "100/100 items passed (100.0%)"),
        ("E trigger_recall >= 0.99", "metric", True, "trigger_recall 0.99"),
        ("E false_fire_rate <= 0.005", "metric", True, "false_fire_rate 0.005"),
        (
            "E cancelled_intention_suppression >= 1",
            "metric",
            True,
            "cancelled_intention_suppression 1",
        ),
        ("E zombie_rate <= 0", "metric", True, "zombie_rate 0"),
        ("E handover_retention >= 1", "metric", True, "handover_retention 1"),
        (
            "cap 70: current_fact_accuracy, procedure_execution, handover_retention >= 0.6",
            "cap",
            False,
            "handover_retention 1; not reported: current_fact_accuracy, procedure_execution, "
            "so the cap applies (fail closed); total capped at 70",
        ),
        (
            "cap 85: current_fact_accuracy, as_of_accuracy, cancelled_intention_suppression, "
            "negative_transfer_safety >= 0.8",
            "cap",
            False,
            "cancelled_intention_suppression 1; not reported: current_fact_accuracy, "
            "as_of_accuracy, negative_transfer_safety, so the cap applies (fail closed); "
            "total capped at 85",
        ),
    ]
    # E alone: no gate failed on what it measured; the others did not run.
    assert (card.failed, card.status, card.total_of_run) == (False, "incomplete", 100.0)


def test_one_cue_missed_one_false_fire_one_cancellation_or_zombie_or_handover_more_fails():
    card = score_run(
        [e_result(recalled=197, false=2, suppressed=39, zombies=1, handed=99)],
        designed=designed_suites(),
    )
    assert [(g.name, g.detail) for g in card.gates if not g.passed and not g.fail_closed] == [
        ("E trigger_recall >= 0.99", "trigger_recall 0.985"),
        ("E false_fire_rate <= 0.005", "false_fire_rate 0.01"),
        ("E cancelled_intention_suppression >= 1", "cancelled_intention_suppression 0.975"),
        ("E zombie_rate <= 0", "zombie_rate 0.003333"),
        ("E handover_retention >= 1", "handover_retention 0.99"),
    ]
    capped = score_run([e_result(suppressed=31)], designed=designed_suites())
    assert capped.total_of_run == 85


# ------------------------------------------------------------- against the real service


def run_small(transport, *, seed: int = 11, **counts: int) -> tuple[list, list[ItemOutcome]]:
    """Suite E's items for `counts`, through suite_execute against `transport`."""
    return run_suite_small(
        transport,
        code="E",
        module=prospective,
        draw=draw,
        none=NONE,
        seed=seed,
        counts=counts,
        successors=True,
    )


ACT = re.compile(r"^/api/v1/intentions/([0-9a-f-]{36})/(\w+)$")
DUE_PATH = "/api/v1/intentions/due"


class DueRewriter(Faulty):
    """Rewrites what is due; keeps the clock it was set to and what it made."""

    def __init__(self, inner):
        super().__init__(inner)
        self.now, self.made = None, {}

    def rewrite(self, due: list[dict], headers) -> list[dict]:
        return due

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "PUT" and path == "/api/v1/clock":
            self.now = parse_datetime(body["now"])
        if method == "POST" and path == "/api/v1/intentions" and response.status == 201:
            self.made[response.body["id"]] = response.body
        if method == "GET" and path.startswith(DUE_PATH) and response.status == 200:
            results = self.rewrite(list(response.body["results"]), headers)
            return dataclasses.replace(response, body={**response.body, "results": results})
        return response

    def status(self, intention_id, headers) -> dict:
        return self.inner.request("GET", f"/api/v1/intentions/{intention_id}", headers=headers).body


class FiresAnHourEarly(DueRewriter):
    """Time triggers surface as due up to an hour before due_at."""

    def rewrite(self, due, headers):
        listed = {i["id"] for i in due}
        for intention_id, made in self.made.items():
            if made["trigger_type"] != "time" or intention_id in listed:
                continue
            if parse_datetime(made["due_at"]) <= self.now + timedelta(hours=1):
                current = self.status(intention_id, headers)
                if current["status"] == "active":
                    due.append({**current, "status": "due"})
        return due


class HidesTimeTriggers(DueRewriter):
    """Time triggers never surface: missed."""

    def rewrite(self, due, headers):
        return [i for i in due if i["trigger_type"] != "time"]


class IgnoresEventConditions(DueRewriter):
    """An event trigger fires on any event of its type after it was made."""

    def __init__(self, inner):
        super().__init__(inner)
        self.sent = []  # (how many intentions existed, event type)

    def request(self, method, path, *, body=None, headers=None):
        if method == "POST" and path == "/api/v1/events":
            self.sent += [(len(self.made), e["event_type"]) for e in body.get("events", [body])]
        return super().request(method, path, body=body, headers=headers)

    def rewrite(self, due, headers):
        listed = {i["id"] for i in due}
        for index, (intention_id, made) in enumerate(self.made.items()):
            if made["trigger_type"] != "event" or intention_id in listed:
                continue
            pattern = made["trigger_spec"]["event_type"]
            if any(
                n > index
                and event_matches({"event_type": pattern}, {"event_type": t, "payload": {}})
                for n, t in self.sent
            ):
                current = self.status(intention_id, headers)
                if current["status"] == "active":
                    due.append({**current, "status": "due"})
        return due


class IgnoresCancel(Faulty):
    """Answers a cancellation without passing it on: the intention stays armed."""

    def request(self, method, path, *, body=None, headers=None):
        match = ACT.match(path)
        if method == "POST" and match and match[2] == "cancel":
            current = self.inner.request("GET", f"/api/v1/intentions/{match[1]}", headers=headers)
            return dataclasses.replace(current, body={**current.body, "status": "cancelled"})
        return super().request(method, path, body=body, headers=headers)


class IgnoresComplete(Faulty):
    """Answers a completion without passing it on: the intention stays due."""

    def request(self, method, path, *, body=None, headers=None):
        match = ACT.match(path)
        if method == "POST" and match and match[2] in ("complete", "skip"):
            current = self.inner.request("GET", f"/api/v1/intentions/{match[1]}", headers=headers)
            return dataclasses.replace(current, body={**current.body, "status": "completed"})
        return super().request(method, path, body=body, headers=headers)


class LedgerFiresTwice(Faulty):
    """Every intention.fired event is in the ledger twice."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "GET" and "event_type=intention.fired" in path and response.status == 200:
            twice = [e for e in response.body["results"] for _ in range(2)]
            return dataclasses.replace(response, body={**response.body, "results": twice})
        return response


class ResumeForgetsIntentions(Faulty):
    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "POST" and path.endswith("/resume") and response.status == 200:
            return dataclasses.replace(response, body={**response.body, "intentions": []})
        return response


DETAIL = re.compile(r"^/api/v1/intentions/[0-9a-f-]{36}$")


class InheritsNothing(Faulty):
    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "GET" and DETAIL.match(path) and response.status == 200:
            return dataclasses.replace(response, body={**response.body, "inherited_by": ""})
        return response


class LeavesDependentsBlocked(Faulty):
    """Shows a dependent cancelled with its dependency as the service did before:
    still blocked, its last transition not there."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "GET" and DETAIL.match(path) and response.status == 200:
            transitions = response.body["transitions"]
            if response.body["status"] == "cancelled" and transitions[-1]["reason"].startswith(
                "dependency "
            ):
                return dataclasses.replace(
                    response,
                    body={**response.body, "status": "blocked", "transitions": transitions[:-1]},
                )
        return response


def first_miss(result) -> tuple[str, str]:
    return result.failure_code, result.detail.split(" (and ")[0]


def test_every_kind_passes_against_the_real_service(db):
    specs, outcomes = run_small(
        InProcessTransport(), e1=5, e2=5, e3=5, e4=5, e5=4, e6=5, e7=6, e8=4
    )
    assert [(o.item, o.passed, o.failure_code, o.detail) for o in outcomes] == [
        (s.key, True, "", "") for s in specs
    ]
    assert summarize(outcomes).metrics == {
        "trigger_recall": 1.0,
        "false_fire_rate": 0.0,
        "cancelled_intention_suppression": 1.0,
        "zombie_rate": 0.0,
        "handover_retention": 1.0,
    }


def test_a_time_trigger_that_fires_early_is_P1(db):
    specs, outcomes = run_small(FiresAnHourEarly(InProcessTransport()), e1=12)
    expected = []
    for spec in specs:
        (quiet,) = checks(spec, "quiet") or [None]
        due = parse_datetime(actions(spec, "create")[0]["body"]["due_at"])
        if quiet is None or due > STEPS[quiet["step"]] + timedelta(hours=1):
            expected.append(("", ""))
            continue
        step = quiet["step"]
        expected.append(
            (
                "P1",
                f"x stays quiet at step {step}: {quiet['why']}: due at step {step} "
                f"({iso(STEPS[step])}), before its cue ({quiet['why']})",
            )
        )
    assert [first_miss(o) for o in outcomes] == expected
    assert {code for code, _ in expected} == {"", "P1"}
    assert summarize(outcomes).metrics["false_fire_rate"] > 0.005


def test_a_time_trigger_that_never_surfaces_is_P0_missed(db):
    specs, outcomes = run_small(HidesTimeTriggers(InProcessTransport()), e1=6)
    expected = []
    for spec in specs:
        (recall,) = checks(spec, "recall")
        step = recall["step"]
        expected.append(
            (
                "P0",
                f"x fires (occurrence 1) at step {step}: occurrence 1 not due at step {step} ({iso(STEPS[step])})",
            )
        )
    assert [first_miss(o) for o in outcomes] == expected
    assert summarize(outcomes).metrics["trigger_recall"] == 0.0


def test_an_event_trigger_that_ignores_its_conditions_fires_on_a_distractor_P1(db):
    specs, outcomes = run_small(IgnoresEventConditions(InProcessTransport()), e2=10)
    sent = [
        (a["step"], phase_of(a), a["event"]["event_type"])
        for s in specs
        for a in actions(s, "event")
    ]
    fooled_items = 0
    for spec, result in zip(specs, outcomes, strict=True):
        (create,) = actions(spec, "create")
        pattern = create["body"]["trigger_spec"]["event_type"]
        recall = checks(spec, "recall")
        until = recall[0]["step"] if recall else LAST + 1
        made = (create["step"], phase_of(create))
        # Any item's event of a matching type, sent after it was made and before its cue.
        fooled = [
            step
            for step, phase, event_type in sent
            if made < (step, phase)
            and step < until
            and event_matches({"event_type": pattern}, {"event_type": event_type, "payload": {}})
        ]
        quiet = [c["step"] for c in checks(spec, "quiet") if fooled and c["step"] >= min(fooled)]
        if not quiet:
            assert result.passed, (spec.key, result.detail)
            continue
        fooled_items += 1
        assert first_miss(result)[0] == "P1"
        assert result.detail.startswith(f"x stays quiet at step {min(quiet)}: ")
    assert fooled_items >= 5


def test_a_cancellation_that_does_not_take_fires_anyway_P1_and_caps_the_total(db):
    specs, outcomes = run_small(IgnoresCancel(InProcessTransport()), e6=10)
    for spec, result in zip(specs, outcomes, strict=True):
        (suppressed,) = checks(spec, "suppressed")
        cancelled = suppressed["step"]
        again = min(s for s in model(spec, ignore=("cancel",))["x"]["due"] if s >= cancelled)
        assert first_miss(result) == (
            "P1",
            f"x cancelled at step {cancelled}: cancelled at step {cancelled} "
            f"({iso(STEPS[cancelled])}), but due again at step {again} ({iso(STEPS[again])})",
        )
    assert summarize(outcomes).metrics["cancelled_intention_suppression"] == 0.0


def test_a_completion_that_does_not_take_leaves_a_zombie_P1(db):
    specs, outcomes = run_small(IgnoresComplete(InProcessTransport()), e7=12)
    for spec, result in zip(specs, outcomes, strict=True):
        if spec.metrics["variant"].startswith("recurring"):  # occurrence 1 never ends
            assert result.failure_code == "P1"
            assert "P0" in {m["code"] for m in result.metrics["misses"]}
            continue
        (zombie,) = checks(spec, "zombie")
        step = zombie["step"]
        assert first_miss(result) == (
            "P1",
            f"x completed at step {step}: completed at step {step} ({iso(STEPS[step])}), "
            f"but due again at step {step} ({iso(STEPS[step])})",
        )
    assert summarize(outcomes).metrics["zombie_rate"] == 1.0


def test_a_dependent_left_blocked_by_a_cancelled_dependency_is_a_zombie_P1(db):
    specs, outcomes = run_small(LeavesDependentsBlocked(InProcessTransport()), seed=4, e4=12)
    settled = [(s, o) for s, o in zip(specs, outcomes, strict=True) if checks(s, "settled")]
    assert settled
    for spec, result in zip(specs, outcomes, strict=True):
        if not checks(spec, "settled"):
            assert result.passed, (spec.key, result.detail)
            continue
        assert first_miss(result) == (
            "P1",
            "x cancelled with "
            f"{checks(spec, 'settled')[0]['dependency']}, not left blocked: its dependency was "
            "cancelled, but it is 'blocked' at the end: a zombie that can never fire",
        )
    zombies = summarize(outcomes).metrics["zombie_rate"]
    assert zombies > 0


def test_a_ledger_that_records_a_firing_twice_is_P1(db):
    specs, outcomes = run_small(LedgerFiresTwice(InProcessTransport()), e1=3, e7=3)
    for result in outcomes:
        assert result.failure_code == "P1"
        assert first_miss(result)[1] == (
            "x fired once per occurrence: the ledger records occurrence 1 fired 2 times"
        )
    metrics = summarize(outcomes).metrics
    assert metrics["false_fire_rate"] == sum(s.metrics["planned"]["once"] for s in specs) / sum(
        s.metrics["planned"]["once"] + s.metrics["planned"].get("quiet", 0) for s in specs
    )


def test_a_resume_that_forgets_the_threads_intentions_is_R2(db):
    _, outcomes = run_small(ResumeForgetsIntentions(InProcessTransport()), e5=4)
    assert [first_miss(o) for o in outcomes] == [
        ("R2", "early listed: an open intention the successor must see is not listed on resume")
    ] * 4
    assert summarize(outcomes).metrics["handover_retention"] < 1


class ResumeListsOnlyTheThreads(Faulty):
    """A resume as it was before: the thread's intentions, none of no thread."""

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "POST" and path.endswith("/resume") and response.status == 200:
            kept = [i for i in response.body["intentions"] if i.get("thread")]
            return dataclasses.replace(response, body={**response.body, "intentions": kept})
        return response


def test_a_resume_without_the_sessions_promises_of_no_thread_is_R2(db):
    _, outcomes = run_small(ResumeListsOnlyTheThreads(InProcessTransport()), e8=3)
    assert [first_miss(o) for o in outcomes] == [
        ("R2", "promise listed: an open intention the successor must see is not listed on resume")
    ] * 3
    assert summarize(outcomes).metrics["handover_retention"] < 1


def test_intentions_not_inherited_by_the_successor_are_W0(db):
    specs, outcomes = run_small(InheritsNothing(InProcessTransport()), e5=3)
    assert [first_miss(o) for o in outcomes] == [
        (
            "W0",
            f"early inherited: inherited_by is '', not the successor 'session-{s.data['token']}-2'",
        )
        for s in specs
    ]


# --------------------------------------------------------------------------- the command


def battery(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", *args, stdout=out, no_color=True)
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_E_exits_non_zero_when_cancelled_intentions_fire(monkeypatch, tmp_path):
    monkeypatch.setattr(draw, "COUNTS", {**NONE, "e1": 3, "e6": 6})
    monkeypatch.setattr(
        "battery.services.transport_open",
        lambda base_url, via=None: IgnoresCancel(InProcessTransport()),
    )
    with pytest.raises(CommandError) as caught:
        battery("run", "--suite", "E", "--report", str(tmp_path), "--seed", "8")
    run = BatteryRun.objects.get()
    assert (caught.value.returncode, run.status) == (1, "failed")
    assert [g["name"] for g in run.gates if not g["passed"] and not g["fail_closed"]] == [
        "E pass rate >= 99%",
        "E cancelled_intention_suppression >= 1",
        "E handover_retention >= 1",  # no E5 item: not reported
        "cap 85: current_fact_accuracy, as_of_accuracy, cancelled_intention_suppression, "
        "negative_transfer_safety >= 0.8",
    ]
    assert Counter(run.items.values_list("failure_code", flat=True)) == {"": 3, "P1": 6}
    assert (run.score_of_run, run.score) == (33.33, round(20 * 33.33 / 105, 2))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_E_passes_its_gates_against_the_real_service(tmp_path):
    output = battery("run", "--suite", "E", "--seed", "7", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    assert (run.status, run.score_of_run, run.suites) == ("incomplete", 100.0, ["E"])
    suite = run.suite_scores["E"]
    assert (suite["items"], suite["passed"], suite["gate_passed"]) == (320, 320, True)
    assert suite["metrics"] == {
        "trigger_recall": 1.0,
        "false_fire_rate": 0.0,
        "cancelled_intention_suppression": 1.0,
        "zombie_rate": 0.0,
        "handover_retention": 1.0,
    }
    assert [(g["name"], g["passed"]) for g in run.gates if g["kind"] != "cap"] == [
        ("E pass rate >= 99%", True),
        ("E trigger_recall >= 0.99", True),
        ("E false_fire_rate <= 0.005", True),
        ("E cancelled_intention_suppression >= 1", True),
        ("E zombie_rate <= 0", True),
        ("E handover_retention >= 1", True),
    ]
    assert all(g["passed"] for g in run.gates if not g["fail_closed"])
    assert Counter(run.items.values_list("failure_code", flat=True)) == {"": 320}
    assert "FAIL" not in output
    report = json.loads((tmp_path / "report.json").read_text())
    assert Counter(i["metrics"]["kind"] for i in report["items"]) == {
        "E1": 60,
        "E2": 60,
        "E3": 40,
        "E4": 30,
        "E5": 30,
        "E6": 40,
        "E7": 40,
        "E8": 20,
    }
    # The suite runs on its simulated clock, not in real hours; how long it takes
    # is not asserted here: it depends on the host and what else runs on it.
