"""Scores and gates (DESIGN.md §9). Pure functions: outcomes in, numbers out.

* A suite's score is its pass rate × 100 unless the suite summarises itself.
* The total is computed over every designed suite (registry.designed_suites):
  the weight-averaged score of those with weight > 0, where a suite that did
  not run (not selected, crashed, not registered) counts 0 and makes the run
  incomplete. When no designed suite carries weight, it is the combined pass
  rate × 100 of the suites that ran.
* total_of_run is the same average over the suites that ran only: what they
  scored, never the battery's total when the run is incomplete.
* Gates: every suite's minimum pass rate, its metric gates (bounds on named
  metrics it reports; a gated metric it did not report fails), and the caps,
  which look at named metrics suites report. A cap applies when a metric is
  below its threshold, and also when one was not reported (fail closed): an
  unmeasured metric never lifts a cap. The caps a measured metric triggered
  also bound total_of_run.
* Status: failed when a gate failed on what was measured (or for want of a
  metric in a complete run); otherwise incomplete when a designed suite did
  not run; passed only when every designed suite ran and every gate held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .registry import DesignedSuite, ItemOutcome, MetricGate, Suite


@dataclass(frozen=True)
class Cap:
    ceiling: float
    threshold: float
    metrics: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"cap {self.ceiling:g}: {', '.join(self.metrics)} >= {self.threshold:g}"


CAPS: tuple[Cap, ...] = (
    Cap(
        ceiling=70,
        threshold=0.6,
        metrics=("current_fact_accuracy", "procedure_execution", "handover_retention"),
    ),
    Cap(
        ceiling=85,
        threshold=0.8,
        metrics=(
            "current_fact_accuracy",
            "as_of_accuracy",
            "cancelled_intention_suppression",
            "negative_transfer_safety",
        ),
    ),
)


@dataclass(frozen=True)
class SuiteResult:
    code: str
    name: str
    weight: float
    gate: float
    items: int
    passed: int
    score: float
    metrics: dict[str, float] = field(default_factory=dict)
    metric_gates: tuple[MetricGate, ...] = ()

    @property
    def pass_rate(self) -> float:
        return self.passed / self.items if self.items else 0.0

    @property
    def pass_rate_held(self) -> bool:
        return self.items > 0 and self.pass_rate >= self.gate

    @property
    def gate_passed(self) -> bool:
        """Every gate of the suite held: its pass rate and each metric gate."""
        return self.pass_rate_held and all(
            gate.holds(self.metrics.get(gate.metric)) for gate in self.metric_gates
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weight": self.weight,
            "gate": self.gate,
            "items": self.items,
            "passed": self.passed,
            "pass_rate": self.pass_rate,
            "score": round(self.score, 2),
            "gate_passed": self.gate_passed,
            "metrics": self.metrics,
        }


def suite_result(*, suite: Suite, outcomes: Sequence[ItemOutcome]) -> SuiteResult:
    summary = suite.summarize(outcomes)
    if not 0 <= summary.score <= 100:
        raise ValueError(
            f"suite {suite.code} summarised a score of {summary.score}; scores are 0-100"
        )
    return SuiteResult(
        code=suite.code,
        name=suite.name,
        weight=suite.weight,
        gate=suite.gate,
        items=len(outcomes),
        passed=sum(o.passed for o in outcomes),
        score=summary.score,
        metrics=dict(summary.metrics),
        metric_gates=tuple(suite.metric_gates),
    )


@dataclass(frozen=True)
class Gate:
    name: str
    kind: str  # "suite" (pass rate), "metric" (a suite's metric gate) or "cap"
    passed: bool
    detail: str
    # Failed only because a metric it needs was not reported (no measured value failed it).
    fail_closed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "passed": self.passed,
            "detail": self.detail,
            "fail_closed": self.fail_closed,
        }


# Why a designed suite has no result.
NOT_SELECTED = "not_selected"  # the run was restricted (--suite) to other suites
NOT_REGISTERED = "not_registered"  # designed, but no module registers it
CRASHED = "crashed"  # it broke outside its items; its items stored so far are kept
NOTHING_TO_MEASURE = "nothing_to_measure"  # e.g. suite H with no live use in its window
NOT_RUN = "not_run"  # no reason given

MISSING_REASONS = {
    NOT_SELECTED: "not selected",
    NOT_REGISTERED: "not registered",
    CRASHED: "crashed",
    NOTHING_TO_MEASURE: "nothing to measure",
    NOT_RUN: "not run",
}


@dataclass(frozen=True)
class MissingSuite:
    """A designed suite that did not run: it counts 0 in the total."""

    code: str
    name: str
    weight: float
    reason: str  # a key of MISSING_REASONS
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "weight": self.weight,
            "reason": self.reason,
            "detail": self.detail,
        }


PASSED, FAILED, INCOMPLETE = "passed", "failed", "incomplete"  # BatteryRun.Status values


@dataclass(frozen=True)
class Scorecard:
    total: float  # over every designed suite (one that did not run counts 0), after caps
    uncapped_total: float
    total_of_run: float  # over the suites that ran only, after the caps their metrics triggered
    gates: list[Gate]
    metrics: dict[str, float]
    missing: list[MissingSuite] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.missing

    @property
    def failed(self) -> bool:
        """A gate failed on what was measured. A cap failing closed for a metric
        nobody reported counts as a failure only when every designed suite ran."""
        return any(
            not gate.passed and not (gate.fail_closed and self.missing) for gate in self.gates
        )

    @property
    def passed(self) -> bool:
        return self.complete and all(gate.passed for gate in self.gates)

    @property
    def status(self) -> str:
        if self.failed:
            return FAILED
        return INCOMPLETE if self.missing else PASSED


def weighted_total(results: Sequence[SuiteResult]) -> float:
    """The weight-averaged score of the results given (with no weight among
    them, their combined pass rate × 100). Over the suites that ran, this is
    total_of_run, not the battery's total: see designed_total."""
    weighted = [r for r in results if r.weight > 0]
    if weighted:
        return sum(r.weight * r.score for r in weighted) / sum(r.weight for r in weighted)
    items = sum(r.items for r in results)
    return 100 * sum(r.passed for r in results) / items if items else 0.0


