"""Suite D's grading: one verdict per check, tallied per item and per suite.

A use (the agent matches a task, then executes the best applicable version)
is classified in this order:
1. the match was refused, or offered nothing: R0 (the skill was not found);
2. it offered the skill's superseded version first: R1 (stale);
3. it offered another skill first although this one applied: R2 (ranked
   below noise); another skill and not this one: S1 (misapplied);
4. the execution was refused, never finished, failed or its validator did
   not pass: S0;
5. the result is not the house rule's value: R1 if it is the superseded
   rule's value, S0 otherwise (D2: "failed again the same way" when it is
   what the failed attempt gave);
6. otherwise correct.

A probe (D5: a look-alike task a contraindication covers) is safe when match
offers nothing; if it offers anything the agent would execute it: S1,
misapplied. Safe but not listed among the near misses as contraindicated: R1.

An undeclared probe (D7: an inappropriate use no contraindication names)
passes when the service refuses it. Params of another domain than the
schema (`wrong_domain`): match cannot see params, so it may offer the skill,
but execute must refuse them (422 invalid_params); executed anyway, or
another skill offered first: S2 (negative transfer); refused for another
reason: S1. A precondition the context lacks or contradicts
(`precondition_unmet`): nothing may be offered (S2), and the skill must be a
near miss saying precondition_failed (else R2 when absent, A0 for another
reason). The trigger's words asked of an object of another kind
(`unsaid_misuse`): nothing may be offered (S2).

Counted besides the checks, for the suite's rates: every match the agent
acted on (decisions), the ones that executed a wrong or contraindicated skill
(misapplied), probes that stayed safe, and executions of a superseded version
after its revision (obsolete).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...judging import CORRECT, Verdict, counted, miss, shown
from ...registry import ItemOutcome, SuiteSummary, pass_rate
from ...taxonomy import FailureCode as F
from ...transport import ApiResponse
from . import api as skills_api

HELD_OUT_GATE = 0.95
MISAPPLIED_GATE = 0.01
OBSOLETE_GATE = 0
# D7's seen phrasings: what the service reaches, rounded down, so that a
# regression fails (docs/battery.md). The held-out rate is reported, not gated.
UNDECLARED_GATE = 0.66


@dataclass
class Run:
    """What happened to one use or probe: the match, the version the agent
    chose (the first applicable), the execute request and the execution."""

    match: ApiResponse | None = None
    chosen: dict[str, Any] | None = None
    requested: ApiResponse | None = None
    execution: dict[str, Any] | None = None

    @property
    def execution_id(self) -> str | None:
        if self.requested is None or self.requested.status not in (200, 202):
            return None
        return skills_api.id_of(self.requested.body)


@dataclass(frozen=True)
class Decision:
    """How one match the agent acted on is counted."""

    verdict: Verdict
    decided: bool  # the match answered, so the agent acted on it
    misapplied: bool = False


def _reasons(candidate: dict[str, Any]) -> str:
    types = [r.get("type", "?") for r in candidate.get("reasons") or [] if isinstance(r, dict)]
    return ", ".join(types) or "no reason given"


def _near_miss(match: Any, version_id: str) -> dict[str, Any] | None:
    for candidate in skills_api.candidates(match, "near_misses"):
        if str(candidate.get("version_id")) == version_id:
            return candidate
    return None


def judge_choice(run: Run, *, intended: str, superseded: str | None = None) -> Decision | None:
    """The match's verdict when it did not lead to the intended version; None when it did."""
    match = run.match
    if match is None or match.status != 200 or not isinstance(match.body, dict):
        what = match.describe() if match is not None else "never asked"
        return Decision(miss(F.S0, f"match refused: {what}"), decided=False)
    applicable = skills_api.candidates(match.body, "applicable")
    if not applicable:
        near = _near_miss(match.body, intended)
        why = f"rejected as {_reasons(near)}" if near else "not among the near misses"
        return Decision(miss(F.S0, f"no applicable skill; its version was {why}"), decided=True)
    chosen = str(applicable[0].get("version_id"))
    if chosen == intended:
        return None
    name = applicable[0].get("skill_name")
    if superseded is not None and chosen == superseded:
        return Decision(
            miss(F.R3, "match offered the superseded version first: the old rule"), decided=True
        )
    if any(str(c.get("version_id")) == intended for c in applicable):
        return Decision(
            miss(F.R3, f"ranked below {name!r}, which the agent then applied"),
            decided=True,
            misapplied=True,
        )
    return Decision(miss(F.S2, f"applied another skill, {name!r}"), decided=True, misapplied=True)


