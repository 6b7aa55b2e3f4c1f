"""Suite F's metrics: counts over every check planned (an item that could not
run counts each of its checks as failed).

* erasure_residue: erased tokens still shown by a read path (gate: 0);
* regenerated: erased tokens back after the rebuilds, the re-embed, the
  sweep, or a retried write not refused (gate: 0);
* collateral_loss: memories not asked to go (the twins', the item's other
  kinds, another agent's copy) no longer found (gate: 0);
* receipts_clean: erasures whose receipt says completed with no residue (gate: 1);
* the same counts for the held-out vocabulary's items (`_held_out`), reported
  on their own;
* current_fact_accuracy: the twins' facts still current after the erasures
  around them — the caps of DESIGN §9 read it with the other suites'.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...registry import ItemOutcome, SuiteSummary, pass_rate
from ..working_state.judge import counted


def _counts(outcomes: Sequence[ItemOutcome], suffix: str = "") -> dict[str, float]:
    planned, correct = counted(outcomes)
    metrics: dict[str, float] = {}
    for metric in ("residue", "regenerated", "collateral"):
        if planned[metric]:
            missed = planned[metric] - correct[metric]
            name = {"residue": "erasure_residue", "collateral": "collateral_loss"}.get(
                metric, metric
            )
            metrics[name + suffix] = float(missed)
    if planned["receipt"]:
        metrics["receipts_clean" + suffix] = correct["receipt"] / planned["receipt"]
    return metrics


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    metrics = _counts(outcomes)
    held_out = [o for o in outcomes if o.metrics.get("held_out")]
    if held_out:
        metrics.update(_counts(held_out, "_held_out"))
    # Each item checks its twin's fact on two paths (current and chain); an
    # item that could not run counts both as wrong.
    asked = sum(2 for o in outcomes)
    if asked:
        right = sum(o.metrics.get("twin_facts_right", 0) for o in outcomes)
        metrics["current_fact_accuracy"] = right / asked
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)