def designed_total(results: Sequence[SuiteResult], missing: Sequence[MissingSuite]) -> float:
    """The weight-averaged score over the suites that ran and those that did
    not, which count 0. A weight-0 suite never moves it (its absence still
    makes the run incomplete); with no weight anywhere, weighted_total."""
    weight = sum(r.weight for r in results if r.weight > 0) + sum(
        m.weight for m in missing if m.weight > 0
    )
    if not weight:
        return weighted_total(results)
    return sum(r.weight * r.score for r in results if r.weight > 0) / weight


def suites_missing(
    results: Sequence[SuiteResult],
    *,
    designed: Sequence[DesignedSuite],
    absent: Sequence[MissingSuite] = (),
) -> list[MissingSuite]:
    """Every designed suite without a result, in code order, as `absent` explains
    it (else NOT_RUN), and every suite in `absent` (a crashed one may be outside
    the design). A suite with a result is never missing."""
    ran = {result.code for result in results}
    explained = {suite.code: suite for suite in absent if suite.code not in ran}
    for suite in designed:
        if suite.code not in ran and suite.code not in explained:
            explained[suite.code] = MissingSuite(
                code=suite.code, name=suite.name, weight=suite.weight, reason=NOT_RUN
            )
    return [explained[code] for code in sorted(explained)]


def reported_metrics(results: Sequence[SuiteResult]) -> dict[str, float]:
    """Every named metric any suite reported; where two report one, the lower counts."""
    metrics: dict[str, float] = {}
    for result in results:
        for name, value in result.metrics.items():
            metrics[name] = min(value, metrics.get(name, value))
    return metrics


def _suite_gate(result: SuiteResult) -> Gate:
    return Gate(
        name=f"{result.code} pass rate >= {result.gate:.0%}",
        kind="suite",
        passed=result.pass_rate_held,
        detail=f"{result.passed}/{result.items} items passed ({result.pass_rate:.1%})",
    )


def _metric_gates(result: SuiteResult) -> list[Gate]:
    gates = []
    for gate in result.metric_gates:
        value = result.metrics.get(gate.metric)
        gates.append(
            Gate(
                name=f"{result.code} {gate.name}",
                kind="metric",
                passed=gate.holds(value),
                detail="not reported" if value is None else f"{gate.metric} {value:.4g}",
            )
        )
    return gates


def _cap_gate(cap: Cap, metrics: dict[str, float]) -> Gate:
    measured = {name: metrics[name] for name in cap.metrics if name in metrics}
    low = [name for name, value in measured.items() if value < cap.threshold]
    unreported = [name for name in cap.metrics if name not in measured]
    parts = [f"{name} {value:.3g}" for name, value in measured.items()]
    if low:
        parts.append(f"below {cap.threshold:g}: {', '.join(low)}")
    if unreported:
        parts.append(f"not reported: {', '.join(unreported)}, so the cap applies (fail closed)")
    if low or unreported:
        parts.append(f"total capped at {cap.ceiling:g}")
    return Gate(
        name=cap.name,
        kind="cap",
        passed=not (low or unreported),
        detail="; ".join(parts),
        fail_closed=bool(unreported) and not low,
    )


def score_run(
    results: Sequence[SuiteResult],
    *,
    designed: Sequence[DesignedSuite],
    absent: Sequence[MissingSuite] = (),
) -> Scorecard:
    """Score a run over every designed suite. `results` are the suites that
    ran; `absent` says why others did not (see suites_missing)."""
    missing = suites_missing(results, designed=designed, absent=absent)
    uncapped = designed_total(results, missing)
    metrics = reported_metrics(results)
    gates = [gate for result in results for gate in (_suite_gate(result), *_metric_gates(result))]
    total, total_of_run = uncapped, weighted_total(results)
    for cap in CAPS:
        gate = _cap_gate(cap, metrics)
        if not gate.passed:
            total = min(total, cap.ceiling)
            if not gate.fail_closed:
                total_of_run = min(total_of_run, cap.ceiling)
        gates.append(gate)
    return Scorecard(
        total=total,
        uncapped_total=uncapped,
        total_of_run=total_of_run,
        gates=gates,
        metrics=metrics,
        missing=missing,
    )
