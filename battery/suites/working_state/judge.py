"""Suite A's grading: one verdict per check, tallied per item and per suite.

A critical field of the resumed checkpoint is classified in this order:
1. exactly the value written last (JSON-equal; true is not 1): correct;
2. no checkpoint, or the field is gone: R0 (state lost);
3. an earlier version's value: R1, stale;
4. a neighbour thread's value: R1, crossed;
5. anything else: R1.

An external dependency older than its freshness that the resume does not list
for re-checking is A0 (not surfaced); a fresh one it lists is R1 (a wrong
answer). The suite's metrics count checks, not items: an item that could not
run counts every check it planned as wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...judging import CORRECT, Verdict, counted, miss, same, shown
from ...registry import ItemOutcome, SuiteSummary, pass_rate
from ...taxonomy import FailureCode as F


def judge_field(
    name: str,
    expected: Any,
    state: dict[str, Any] | None,
    *,
    earlier: Sequence[dict[str, Any]] = (),
    neighbours: Sequence[dict[str, Any]] = (),
) -> Verdict:
    if state is None:
        return miss(F.R2, "the resume returned no checkpoint")
    if name not in state:
        return miss(F.R2, f"the field is gone (expected {shown(expected)})")
    got = state[name]
    if same(got, expected):
        return CORRECT
    what = f"expected {shown(expected)}, got {shown(got)}"
    if any(name in version and same(got, version[name]) for version in earlier):
        return miss(F.R3, f"{what} (an earlier version's value)")
    if any(name in version and same(got, version[name]) for version in neighbours):
        return miss(F.R3, f"{what} (another thread's value)")
    # neither an earlier version's nor a neighbour's: the value was written wrongly
    return miss(F.W0, what)


def judge_recheck(check: dict[str, Any], recheck: Sequence[Any]) -> Verdict:
    listed = any(
        isinstance(entry, dict)
        and entry.get("name") == check["name"]
        and entry.get("kind") == check["kind"]
        for entry in recheck
    )
    if listed == check["stale"]:
        return CORRECT
    watched = check.get("freshness") in ("changed", "watched_unchanged", "changed_before_check")
    if check["stale"]:
        if watched:
            return miss(
                F.R0, "the fact it watches changed during the handover, but not listed for re-check"
            )
        return miss(F.R0, "older than its freshness at the resume, but not listed for re-check")
    # a false alarm of the same need-to-look decision
    if watched:
        return miss(F.R0, "its fact did not change after its last check, but listed for re-check")
    return miss(F.R0, "still fresh at the resume, but listed for re-check")


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    """working_state_exactness: critical fields exact after the handover, over
    every field planned; handover_retention: handovers after which the whole
    checkpoint came back and the successor held the thread, over every item;
    recheck_accuracy: external dependencies rightly listed or not."""
    planned, correct = counted(outcomes)
    metrics: dict[str, float] = {}
    if planned["field"]:
        metrics["working_state_exactness"] = correct["field"] / planned["field"]
    handovers = [o for o in outcomes if o.metrics.get("planned", {}).get("handover")]
    if handovers:
        metrics["handover_retention"] = sum(
            o.metrics.get("retained") is True for o in handovers
        ) / len(handovers)
    if planned["recheck"]:
        metrics["recheck_accuracy"] = correct["recheck"] / planned["recheck"]
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)
