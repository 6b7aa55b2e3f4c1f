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
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...registry import ItemFailure, ItemOutcome, SuiteSummary, pass_rate
from ...taxonomy import FailureCode as F
from .draw import METRICS, value_key

METRIC_NAMES = {metric: f"{metric}_accuracy" for metric in METRICS}
MISSES_KEPT = 10


@dataclass(frozen=True)
class Verdict:
    ok: bool
    code: str = ""
    stale: bool = False
    detail: str = ""


CORRECT = Verdict(True)


def miss(code: F, detail: str, *, stale: bool = False) -> Verdict:
    return Verdict(False, str(code), stale, detail)


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


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    """Accuracy per metric over every planned answer, the stale value rate over
    all of them, and current_fact_accuracy (DESIGN §9's caps' name) = current_value_accuracy."""
    planned: Counter = Counter()
    correct: Counter = Counter()
    stale = 0
    for outcome in outcomes:
        item_planned = outcome.metrics.get("planned", {})
        planned.update(item_planned)
        for metric, count in outcome.metrics.get("correct", {}).items():
            correct[metric] += min(count, item_planned.get(metric, 0))
        stale += outcome.metrics.get("stale", 0)
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
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)