def judge_execution(
    run: Run, use: dict[str, Any], *, stale: str | None = None, naive: str | None = None
) -> Verdict:
    requested = run.requested
    if requested is None:
        return miss(F.S1, "never executed")
    if requested.status not in (200, 202):
        return miss(F.S1, f"execute refused: {requested.describe()}")
    execution = run.execution
    if not isinstance(execution, dict) or execution.get("status") != "finished":
        state = execution.get("status") if isinstance(execution, dict) else "unreadable"
        return miss(
            F.S1, f"the execution never finished ({state}): is a worker taking the sandbox queue?"
        )
    if execution.get("succeeded") is not True:
        error = str(execution.get("error") or "").strip().splitlines()
        return miss(
            F.S1,
            f"the execution failed: outcome {execution.get('outcome')!r}"
            + (f": {error[-1]}" if error else ""),
        )
    if execution.get("validator_passed") is not True:
        return miss(F.S1, f"the validator did not pass: {shown(execution.get('verdict'))}")
    result = execution.get("result")
    if result == use["expected"]:
        return CORRECT
    what = f"expected {shown(use['expected'])}, got {shown(result)}"
    if stale is not None and result == stale:
        return miss(F.R3, f"{what} (the superseded rule's value)")
    if naive is not None and result == naive:
        return miss(F.S1, f"{what} (failed again the same way)")
    return miss(F.S1, what)


def judge_use(
    run: Run, use: dict[str, Any], *, intended: str, superseded: str | None = None
) -> Decision:
    wrong = judge_choice(run, intended=intended, superseded=superseded)
    if wrong is not None:
        return wrong
    verdict = judge_execution(run, use, stale=use.get("stale"), naive=use.get("naive"))
    return Decision(verdict, decided=True)


def judge_probe(run: Run, *, version_id: str) -> Decision:
    match = run.match
    if match is None or match.status != 200 or not isinstance(match.body, dict):
        what = match.describe() if match is not None else "never asked"
        return Decision(miss(F.S0, f"match refused: {what}"), decided=False)
    applicable = skills_api.candidates(match.body, "applicable")
    if applicable:
        first = applicable[0]
        whose = (
            "the contraindicated skill"
            if str(first.get("version_id")) == version_id
            else f"another skill, {first.get('skill_name')!r}"
        )
        return Decision(
            miss(F.S2, f"match offered {whose}, which the agent would execute"),
            decided=True,
            misapplied=True,
        )
    near = _near_miss(match.body, version_id)
    if near is None:
        return Decision(
            miss(F.R2, "nothing applied, but the skill is not among the near misses"), decided=True
        )
    if not any(
        isinstance(r, dict) and r.get("type") == "contraindicated"
        for r in near.get("reasons") or []
    ):
        # rejected, but not for the contraindication it carries: that was there and ignored
        return Decision(
            miss(F.A0, f"nothing applied, but the near miss says {_reasons(near)}"), decided=True
        )
    return Decision(CORRECT, decided=True)


