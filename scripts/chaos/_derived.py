"""Consolidation and skill validation under faults (worker_kill.py): what the
clients send that makes that work, how much of it is still pending, and the
checks that each piece was done exactly once.

The work: episodes that state a fact ("billing-7 is owned by team-0.", each in
a session of its own, so each is a source of its own) become candidate facts in
`facts` consolidation runs, asserted as facts; verified skill traces of two
procedures become candidate skills in `skills` runs, each a candidate version
whose examples the sandbox validates; skills created through the API are
validated on their examples, then replayed on their hold-out cases and on
drawn inputs, and run in the sandbox on request. Runs are resumed by
`consolidation.consolidate_due` (beat) once their worker is gone; lost
validations and executions are queued again by `skills.validation_backlog`
(beat).
"""

from __future__ import annotations

import base64
import hashlib
import re
import zlib
from collections import Counter

OWNED = 40  # subjects whose owner the episodes state
PROCEDURE = """
def run(params, tools):
    return {"record": params["record"], "length": len(params["record"])}
"""
VALIDATOR = """
def validate(params, result, tools):
    return result == {"record": params["record"], "length": len(params["record"])}
"""


def claim(k: int) -> tuple[str, str]:
    """(subject, owner) the k-th statement states."""
    return f"billing-{k % OWNED}", f"team-{(k % OWNED) % 7}"


def statement_episode(k: int, occurred_at: str) -> dict:
    subject, owner = claim(k)
    return {
        "occurred_at": occurred_at,
        "summary": f"{subject} is owned by {owner}.",
        "actor": "chaos",
        "session_id": f"chaos-statement-{k}",
    }


def skill_body(k: int) -> dict:
    def case(record: str) -> dict:
        return {"params": {"record": record}, "expected": {"record": record, "length": len(record)}}

    return {
        "name": f"measure-{k}",
        "purpose": "Measure a record",
        "trigger": {"keywords": ["measure", "record"]},
        "parameter_schema": {
            "type": "object",
            "properties": {"record": {"type": "string", "minLength": 1, "maxLength": 20}},
            "required": ["record"],
            "additionalProperties": False,
        },
        "procedure": PROCEDURE,
        "validator": VALIDATOR,
        "examples": [case(f"INV-{k}"), case(f"CN-{k}-7")],
        "holdout": [case(f"R-{k}-19")],
    }


def trace_body(k: int) -> tuple[str, dict]:
    """(shape, body): even k fingerprint a document, odd k checksum an order number."""
    if k % 2 == 0:
        text = f"invoice {4400 + k}"
        digest = hashlib.sha256(text.encode()).hexdigest()
        encoded = base64.b64encode(digest.encode()).decode()
        steps = [
            {"tool": "sha256", "args": {"text": text}, "result": digest},
            {"tool": "base64_encode", "args": {"text": digest}, "result": encoded},
        ]
        shape, inputs, output = "fingerprint", {"document": text}, encoded
        task = f"Fingerprint the scanned {text} for the audit ledger"
    else:
        line = f"order {1000 + k} shipped to Lyon"
        number = re.search(r"\d+", line).group(0)
        match = {"match": number, "groups": [], "named": {}}
        checksum = zlib.crc32(number.encode())
        steps = [
            {"tool": "regex_match", "args": {"pattern": r"\d+", "text": line}, "result": match},
            {"tool": "crc32", "args": {"text": number}, "result": checksum},
        ]
        shape, inputs, output = "order checksum", {"line": line}, checksum
        task = f"Checksum the order number in '{line}'"
    return shape, {
        "task": task,
        "inputs": inputs,
        "steps": steps,
        "output": output,
        "succeeded": True,
        "verified": True,
        "verification": {"by": "chaos", "evidence": {"matched": True}},
        "session_id": f"chaos-trace-{k}",
    }


# -------------------------------------------------------------------- pending work


