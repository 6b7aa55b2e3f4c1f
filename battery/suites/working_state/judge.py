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

Verdict, miss and Tally are shared with suite E.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...registry import ItemFailure, ItemOutcome, SuiteSummary, pass_rate
from ...taxonomy import FailureCode as F

MISSES_KEPT = 10


@dataclass(frozen=True)
class Verdict:
    ok: bool
    code: str = ""
    detail: str = ""


CORRECT = Verdict(True)


def miss(code: F, detail: str) -> Verdict:
    return Verdict(False, str(code), detail)


def same(a: Any, b: Any) -> bool:
    """Equal as JSON: key order aside, true is not 1 and 1 is not "1"."""
    return _key(a) == _key(b)


def _key(value: Any) -> str:
    def tag(v: Any) -> Any:
        if isinstance(v, bool):
            return {"bool": v}
        if isinstance(v, dict):
            return {k: tag(x) for k, x in v.items()}
        if isinstance(v, list):
            return [tag(x) for x in v]
        return v

    return json.dumps(tag(value), sort_keys=True, ensure_ascii=False)


def shown(value: Any, *, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass
class Tally:
    """One item's verdicts, counted per metric."""

    planned: dict[str, int]
    correct: Counter = field(default_factory=Counter)
    misses: list[tuple[str, str, Verdict]] = field(default_factory=list)  # (metric, label, verdict)

    def record(self, metric: str, label: str, verdict: Verdict) -> None:
        if verdict.ok:
            self.correct[metric] += 1
        else:
            self.misses.append((metric, label, verdict))

    def missed(self, *metrics: str) -> bool:
        return any(metric in metrics for metric, _, _ in self.misses)

    def metrics(self, **extra: Any) -> dict[str, Any]:
        metrics: dict[str, Any] = {"correct": dict(sorted(self.correct.items())), **extra}
        if self.misses:
            metrics["misses"] = [
                {"q": label, "code": verdict.code}
                for _, label, verdict in self.misses[:MISSES_KEPT]
            ]
        return metrics

    def outcome(self, **extra: Any) -> dict[str, Any]:
        """The item's metrics if every check held; raises ItemFailure otherwise,
        with the first miss's code."""
        if not self.misses:
            return self.metrics(**extra)
        _, label, first = self.misses[0]
        detail = f"{label}: {first.detail}"
        if len(self.misses) > 1:
            codes = ", ".join(verdict.code for _, _, verdict in self.misses[1:])
            detail += f" (and {len(self.misses) - 1} more: {codes})"
        raise ItemFailure(first.code, detail, metrics=self.metrics(**extra))


def counted(outcomes: Sequence[ItemOutcome]) -> tuple[Counter, Counter]:
    """Planned and correct checks per metric over every outcome (a crashed item
    counts what it planned, none of it correct)."""
    planned: Counter = Counter()
    correct: Counter = Counter()
    for outcome in outcomes:
        item_planned = outcome.metrics.get("planned", {})
        planned.update(item_planned)
        for metric, count in outcome.metrics.get("correct", {}).items():
            correct[metric] += min(count, item_planned.get(metric, 0))
    return planned, correct


# ----------------------------------------------------------------- suite A checks


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
