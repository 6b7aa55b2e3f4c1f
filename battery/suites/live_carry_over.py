"""Suite H — live carry-over (DESIGN.md §9), from what real agents did.

Not a drill: no throwaway agent, no simulated clock. The figures come from
the telemetry the service records while agents that are not the battery's
work (recall.live): the open items at each handover in the window
(PIPER_LIVE_WINDOW_DAYS, default 7) and whether the successor's resume
showed them and they were then done; skill runs, reuse across sessions and
matches followed; reads retrieved without use; answers marked stale; "do I
need to look?" decisions.

Two items, one per gated figure, over every live agent pooled (each agent's
figures are in the item's metrics): open items surfaced to the successor
>= 90%, and open items executed after the succession >= 90% (the issue's
gate). The other figures are reported in the suite's metrics, not gated: a
deployment that never gives feedback or never runs a skill has nothing to
measure there, and a gate on nothing would fail it for that.

With no open item at any succession in the window (or none judged yet),
there is nothing to measure: the suite does not run, and the battery run is
incomplete, never passed.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from recall.live import LiveReport, live_report

from ..registry import (
    ItemFailure,
    ItemOutcome,
    MetricGate,
    Suite,
    SuiteSummary,
    pass_rate,
    register,
)
from ..runner import ItemContext
from ..taxonomy import FailureCode as F

SURVIVAL_GATE = 0.90
EXECUTION_GATE = 0.90
REPORTED = (
    "open_item_survival_rate",
    "open_item_execution_rate",
    "skill_success_rate",
    "skill_reuse_rate",
    "skill_follow_rate",
    "retrieval_without_use_rate",
    "feedback_coverage",
    "stale_answer_rate",
    "look_rate",
    "missed_look_rate",
)


@functools.lru_cache(maxsize=4)
def _report_of_run(run_id) -> LiveReport:
    """One report per battery run: both items judge the same figures."""
    return live_report()


def nothing_to_measure() -> str | None:
    report = live_report()
    total = report.total
    window = f"the last {(report.window.end - report.window.start).days} days"
    if not report.per_agent:
        return f"no live use in {window}: no agent but the battery's used memory"
    if not total.open_items or not total.items_judged:
        return (
            f"no carry-over to judge in {window}: {total.successions} handovers of "
            f"{len(report.per_agent)} live agents, {total.open_items} open items judged for "
            f"survival, {total.items_judged} for execution ({total.not_yet_due} not due yet, "
            f"{total.executing} being executed, "
            f"{total.in_flight} in handovers not resumed yet)"
        )
    return None


def _per_agent(report: LiveReport, numerator: str, denominator: str) -> dict:
    return {
        figures.agents[0]: [getattr(figures, numerator), getattr(figures, denominator)]
        for figures in report.per_agent
        if getattr(figures, denominator)
    }


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    """Every figure the items measured (the report's pooled rates)."""
    metrics: dict[str, float] = {}
    for outcome in outcomes:
        for name, value in outcome.metrics.get("rates", {}).items():
            if name in REPORTED and value is not None:
                metrics[name] = value
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)


suite = register(
    Suite(
        code="H",
        name="Live carry-over",
        description=(
            "From real agents' telemetry over the live-use window: open items at each "
            "succession shown to the successor and then done; skill reuse and success, reads "
            "retrieved without use, stale answers and missed looks reported."
        ),
        weight=0,
        gate=1.0,
        summarize=summarize,
        metric_gates=(
            MetricGate("open_item_survival_rate", minimum=SURVIVAL_GATE),
            MetricGate("open_item_execution_rate", minimum=EXECUTION_GATE),
        ),
        unavailable=nothing_to_measure,
    )
)


def _judge(ctx: ItemContext, *, numerator: str, denominator: str, gate: float, code: F, what: str):
    report = _report_of_run(ctx.run_id)
    total = report.total
    rates = total.rates()
    metrics = {
        "rates": rates,
        "counts": {k: v for k, v in total.as_dict().items() if k not in ("agents", "rates")},
        "agents": _per_agent(report, numerator, denominator),
        "window": report.as_dict()["window"],
    }
    done, of = getattr(total, numerator), getattr(total, denominator)
    if not of:
        raise ItemFailure(code, f"{what}: nothing to judge in the window", metrics=metrics)
    if done / of < gate:
        worst = sorted(metrics["agents"].items(), key=lambda kv: kv[1][0] / kv[1][1])[:3]
        raise ItemFailure(
            code,
            f"{what}: {done}/{of} ({done / of:.0%}), below {gate:.0%}; lowest: "
            + ", ".join(f"{name} {n}/{d}" for name, (n, d) in worst),
            metrics=metrics,
        )
    return metrics


@suite.item(
    "open_items_surfaced",
    "Open items at a succession are shown by the successor's resume",
    default_code=F.R2,
)
def open_items_surfaced(ctx: ItemContext):
    return _judge(
        ctx,
        numerator="surfaced",
        denominator="open_items",
        gate=SURVIVAL_GATE,
        code=F.R2,
        what="open items shown to the successor",
    )


@suite.item(
    "open_items_executed",
    "Open items at a succession are done after it (not lapsed, not left overdue)",
    default_code=F.P0,
)
def open_items_executed(ctx: ItemContext):
    return _judge(
        ctx,
        numerator="executed",
        denominator="items_judged",
        gate=EXECUTION_GATE,
        code=F.P0,
        what="open items executed after the succession",
    )