def pending(agent) -> dict[str, int]:
    """Consolidation and validation work not done yet."""
    from django.db.models import Max

    from consolidation.models import ConsolidationRun, RunKind, RunStatus
    from consolidation.selectors import READS
    from ledger.models import Event
    from skills.models import Execution, ExecutionStatus, Validation, ValidationStatus

    left = {
        "validations queued": Validation.objects.filter(
            agent=agent, status=ValidationStatus.QUEUED
        ).count(),
        "executions queued": Execution.objects.filter(
            agent=agent, status=ExecutionStatus.QUEUED
        ).count(),
        "consolidation runs running": ConsolidationRun.objects.filter(
            agent=agent, status=RunStatus.RUNNING
        ).count(),
    }
    for kind in RunKind.values:
        cursor = ConsolidationRun.objects.filter(agent=agent, kind=kind).aggregate(
            c=Max("cursor_seq")
        )["c"]
        left[f"{kind} events not consolidated"] = Event.objects.filter(
            agent=agent, event_type__in=READS[kind], seq__gt=cursor or 0
        ).count()
    return left


# -------------------------------------------------------------------------- checks


def check(agent, sent: dict) -> tuple[dict, list[str]]:
    """Every consolidation run closed once, over contiguous ranges, each event read
    once; one candidate per claim and per procedure, with exactly the evidence
    sent; one believed fact per claim; every validation finished exactly once,
    every version whose examples passed promoted once. `sent`: {kind: [(k,
    status, at)]} as worker_kill.cues records it."""
    figures: dict[str, str] = {}
    violations: list[str] = []
    runs_figures, found = _check_runs(agent)
    figures.update(runs_figures)
    violations += found
    facts_figures, found = _check_candidate_facts(agent, sent)
    figures.update(facts_figures)
    violations += found
    skills_figures, found = _check_candidate_skills(agent, sent)
    figures.update(skills_figures)
    violations += found
    validation_figures, found = _check_validations(agent, sent)
    figures.update(validation_figures)
    violations += found
    execution_figures, found = _check_executions(agent, sent)
    figures.update(execution_figures)
    violations += found
    return figures, violations


def _check_executions(agent, sent: dict) -> tuple[dict, list[str]]:
    """Every sandbox run asked for finished exactly once, and succeeded."""
    from ledger.models import Event
    from skills.models import Execution, ExecutionSource

    violations = []
    asked = sum(1 for _, status, _ in sent.get("execute", []) if status == 202)
    executions = list(Execution.objects.filter(agent=agent, source=ExecutionSource.SANDBOX))
    events = {
        kind: Counter(
            Event.objects.filter(agent=agent, event_type=kind).values_list(
                "payload__execution_id", flat=True
            )
        )
        for kind in ("skill.execution_requested", "skill.execution_finished")
    }
    if len(executions) != asked:
        violations.append(f"{len(executions)} sandbox executions for {asked} asked for")
    for e in executions:
        requested = events["skill.execution_requested"][str(e.pk)]
        finished = events["skill.execution_finished"][str(e.pk)]
        if e.status != "finished" or not e.succeeded:
            violations.append(f"execution {e.pk} {e.status} {e.outcome}: {e.error[:200]}")
        if (requested, finished) != (1, 1):
            violations.append(f"execution {e.pk}: {requested} requested, {finished} finished")
    return {
        "sandbox executions asked for / finished once": f"{asked} / "
        f"{sum(1 for e in executions if e.status == 'finished')} "
        f"({sum(1 for e in executions if e.succeeded)} succeeded)"
    }, violations


