"""Suite C's grading: one verdict per question, tallied per item and per suite.

A value question's answer is classified in this order:
1. exactly the expected value (or nothing, when nothing is expected): correct;
2. it holds a stale value — superseded or outdated for the time asked: R1, stale;
3. it holds a forbidden value — known only later, or never in force: R3;
4. the expected value is missing: R0 if the answer is empty, else R1 (wrong);
5. the expected value is there with others: R3.

The suite's metrics count answers, not items: each question belongs to one
metric, and an item that could not ask (its world failed to be written, or it
crashed) counts every question it planned as wrong.

C6 (a question asked through POST /recall, asked.py) has its own checks:
* `stale`: no superseded or ended value of the pair asked is presented as in
  force (currentness current or contested) — else R3, the value counted
  stale;
* `found`: the current value is the first fact, marked current. No fact at
  all: R1 when the route went to another store, else R2 (an abstention
  too); another fact first: R3 (the current one further down) or R2 (not
  there); the current value marked otherwise: U0;
* `false_answer` (nothing current to find): no fact presented as in force —
  else R3, an irrelevant memory given as the answer.
An item fails when it breaks a promise, in either vocabulary — a stale
value presented as in force (`stale`), an answer where nothing is in force
(`false_answer`) — and a seen item also when the current value is not
`found`. A held-out item that does not find it passes: its code is kept in
its metrics, and recall_current_found_rate_held_out reports how many did.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...judging import CORRECT, MISSES_KEPT, Verdict, counted, miss
from ...registry import ItemFailure, ItemOutcome, SuiteSummary, pass_rate
from ...taxonomy import FailureCode as F
from ..episodic.api import Answer, Hit
from ..episodic.judge import recall_refused
from .draw import METRICS, same, value_key

METRIC_NAMES = {metric: f"{metric}_accuracy" for metric in METRICS}


def _shown(values: Sequence[Any]) -> str:
    return json.dumps(list(values), ensure_ascii=False)


def judge_values(question: dict[str, Any], got: Sequence[Any]) -> Verdict:
    expected = question["expect"]
    want = [] if expected is None else [value_key(expected["value"])]
    keys = [value_key(v) for v in got]
    if keys == want:
        return CORRECT
    wanted = "nothing" if expected is None else _shown([expected["value"]])
    what = f"expected {wanted}, got {_shown(got)}"
    stale = {value_key(v) for v in question.get("stale", [])}
    forbidden = {value_key(v) for v in question.get("forbidden", [])}
    if any(k in stale for k in keys):
        return miss(F.R3, f"{what} (a superseded or outdated value)", stale=True)
    if any(k in forbidden for k in keys):
        return miss(F.R3, f"{what} (a value not in force at that time)")
    if want and want[0] not in keys:
        if not keys:
            return miss(F.R2, what)
        confusable = {value_key(v) for v in question.get("confusable", [])}
        why = " (a look-alike's value)" if any(k in confusable for k in keys) else ""
        return miss(F.R3, f"{what}{why}")
    return miss(F.R3, f"{what} (more than the one value)")


def _path_key(path: dict[str, Any]) -> str:
    return json.dumps(
        {"nodes": [n.lower() for n in path["nodes"]], "predicates": list(path["predicates"])}
    )


def _path_text(path: dict[str, Any]) -> str:
    nodes, predicates = path["nodes"], path["predicates"]
    parts = [nodes[0]] if nodes else []
    for index, predicate in enumerate(predicates):
        parts.append(f"-{predicate}->")
        parts.append(nodes[index + 1] if index + 1 < len(nodes) else "?")
    return " ".join(parts)


def judge_paths(question: dict[str, Any], got: Sequence[dict[str, Any]]) -> Verdict:
    want = sorted(_path_key(p) for p in question["expect"])
    keys = sorted(_path_key(p) for p in got)
    if keys == want:
        return CORRECT
    shown = "; ".join(_path_text(p) for p in got) or "no path"
    expected = "; ".join(_path_text(p) for p in question["expect"]) or "no path"
    what = f"expected {expected}, got {shown}"
    forbidden = {_path_key(p) for p in question.get("forbidden", [])}
    if any(k in forbidden for k in keys):
        return miss(F.R3, f"{what} (through a relation not valid at that time)")
    if not set(want) <= set(keys):
        return miss(F.R2 if not keys else F.R3, what)
    return miss(F.R3, f"{what} (paths that are not there)")


@dataclass
class Tally:
    """One item's answers."""

    planned: dict[str, int]
    correct: Counter = field(default_factory=Counter)
    stale: int = 0
    misses: list[tuple[str, Verdict]] = field(default_factory=list)

    def record(self, question: dict[str, Any], label: str, verdict: Verdict) -> None:
        if verdict.ok:
            self.correct[question["metric"]] += 1
            return
        self.stale += verdict.stale
        self.misses.append((label, verdict))

    def metrics(self) -> dict[str, Any]:
        metrics: dict[str, Any] = {
            "correct": dict(sorted(self.correct.items())),
            "stale": self.stale,
        }
        if self.misses:
            metrics["misses"] = [
                {"q": label, "code": verdict.code, "stale": verdict.stale}
                for label, verdict in self.misses[:MISSES_KEPT]
            ]
        return metrics

    def outcome(self) -> dict[str, Any]:
        """The item's metrics if every answer was right; raises ItemFailure otherwise,
        with the first miss's code."""
        if not self.misses:
            return self.metrics()
        label, first = self.misses[0]
        detail = f"{label}: {first.detail}"
        if len(self.misses) > 1:
            codes = ", ".join(verdict.code for _, verdict in self.misses[1:])
            detail += f" (and {len(self.misses) - 1} more: {codes})"
        raise ItemFailure(first.code, detail, metrics=self.metrics())