def _offered(applicable: dict[str, Any], version_id: str) -> Decision:
    whose = (
        "the skill where it does not fit"
        if str(applicable.get("version_id")) == version_id
        else f"another skill, {applicable.get('skill_name')!r}"
    )
    similarity = applicable.get("similarity")
    said = f" (similarity {similarity})" if similarity is not None else ""
    return Decision(
        miss(F.S2, f"match offered {whose}{said}, which the agent would execute"),
        decided=True,
        misapplied=True,
    )


def judge_undeclared(run: Run, probe: dict[str, Any], *, version_id: str) -> Decision:
    """Refused (CORRECT) or how the skill was applied where it does not fit."""
    match = run.match
    if match is None or match.status != 200 or not isinstance(match.body, dict):
        what = match.describe() if match is not None else "never asked"
        return Decision(miss(F.S0, f"match refused: {what}"), decided=False)
    kind = probe["kind"]
    applicable = skills_api.candidates(match.body, "applicable")
    if kind == "wrong_domain":
        if not applicable:
            return Decision(CORRECT, decided=True)
        if str(applicable[0].get("version_id")) != version_id:
            return _offered(applicable[0], version_id)
        verdict = _execution_refused(run)
        return Decision(verdict, decided=True, misapplied=verdict.code == F.S2)
    if applicable:
        return _offered(applicable[0], version_id)
    if kind == "unsaid_misuse":
        return Decision(CORRECT, decided=True)
    near = _near_miss(match.body, version_id)
    if near is None:
        return Decision(
            miss(F.R2, "nothing applied, but the skill is not among the near misses"), decided=True
        )
    if not any(
        isinstance(r, dict) and r.get("type") == "precondition_failed"
        for r in near.get("reasons") or []
    ):
        return Decision(
            miss(F.A0, f"nothing applied, but the near miss says {_reasons(near)}"), decided=True
        )
    return Decision(CORRECT, decided=True)


def _execution_refused(run: Run) -> Verdict:
    requested = run.requested
    if requested is None:
        return miss(F.S1, "offered, but never executed: the refusal was not tried")
    if requested.status == 422 and requested.error_code() == "invalid_params":
        return CORRECT
    if requested.status not in (200, 202):
        return miss(F.S1, f"execute refused, but not for its params: {requested.describe()}")
    execution = run.execution if isinstance(run.execution, dict) else {}
    if execution.get("succeeded") is True:
        outcome = f"it returned {shown(execution.get('result'))}"
    else:
        outcome = (
            f"it ran and ended {execution.get('status')!r}, outcome {execution.get('outcome')!r}"
        )
    return miss(F.S2, f"execute accepted params outside the skill's schema: {outcome}")


# ------------------------------------------------------------------ the lifecycle


def transitions(version: dict[str, Any]) -> list[str]:
    return [
        str(t.get("to_status"))
        for t in skills_api.listed(version, "transitions")
        if isinstance(t, dict)
    ]


def judge_premature(response: ApiResponse | None) -> Verdict:
    """A promotion asked for before any outcome evidence may move a candidate
    whose examples passed to experimental, never anything to validated."""
    if response is None:
        return miss(F.W0, "the premature promotion was never asked")
    if response.status == 409 and response.error_code() == "evidence_missing":
        return CORRECT
    status = response.body.get("status") if isinstance(response.body, dict) else None
    if response.status == 200 and status == "experimental":
        return CORRECT
    if response.status == 200 and status == "validated":
        return miss(F.W1, "promoted to validated on a request alone, before any outcome evidence")
    return miss(F.W0, f"the premature promotion: {response.describe()}")


def judge_validated(version: dict[str, Any] | None, missing: str = "") -> Verdict:
    """Validated through the lifecycle: examples → experimental → validated on evidence."""
    if not isinstance(version, dict):
        return miss(F.R2, "the version could not be read back")
    moves = transitions(version)
    status = version.get("status")
    if status != "validated" and "validated" not in moves:
        why = f" ({missing})" if missing else ""
        return miss(F.W1, f"never validated: it is {status!r} after {moves}{why}")
    if moves[:3] != ["candidate", "experimental", "validated"]:
        return miss(F.W1, f"validated out of order: {moves}")
    stats = version.get("stats") if isinstance(version.get("stats"), dict) else {}
    if not stats.get("verified_successes"):
        return miss(F.W1, "validated without a verified successful execution in its stats")
    return CORRECT