def _check_runs(agent) -> tuple[dict, list[str]]:
    from consolidation.models import ConsolidationRun, RunKind, RunStatus
    from consolidation.services import RUN_FAILED, RUN_FINISHED, RUN_STARTED
    from episodes.models import Episode
    from ledger.models import Event
    from skills.models import SkillTrace

    violations = []
    runs = list(ConsolidationRun.objects.filter(agent=agent).order_by("from_seq", "started_at"))
    statuses = Counter(f"{r.kind} {r.status}" for r in runs)
    for r in runs:
        if r.status != RunStatus.SUCCEEDED:
            violations.append(f"consolidation run {r.pk} ({r.kind}) ended {r.status}: {r.error}")
    events = Counter(
        Event.objects.filter(
            agent=agent, event_type__in=[RUN_STARTED, RUN_FINISHED, RUN_FAILED]
        ).values_list("event_type", flat=True)
    )
    if events[RUN_STARTED] != len(runs):
        violations.append(f"{events[RUN_STARTED]} run_started events for {len(runs)} runs")
    if events[RUN_FINISHED] != sum(r.status == RunStatus.SUCCEEDED for r in runs):
        violations.append(f"{events[RUN_FINISHED]} run_finished events: {dict(statuses)}")
    read = {}
    for kind in RunKind.values:
        mine = [r for r in runs if r.kind == kind]
        for before, after in zip(mine, mine[1:], strict=False):
            if after.from_seq != before.cursor_seq:
                violations.append(
                    f"{kind} runs not contiguous: {before.pk} ended at seq {before.cursor_seq}, "
                    f"{after.pk} began after {after.from_seq}"
                )
        read[kind] = sum(r.episodes_read for r in mine)
    expected = {
        RunKind.FACTS: Episode.objects.filter(agent=agent).count(),
        RunKind.DUPLICATES: Episode.objects.filter(agent=agent).count(),
        RunKind.SKILLS: SkillTrace.objects.filter(agent=agent).count(),
    }
    for kind, n in expected.items():
        if read[kind] != n:
            violations.append(f"{kind} runs read {read[kind]} rows of {n}: each exactly once")
    return {
        "consolidation runs": ", ".join(f"{k} ×{n}" for k, n in sorted(statuses.items())),
        "rows read by the runs (each exactly once)": ", ".join(
            f"{kind} {read[kind]} of {n}" for kind, n in expected.items()
        ),
    }, violations