# ------------------------------------------------------------ C6, through recall

IN_FORCE = ("current", "contested")


def _facts(answer: Answer) -> list[Hit]:
    return [hit for hit in answer.evidence if hit.kind == "fact"]


def _of_pair(hit: Hit, question: dict[str, Any]) -> bool:
    subject = hit.obj.get("subject")
    name = subject.get("name") if isinstance(subject, dict) else subject
    return (
        str(name).lower() == question["subject"].lower()
        and hit.obj.get("predicate") == question["predicate"]
    )


def _currentness(hit: Hit) -> Any:
    return hit.memory_status.get("currentness")


def _fact_text(hit: Hit) -> str:
    return f"{hit.describe()} ({_currentness(hit)})"


def judge_recall_stale(answer: Answer, question: dict[str, Any]) -> Verdict:
    """No superseded or ended value of the pair asked is presented as in force."""
    if problem := recall_refused(answer):
        return problem
    stale = [
        hit
        for hit in _facts(answer)
        if _of_pair(hit, question)
        and _currentness(hit) in IN_FORCE
        and any(same(hit.obj.get("value"), v) for v in question["stale"])
    ]
    if stale:
        return miss(F.R3, f"{_fact_text(stale[0])} presented as in force", stale=True)
    return CORRECT


def judge_recall_found(answer: Answer, question: dict[str, Any]) -> Verdict:
    """The current value is the first fact, and marked current."""
    if problem := recall_refused(answer):
        return problem
    facts = _facts(answer)
    if not facts:
        chosen, rule = answer.route.get("chosen"), answer.route.get("rule")
        if chosen != "current_fact":
            return miss(F.R1, f"routed to {chosen!r} (by {rule!r}); no fact came back")
        if answer.abstained:
            return miss(F.R2, "the recall abstained, but the value is stored")
        return miss(F.R2, "no fact among the evidence")
    expected = question["expect"]["value"]
    ranks = [
        rank
        for rank, hit in enumerate(facts, start=1)
        if _of_pair(hit, question) and same(hit.obj.get("value"), expected)
    ]
    first = facts[0]
    if ranks[:1] == [1]:
        if _currentness(first) == "current":
            return CORRECT
        return miss(F.U0, f"the current value came back marked {_currentness(first)!r}")
    if ranks:
        return miss(F.R3, f"{_fact_text(first)} came first; the current value ranked {ranks[0]}")
    return miss(F.R2, f"the current value is not among the evidence (first: {_fact_text(first)})")


def judge_recall_false_answer(answer: Answer, question: dict[str, Any]) -> Verdict:
    """Nothing current to find: no fact presented as in force (the pair's own
    old values are `stale`'s to judge)."""
    if problem := recall_refused(answer):
        return problem
    given = [
        hit
        for hit in _facts(answer)
        if _currentness(hit) in IN_FORCE
        and not (
            _of_pair(hit, question)
            and any(same(hit.obj.get("value"), v) for v in question["stale"])
        )
    ]
    if given:
        return miss(F.R3, f"answered {_fact_text(given[0])}; nothing of the kind is in force")
    return CORRECT


RECALL_JUDGES = {
    "stale": judge_recall_stale,
    "found": judge_recall_found,
    "false_answer": judge_recall_false_answer,
}


def failing_checks(split: str) -> tuple[str, ...]:
    """The C6 checks an item fails on (the module says why)."""
    return ("stale", "false_answer", "found") if split == "seen" else ("stale", "false_answer")


def _held(outcome: ItemOutcome, check: str) -> bool:
    """A check the item planned held; an item that could not ask held none."""
    return bool(outcome.metrics.get("held", {}).get(check, False))


def recall_metrics(outcomes: Sequence[ItemOutcome]) -> dict[str, float]:
    """C6's rates: recall_stale_as_current_rate over every item with an old
    value (answered or ended), both vocabularies; per vocabulary (seen, and
    _held_out), recall_current_found_rate over the items with a current
    value and recall_false_answer_rate over the items with none."""
    c6 = [o for o in outcomes if o.metrics.get("kind") == "C6"]

    def rate(check: str, *, failed: bool, split: str | None = None) -> float | None:
        items = [
            o
            for o in c6
            if check in o.metrics.get("checks", ())
            and (split is None or o.metrics.get("split") == split)
        ]
        if not items:
            return None
        held = sum(_held(o, check) for o in items)
        return (len(items) - held if failed else held) / len(items)

    rates = {
        "recall_stale_as_current_rate": rate("stale", failed=True),
        "recall_current_found_rate": rate("found", failed=False, split="seen"),
        "recall_current_found_rate_held_out": rate("found", failed=False, split="held_out"),
        "recall_false_answer_rate": rate("false_answer", failed=True, split="seen"),
        "recall_false_answer_rate_held_out": rate("false_answer", failed=True, split="held_out"),
    }
    return {name: value for name, value in rates.items() if value is not None}


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    """Accuracy per metric over every planned answer, the stale value rate over
    all of them, and current_fact_accuracy (DESIGN §9's caps' name) = current_value_accuracy;
    then C6's rates (recall_metrics)."""
    planned, correct = counted(outcomes)
    stale = sum(outcome.metrics.get("stale", 0) for outcome in outcomes)
    metrics = {
        METRIC_NAMES[metric]: correct[metric] / planned[metric]
        for metric in METRICS
        if planned[metric]
    }
    answers = sum(planned.values())
    if answers:
        metrics["stale_value_rate"] = stale / answers
    if "current_value_accuracy" in metrics:
        metrics["current_fact_accuracy"] = metrics["current_value_accuracy"]
    metrics.update(recall_metrics(outcomes))
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)
