"""Judging primitives the suites share: a verdict per check, a tally of an
item's verdicts, and the counts over a suite's outcomes.

A suite's judge module classifies what came back into verdicts (its own
rules, its own failure codes); what is here knows nothing of any suite.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .registry import ItemFailure, ItemOutcome
from .taxonomy import FailureCode

MISSES_KEPT = 10  # misses an item's metrics keep, first ones first


@dataclass(frozen=True)
class Verdict:
    """One check: right, or a miss with its failure code and what was wrong.
    `stale` marks a miss that showed a superseded value (suite C counts them)."""

    ok: bool
    code: str = ""
    detail: str = ""
    stale: bool = field(default=False, kw_only=True)


CORRECT = Verdict(True)


def miss(code: FailureCode, detail: str, *, stale: bool = False) -> Verdict:
    return Verdict(False, str(code), detail, stale=stale)


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
    """A value as JSON for a failure's detail, cut at `limit` characters."""
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
