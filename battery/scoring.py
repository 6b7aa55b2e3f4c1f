"""Scores and gates (DESIGN.md §9). Pure functions: outcomes in, numbers out.

* A suite's score is its pass rate × 100 unless the suite summarises itself.
* The total is the weight-averaged score of the suites with weight > 0; when
  only weight-0 suites ran (L alone), it is their combined pass rate × 100.
* Gates: every suite's minimum pass rate, its metric gates (bounds on named
  metrics it reports; a gated metric it did not report fails), and the caps,
  which look at named metrics suites report. A cap whose metrics no suite
  reported is not gated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .registry import ItemOutcome, MetricGate, Suite


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

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Scorecard:
    total: float  # after caps
    uncapped_total: float
    gates: list[Gate]
    metrics: dict[str, float]

    @property
    def passed(self) -> bool:
        return all(gate.passed for gate in self.gates)


def weighted_total(results: Sequence[SuiteResult]) -> float:
    weighted = [r for r in results if r.weight > 0]
    if weighted:
        return sum(r.weight * r.score for r in weighted) / sum(r.weight for r in weighted)
    items = sum(r.items for r in results)
    return 100 * sum(r.passed for r in results) / items if items else 0.0


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


def score_run(results: Sequence[SuiteResult]) -> Scorecard:
    uncapped = weighted_total(results)
    metrics = reported_metrics(results)
    gates = [gate for result in results for gate in (_suite_gate(result), *_metric_gates(result))]
    total = uncapped
    for cap in CAPS:
        measured = {name: metrics[name] for name in cap.metrics if name in metrics}
        if not measured:
            continue
        low = [name for name, value in measured.items() if value < cap.threshold]
        values = "; ".join(f"{name} {value:.3g}" for name, value in measured.items())
        if low:
            total = min(total, cap.ceiling)
            detail = f"{values}; below {cap.threshold:g}: {', '.join(low)}; total capped at {cap.ceiling:g}"
        else:
            detail = values
        unreported = [name for name in cap.metrics if name not in measured]
        if unreported:
            detail += f" (not reported: {', '.join(unreported)})"
        gates.append(Gate(name=cap.name, kind="cap", passed=not low, detail=detail))
    return Scorecard(total=total, uncapped_total=uncapped, gates=gates, metrics=metrics)
