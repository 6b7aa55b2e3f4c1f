"""Suite E's grading: one verdict per check, against what the agent saw due
after each tick and what the ledger recorded as fired.

* recall: due at its step with the expected occurrence, else P0 (did not
  fire when due — late or never);
* quiet: not due at its step, else P1 (fired early or on a distractor);
* suppressed / zombie: a cancelled / completed intention is never due again
  from its step on and the ledger records no firing of it from then, else P1;
* settled (zombie): a dependent whose dependency was cancelled never fired
  and ended cancelled with a reason naming that dependency — left blocked (it
  could never fire) or fired, P1;
* once: no occurrence fired twice in the ledger, none that should not, else P1;
* handover (E5): not listed on resume, out of order, not pending: A0; a
  finished one listed: R3; not inherited by the successor: R0.

The suite's metrics count checks, not items: an item that could not run
counts every check it planned as wrong (a miss, or a false fire).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ...judging import CORRECT, Verdict, counted, miss
from ...registry import ItemOutcome, SuiteSummary, pass_rate
from ...taxonomy import FailureCode as F
from .draw import LAST, STEPS, iso

# What the agent saw due after the tick of each step: {intention id: occurrence},
# or the Verdict that explains why it could not be read.
DueByStep = Mapping[int, Mapping[str, int] | Verdict]
# What the ledger recorded as fired: {intention id: [(occurrence, fired_at)]}.
Firings = Mapping[str, Sequence[tuple[int, datetime | None]]]


def at(step: int) -> str:
    return f"step {step} ({iso(STEPS[step])})"


def judge_recall(
    intention_id: str, step: int, occurrence: int, due: DueByStep, *, tick_error: str = ""
) -> Verdict:
    seen = due.get(step)
    if isinstance(seen, Verdict):
        return seen
    if seen is None:
        return miss(F.R2, f"nothing was read at {at(step)}")
    if intention_id in seen and seen[intention_id] == occurrence:
        return CORRECT
    why = f" (the tick was refused: {tick_error})" if tick_error else ""
    if intention_id in seen:
        return miss(
            F.P0,
            f"due at {at(step)} with occurrence {seen[intention_id]}, not {occurrence}{why}",
        )
    late = [s for s in range(step + 1, LAST + 1) if _due_at(due, s, intention_id) == occurrence]
    when = f"; it came due only at {at(late[0])}" if late else ""
    return miss(F.P0, f"occurrence {occurrence} not due at {at(step)}{when}{why}")


def _due_at(due: DueByStep, step: int, intention_id: str) -> int | None:
    seen = due.get(step)
    return None if isinstance(seen, Verdict) or seen is None else seen.get(intention_id)


def judge_quiet(intention_id: str, step: int, why: str, due: DueByStep) -> Verdict:
    seen = due.get(step)
    if isinstance(seen, Verdict):
        return seen
    if seen is None:
        return miss(F.R2, f"nothing was read at {at(step)}")
    if intention_id not in seen:
        return CORRECT
    return miss(F.P1, f"due at {at(step)}, before its cue ({why})")


def judge_after(
    intention_id: str, step: int, due: DueByStep, firings: Firings | Verdict, *, what: str
) -> Verdict:
    """`what` ("cancelled", "completed") at `step`: never due again, never fired from then."""
    for later in range(step, LAST + 1):
        seen = due.get(later)
        if isinstance(seen, Verdict):
            return seen
        if seen is not None and intention_id in seen:
            return miss(F.P1, f"{what} at {at(step)}, but due again at {at(later)}")
    if isinstance(firings, Verdict):
        return firings
    again = [
        (occurrence, fired)
        for occurrence, fired in firings.get(intention_id, ())
        if fired is not None and fired >= STEPS[step]
    ]
    if again:
        occurrence, fired = again[0]
        return miss(
            F.P1,
            f"{what} at {at(step)}, but the ledger records it fired (occurrence "
            f"{occurrence}) at {iso(fired)}",
        )
    return CORRECT


def judge_settled(
    intention_id: str, dependency_id: str, answer: Any, status: int, firings: Firings | Verdict
) -> Verdict:
    """The intention waited on `dependency_id`, which was cancelled: it never
    fired, and it is cancelled (not left blocked), its last transition naming
    the dependency."""
    if isinstance(firings, Verdict):
        return firings
    fired = firings.get(intention_id, ())
    if fired:
        occurrence, when = fired[0]
        return miss(
            F.P1,
            f"its dependency was cancelled, but the ledger records it fired (occurrence "
            f"{occurrence}){f' at {iso(when)}' if when else ''}",
        )
    if status != 200 or not isinstance(answer, dict):
        return miss(F.R2, f"GET /intentions/{{id}} answered HTTP {status}")
    transitions = answer.get("transitions")
    last = transitions[-1] if isinstance(transitions, list) and transitions else {}
    reason = last.get("reason") if isinstance(last, dict) else None
    expected = f"dependency {dependency_id} cancelled"
    if answer.get("status") != "cancelled":
        return miss(
            F.P1,
            f"its dependency was cancelled, but it is {answer.get('status')!r} at the end: "
            "a zombie that can never fire",
        )
    if reason != expected:
        return miss(F.P1, f"cancelled with the reason {reason!r}, not {expected!r}")
    return CORRECT


def judge_once(
    intention_id: str, occurrences: Sequence[int], firings: Firings | Verdict
) -> Verdict:
    if isinstance(firings, Verdict):
        return firings
    counts = Counter(occurrence for occurrence, _ in firings.get(intention_id, ()))
    twice = sorted(o for o, n in counts.items() if n > 1)
    if twice:
        return miss(
            F.P1, f"the ledger records occurrence {twice[0]} fired {counts[twice[0]]} times"
        )
    unexpected = sorted(o for o in counts if o not in occurrences)
    if unexpected:
        return miss(
            F.P1,
            f"the ledger records occurrence {unexpected[0]} fired; only {list(occurrences)} should",
        )
    return CORRECT


# -------------------------------------------------------------------------- E5


def _ids(entries: Any, key: str = "id") -> list[str]:
    if not isinstance(entries, list):
        return []
    return [str(e.get(key)) for e in entries if isinstance(e, dict) and e.get(key) is not None]


def judge_listed(intention_id: str, package: Mapping[str, Any], *, listed: bool) -> Verdict:
    shown = intention_id in _ids(package.get("intentions"))
    if shown == listed:
        return CORRECT
    if listed:
        # not in the resume: not among what the successor was given
        return miss(F.R2, "an open intention the successor must see is not listed on resume")
    return miss(F.R3, "a completed intention is listed on resume as open")


def judge_order(groups: Sequence[Sequence[str]], package: Mapping[str, Any]) -> Verdict:
    """The intentions of `groups` (due, overdue, the rest) appear in that order."""
    listed = _ids(package.get("intentions"))
    positions = [[listed.index(i) for i in group if i in listed] for group in groups]
    names = ("due", "overdue", "others")
    for index, group in enumerate(positions):
        after = [p for later in positions[index + 1 :] for p in later]
        if group and after and max(group) > min(after):
            return miss(
                F.R3,
                f"the resume does not list due and overdue intentions first: "
                f"{names[index]} at positions {group}, later groups from {min(after)}",
            )
    return CORRECT


def judge_pending(intention_id: str, package: Mapping[str, Any]) -> Verdict:
    pending = package.get("pending")
    entries = pending if isinstance(pending, list) else []
    if any(
        isinstance(p, dict)
        and str(p.get("intention_id")) == intention_id
        and p.get("kind") == "fired"
        for p in entries
    ):
        return CORRECT
    return miss(F.R2, "the intention fired before the handover, but is not in the pending list")


def judge_inherited(answer: Any, status: int, session: str) -> Verdict:
    if status != 200 or not isinstance(answer, dict):
        return miss(F.R2, f"GET /intentions/{{id}} answered HTTP {status}")
    inherited = answer.get("inherited_by")
    if inherited == session:
        return CORRECT
    # the handover did not record who inherited it
    return miss(F.W0, f"inherited_by is {inherited!r}, not the successor {session!r}")


# --------------------------------------------------------------------- summary


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    """trigger_recall: cues that fired at their tick; false_fire_rate: quiet and
    exactly-once checks that failed; cancelled_intention_suppression: cancelled
    intentions never seen due or fired again; zombie_rate: completed ones that
    were, and dependents of a cancelled intention left blocked or fired;
    handover_retention: E5's handover checks and firings after it."""
    planned, correct = counted(outcomes)
    metrics: dict[str, float] = {}

    def rate(names: Sequence[str], *, failures: bool = False) -> float | None:
        total = sum(planned[n] for n in names)
        if not total:
            return None
        good = sum(correct[n] for n in names)
        return (total - good) / total if failures else good / total

    for name, value in (
        ("trigger_recall", rate(("recall", "handover_fire"))),
        ("false_fire_rate", rate(("quiet", "once"), failures=True)),
        ("cancelled_intention_suppression", rate(("suppressed",))),
        ("zombie_rate", rate(("zombie",), failures=True)),
        ("handover_retention", rate(("handover", "handover_fire"))),
    ):
        if value is not None:
            metrics[name] = value
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)