def _check_candidate_facts(agent, sent: dict) -> tuple[dict, list[str]]:
    from django.db.models import Count

    from consolidation.models import CandidateEvidence, CandidateFact
    from consolidation.services import CANDIDATE_PROPOSED
    from facts.models import Fact
    from ledger.models import Event

    violations = []
    stated = Counter(claim(k) for k, status, _ in sent.get("statement", []) if status == 201)
    candidates = list(CandidateFact.objects.filter(agent=agent, predicate="owner"))
    by_claim: dict = {}
    for c in candidates:
        by_claim.setdefault((c.subject, c.value), []).append(c)
    evidence = dict(
        CandidateEvidence.objects.filter(agent=agent, candidate__in=candidates)
        .values("candidate_id")
        .annotate(n=Count("id"))
        .values_list("candidate_id", "n")
    )
    doubled_evidence = (
        CandidateEvidence.objects.filter(agent=agent)
        .values("candidate_id", "event_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    proposed = Counter(
        Event.objects.filter(agent=agent, event_type=CANDIDATE_PROPOSED).values_list(
            "payload__candidate_id", flat=True
        )
    )
    wrong = []
    for key, n in stated.items():
        got = by_claim.get(key, [])
        if len(got) != 1:
            wrong.append(f"{key}: {len(got)} candidates")
            continue
        [c] = got
        if evidence.get(c.pk, 0) != n or c.sources != n:
            wrong.append(
                f"{key}: {n} episodes, {evidence.get(c.pk, 0)} evidence, {c.sources} sources"
            )
        if proposed[str(c.pk)] != 1:
            wrong.append(f"{key}: {proposed[str(c.pk)]} candidate_proposed events")
        if c.status != "asserted" or c.fact_id is None:
            wrong.append(f"{key}: candidate {c.status}, not asserted")
            continue
        fact = Fact.objects.get(pk=c.fact_id)
        believed = Fact.objects.filter(
            agent=agent,
            subject_id=fact.subject_id,
            predicate_id=fact.predicate_id,
            superseded_at__isnull=True,
            valid_to__isnull=True,
        )
        values = list(believed.values_list("object_value", flat=True))
        if values != [c.value]:
            wrong.append(f"{key}: believed now {values}")
    extra = set(by_claim) - set(stated)
    if extra:
        wrong.append(f"candidates of claims no episode stated: {sorted(extra)[:3]}")
    if doubled_evidence:
        wrong.append(f"{doubled_evidence} events counted twice as evidence of one candidate")
    violations += [f"candidate facts: {w}" for w in wrong]
    return {
        "statements / claims / candidates": f"{sum(stated.values())} / {len(stated)} / "
        f"{len(candidates)} ({sum(1 for c in candidates if c.status == 'asserted')} asserted, "
        f"{sum(evidence.values())} pieces of evidence)",
    }, violations


def _check_candidate_skills(agent, sent: dict) -> tuple[dict, list[str]]:
    from django.db.models import Count

    from consolidation.models import CandidateSkill, CandidateSkillTrace

    violations = []
    shapes = Counter(trace_body(k)[0] for k, status, _ in sent.get("trace", []) if status == 201)
    candidates = list(CandidateSkill.objects.filter(agent=agent))
    evidence = dict(
        CandidateSkillTrace.objects.filter(candidate__in=candidates)
        .values("candidate_id")
        .annotate(n=Count("id"))
        .values_list("candidate_id", "n")
    )
    if len(candidates) != len(shapes):
        violations.append(f"{len(candidates)} candidate skills for {len(shapes)} procedures")
    if sorted(evidence.get(c.pk, 0) for c in candidates) != sorted(shapes.values()):
        violations.append(
            f"candidate skills' traces {sorted(evidence.get(c.pk, 0) for c in candidates)}, "
            f"traces sent {sorted(shapes.values())}"
        )
    for c in candidates:
        if c.traces != evidence.get(c.pk, 0):
            violations.append(f"candidate skill {c.pk}: traces {c.traces}, evidence rows differ")
        if c.version_id is None:
            violations.append(f"candidate skill {c.pk} is {c.status}: no version proposed")
    return {
        "traces / procedures / candidate skills": f"{sum(shapes.values())} / {len(shapes)} / "
        f"{len(candidates)} ({', '.join(c.status for c in candidates)})",
    }, violations


def _check_validations(agent, sent: dict) -> tuple[dict, list[str]]:
    from django.db.models import Count

    from ledger.models import Event
    from skills.models import SkillVersion, Validation, VersionTransition

    violations = []
    validations = list(
        Validation.objects.filter(agent=agent).annotate(rows=Count("cases", distinct=True))
    )
    statuses = Counter(f"{v.kind} {v.status}" for v in validations)
    events = {
        kind: Counter(
            Event.objects.filter(agent=agent, event_type=kind).values_list(
                "payload__validation_id", flat=True
            )
        )
        for kind in ("skill.validation_requested", "skill.validation_finished")
    }
    for v in validations:
        if v.status == "queued":
            violations.append(f"validation {v.pk} ({v.kind}) is still queued")
        elif v.status == "error" or (v.status == "failed" and v.kind != "drawn"):
            # A drawn replay may fail: inputs nobody chose (a mined skill's "order
            # checksum" given a line without a number). That is evidence, not a fault.
            failed = v.cases.filter(passed=False).values("params", "outcome", "error", "verdict")
            violations.append(
                f"validation {v.pk} ({v.kind}) {v.status}: {v.error[:200]} {list(failed[:2])}"
            )
        requested = events["skill.validation_requested"][str(v.pk)]
        finished = events["skill.validation_finished"][str(v.pk)]
        if requested != 1 or finished != (v.status != "queued"):
            violations.append(
                f"validation {v.pk}: {requested} requested, {finished} finished events"
            )
        if v.status != "queued" and v.rows != v.cases_total:
            violations.append(f"validation {v.pk}: {v.rows} cases stored of {v.cases_total}")
    versions = list(SkillVersion.objects.filter(agent=agent).select_related("skill"))
    promoted = Counter(
        VersionTransition.objects.filter(
            version__in=versions, from_status="candidate", to_status="experimental"
        ).values_list("version_id", flat=True)
    )
    by_version = Counter((v.version_id, v.kind) for v in validations)
    for version in versions:
        if version.status == "candidate":
            violations.append(f"version {version.pk} is still a candidate")
        if promoted[version.pk] != 1:
            violations.append(f"version {version.pk} promoted {promoted[version.pk]} times")
        # The API's skills have a validator and a drawable schema: a drawn replay each.
        wanted = ("examples",) + (("holdout",) if version.holdout else ())
        if version.skill.name.startswith("measure-"):
            wanted += ("drawn",)
        for kind in wanted:
            if by_version[(version.pk, kind)] != 1:
                violations.append(
                    f"version {version.pk}: {by_version[(version.pk, kind)]} {kind} validations"
                )
    made = sum(1 for _, status, _ in sent.get("skill", []) if status == 201)
    return {
        "skills made through the API / versions (with the mined ones)": f"{made} / {len(versions)}"
        f" ({dict(Counter(v.status for v in versions))})",
        "validations": f"{len(validations)}: {dict(sorted(statuses.items()))}",
    }, violations