def judge_provenance(version: dict[str, Any] | None, events: Sequence[str]) -> Verdict:
    if not isinstance(version, dict):
        return miss(F.R2, "the version could not be read back")
    provenance = version.get("provenance") if isinstance(version.get("provenance"), dict) else {}
    got = sorted(str(e) for e in provenance.get("events") or [])
    if got == sorted(events):
        return CORRECT
    return miss(F.W0, f"provenance events: expected {sorted(events)}, got {got}")


def judge_transfer(execution: dict[str, Any] | None) -> Verdict:
    if not isinstance(execution, dict):
        return miss(F.R2, "the execution could not be read")
    if execution.get("novel_params") is True:
        return CORRECT
    return miss(F.W1, "an execution on unseen values is not counted as transfer (novel_params)")


# -------------------------------------------------------------------- the summary


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    """held_out_execution_success (also reported as procedure_execution, the
    cap's name): executions on held-out params whose validator passed and whose
    result is the house rule's value, over every one planned (D1, D3, D4, D6);
    misapplied_skill_rate: matches the agent acted on that applied a wrong or
    contraindicated skill, over every match acted on; obsolete_execution_count:
    executions of a superseded version after its revision;
    negative_transfer_safety: D5 probes where nothing was applied, over every
    probe planned; failure_learning and lifecycle_accuracy: their checks;
    undeclared_refusal_rate (and _held_out): D7 probes in the seen (held-out)
    phrasings the service refused, over every one planned (a crashed item's
    count as not refused), and per kind of probe over both vocabularies. D7's
    probes are not among the decisions of misapplied_skill_rate, which stays
    the declared cases' (its control use is)."""
    planned, correct = counted(outcomes)
    metrics: dict[str, float] = {}
    if planned["held_out"]:
        metrics["held_out_execution_success"] = correct["held_out"] / planned["held_out"]
        metrics["procedure_execution"] = metrics["held_out_execution_success"]
    decisions = sum(o.metrics.get("decisions", 0) for o in outcomes)
    if decisions:
        metrics["misapplied_skill_rate"] = (
            sum(o.metrics.get("misapplied", 0) for o in outcomes) / decisions
        )
    revisions = [o for o in outcomes if o.metrics.get("kind") == "D6"]
    if revisions:
        metrics["obsolete_execution_count"] = float(
            sum(o.metrics.get("obsolete", 0) for o in revisions)
        )
    probes = sum(o.metrics.get("probes", 0) for o in outcomes)
    if probes:
        metrics["negative_transfer_safety"] = (
            sum(o.metrics.get("safe_probes", 0) for o in outcomes) / probes
        )
    if planned["learned"]:
        metrics["failure_learning"] = correct["learned"] / planned["learned"]
    if planned["lifecycle"]:
        metrics["lifecycle_accuracy"] = correct["lifecycle"] / planned["lifecycle"]
    for metric, name in (
        ("undeclared", "undeclared_refusal_rate"),
        ("undeclared_held_out", "undeclared_refusal_rate_held_out"),
    ):
        if planned[metric]:
            metrics[name] = correct[metric] / planned[metric]
    asked: Counter = Counter()
    refused: Counter = Counter()
    for o in outcomes:
        asked.update(o.metrics.get("undeclared_asked") or {})
        refused.update(o.metrics.get("undeclared_refused") or {})
    for kind in sorted(asked):
        if asked[kind]:
            metrics[f"undeclared_refusal_rate_{kind}"] = (
                min(refused[kind], asked[kind]) / asked[kind]
            )
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)
