"""Running skills: validations (examples, hold-out replays) and executions.

Requests are written in the caller's transaction (a queued row plus a ledger
event) and handed to a sandbox worker after commit (`skills.sandbox.*` tasks
on the SKILLS_SANDBOX_QUEUE). The worker runs the code in skills.sandbox with
only the declared tools, then finishes the row in one transaction: a
compare-and-set from queued, so a re-delivered task writes nothing twice.
Finished rows are final (PostgreSQL refuses any later change).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from ledger.services import event_append, json_storage_error
from piper.errors import Conflict, InvalidInput, PermissionDenied, Unprocessable
from piper.provenance import SourceType
from piper.tenancy.models import Agent

from .. import events, tools
from ..drawing import Undrawable, draw_params
from ..models import (
    Execution,
    ExecutionSource,
    ExecutionStatus,
    SkillVersion,
    Validation,
    ValidationCase,
    ValidationKind,
    ValidationStatus,
    VersionStatus,
)
from . import lifecycle
from .definitions import schema_errors

logger = logging.getLogger(__name__)

MAX_OUTPUT_CHARS = 64_000
# What a finished case / sandbox run records beyond what was asked for: each is
# in its finish event's payload too, so skills.services.rebuild can remake it.
CASE_RESULT = (
    "index",
    "outcome",
    "passed",
    "result",
    "verdict",
    "error",
    "stdout",
    "stderr",
    "duration_ms",
)
EXECUTION_RESULT = (
    "outcome",
    "succeeded",
    "validator_passed",
    "result",
    "verdict",
    "error",
    "stdout",
    "stderr",
    "tool_calls",
    "duration_ms",
)
MAX_TASK = 4000


def _clip(text: Any) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n…(truncated)"


def _storable(value: Any) -> Any:
    """A sandbox result the ledger can store; otherwise its repr, marked as such."""
    if json_storage_error(value, path="result", depth=1) is None:
        return value
    return {"unstorable_result": repr(value)[:2000]}


def _sandbox():
    from skills import sandbox  # the sandbox package is optional at import time

    return sandbox


def _run(version: SkillVersion, params: dict):
    sandbox = _sandbox()
    return sandbox.run_skill(
        procedure=version.procedure,
        params=params,
        entry=version.entry_point,
        validator=version.validator or None,
        tools=tools.bound_tools(agent=version.agent, names=version.required_tools),
        limits=sandbox.Limits(),
    )


def _verdict(result) -> tuple[dict | None, bool | None]:
    validation = getattr(result, "validation", None)
    if validation is None:
        return None, None
    return _storable(dict(validation)), bool(validation.get("passed"))


# --------------------------------------------------------------------- validation


def validation_request(
    *, agent: Agent, version: SkillVersion, kind: str, actor: str = ""
) -> Validation:
    """Queue a sandbox run of the version's examples, its hold-out cases, or
    cases the service draws now from its parameter_schema (after commit).
    Conflict `no_cases` for a hold-out replay of a version without any;
    Conflict `not_drawable` for a drawn replay of a version without a validator
    to judge it, or whose schema the drawer cannot draw from (skills.drawing)."""
    drawn = None
    if kind == ValidationKind.DRAWN:
        cases = drawn = _drawn_cases(version)
    else:
        cases = version.examples if kind == ValidationKind.EXAMPLES else version.holdout
    if not cases:
        raise Conflict(
            f"skill version {version.pk} has no {kind} cases to run",
            code="no_cases",
            details={"kind": kind},
        )
    with transaction.atomic():
        validation = Validation(
            agent=agent,
            version=version,
            kind=kind,
            cases_total=len(cases),
            drawn_cases=drawn,
            requested_by=actor,
        )
        validation.source_event = event_append(
            agent=agent,
            event_type=events.VALIDATION_REQUESTED,
            payload={
                "validation_id": str(validation.pk),
                "version_id": str(version.pk),
                "kind": kind,
                "cases": len(cases),
                **({"drawn_cases": drawn} if drawn is not None else {}),
            },
            actor=actor,
            source_type=SourceType.AGENT_INFERENCE,
        )
        validation.created_at = validation.source_event.recorded_at
        validation.save(force_insert=True)
        transaction.on_commit(lambda: _enqueue_validation(validation.pk))
    return validation


def _drawn_cases(version: SkillVersion) -> list[dict]:
    """Inputs the author did not choose: drawn from the schema with a seed nobody
    picks, none equal to an example or hold-out case."""
    if not version.validator.strip():
        raise Conflict(
            "a drawn replay needs a validator to judge the drawn inputs; this version has none",
            code="not_drawable",
            details={"kind": ValidationKind.DRAWN, "why": "no validator"},
        )
    authored = [case["params"] for case in (*version.examples, *version.holdout)]
    try:
        params = draw_params(version.parameter_schema, seed=secrets.randbits(64), avoid=authored)
    except Undrawable as exc:
        raise Conflict(
            f"cannot draw inputs from this version's parameter_schema: {exc}",
            code="not_drawable",
            details={"kind": ValidationKind.DRAWN, "why": str(exc)},
        ) from exc
    return [{"params": p} for p in params]


def _enqueue_validation(validation_id: uuid.UUID) -> None:
    from ..tasks import validate_version

    validate_version.delay(str(validation_id))


def _case_passed(case: dict, result, *, judged: bool = False) -> bool:
    """Ran, the validator (if any) passed it, and it gave the expected result (if
    any). A drawn case has no expected result: the validator must have judged it."""
    if result.outcome != "ok":
        return False
    if result.validation is None:
        return not judged and ("expected" not in case or result.result == case["expected"])
    if not result.validation.get("passed"):
        return False
    return "expected" not in case or result.result == case["expected"]


def validation_run(*, validation_id: uuid.UUID) -> Validation | None:
    """Run a queued validation's cases in the sandbox and record them.

    A validation that is gone or already finished is left alone (returns None).
    Raises skills.sandbox.SandboxUnavailable when no sandbox can run (the task
    retries). After recording, promotes the version if the evidence allows."""
    validation = (
        Validation.objects.select_related("version", "version__agent")
        .filter(pk=validation_id, status=ValidationStatus.QUEUED)
        .first()
    )
    if validation is None:
        logger.info("validation %s is gone or finished", validation_id)
        return None
    return _run_once(validation, "validation", ValidationStatus.QUEUED, _validation_run)


def _validation_run(validation: Validation) -> Validation | None:
    version = validation.version
    drawn = validation.kind == ValidationKind.DRAWN
    if drawn:
        cases = validation.drawn_cases or []
    else:
        cases = version.examples if validation.kind == ValidationKind.EXAMPLES else version.holdout
    rows = []
    for index, case in enumerate(cases):
        result = _run(version, case["params"])
        verdict, _ = _verdict(result)
        rows.append(
            ValidationCase(
                validation=validation,
                index=index,
                params=case["params"],
                expected=case.get("expected"),
                has_expected="expected" in case,
                outcome=result.outcome,
                passed=_case_passed(case, result, judged=drawn),
                result=_storable(result.result),
                verdict=verdict,
                error=_clip(result.error),
                stdout=_clip(result.stdout),
                stderr=_clip(result.stderr),
                duration_ms=max(0, int(result.duration_ms or 0)),
            )
        )
    passed = sum(row.passed for row in rows)
    status = ValidationStatus.PASSED if passed == len(rows) else ValidationStatus.FAILED
    finished = _finish_validation(validation, status=status, rows=rows, passed=passed, error="")
    if finished is not None:
        lifecycle.consider_promotion(version_id=version.pk)
    return finished


# A session lock per validation while a worker runs it: the worker's connection
# holds it (a killed worker's connection closes, and PostgreSQL lets it go), so
# the reconciler can tell a validation being run from one whose task was lost.
# The whole 64-bit hash, not piper.locks' stripes: a try-lock must not report a
# validation busy because another one shares its stripe.
_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"


def _run_once(row, kind: str, queued: str, run):
    """`run(row)` under the row's run lock, if no other worker holds it and the row
    is still queued; else None. A re-delivered or re-queued task while a worker
    runs it steps aside: that one finishes it."""
    with _running(row.pk, kind) as mine:
        if not mine:
            logger.info("%s %s is being run by another worker", kind, row.pk)
            return None
        if not type(row).objects.filter(pk=row.pk, status=queued).exists():
            return None  # finished by the worker that held the lock a moment ago
        return run(row)


def _requeue_unowned(ids, kind: str, enqueue) -> tuple[list[uuid.UUID], int]:
    """Queue again each of `ids` whose run lock is free (no worker runs it);
    (those queued, how many are being run)."""
    requeued, running = [], 0
    for pk in ids:
        with _running(pk, kind) as free:
            pass
        if free:
            enqueue(pk)
            requeued.append(pk)
        else:
            running += 1
    return requeued, running


@contextlib.contextmanager
def _running(validation_id: uuid.UUID, kind: str = "validation") -> Iterator[bool]:
    """Hold the validation's (execution's) run lock if no one else does; yields
    whether it was taken."""
    key = f"skills:{kind}:{validation_id}"
    with connection.cursor() as cursor:
        cursor.execute(_TRY_LOCK, [key])
        taken = bool(cursor.fetchone()[0])
    try:
        yield taken
    finally:
        if taken:
            with contextlib.suppress(DatabaseError), connection.cursor() as cursor:
                cursor.execute(_UNLOCK, [key])


@dataclass
class ValidationBacklog:
    requeued: list[uuid.UUID]
    running: int
    promotions: list[uuid.UUID]
    executions_requeued: list[uuid.UUID]


def validation_backlog(*, grace_seconds: int, limit: int = 500) -> ValidationBacklog:
    """The reconciler of validations and executions (beat: skills.validation_backlog).

    A validation's task goes to the broker after its request commits, and a
    lost one — Redis flushed, or taken by a worker that was killed (acks_late
    gives it back only after the visibility timeout, an hour) — left it queued,
    the version waiting on it. Re-derived from PostgreSQL: every validation still
    queued `grace_seconds` after its request that no worker is running now (its
    run lock is free) is queued again; running it twice is harmless (the finish
    is a compare-and-set from queued, and a second delivery while one runs steps
    aside). And a version left in candidate or experimental with a validation
    passed in the day before the grace began is given its promotion again: a worker killed
    between the finish and the promotion left it undone (consider_promotion only
    moves as far as the evidence allows, so asking again is harmless)."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    stale = list(
        Validation.objects.filter(status=ValidationStatus.QUEUED, created_at__lt=cutoff)
        .order_by("id")
        .values_list("pk", flat=True)[:limit]
    )
    requeued, running = _requeue_unowned(stale, "validation", _enqueue_validation)
    unpromoted = list(
        SkillVersion.objects.filter(
            status__in=(VersionStatus.CANDIDATE, VersionStatus.EXPERIMENTAL),
            validations__status=ValidationStatus.PASSED,
            validations__finished_at__lt=cutoff,
            validations__finished_at__gte=cutoff - timedelta(days=1),
        )
        .distinct()
        .order_by("id")
        .values_list("pk", flat=True)[:limit]
    )
    promotions = [
        version_id
        for version_id in unpromoted
        if lifecycle.consider_promotion(version_id=version_id) is not None
    ]
    # Executions the same way: the sandbox's tools only read, so a second run is
    # harmless, and the finish is a compare-and-set from queued.
    executions, also_running = _requeue_unowned(
        Execution.objects.filter(status=ExecutionStatus.QUEUED, created_at__lt=cutoff)
        .order_by("id")
        .values_list("pk", flat=True)[:limit],
        "execution",
        _enqueue_execution,
    )
    return ValidationBacklog(
        requeued=requeued,
        running=running + also_running,
        promotions=promotions,
        executions_requeued=executions,
    )


def validation_fail(*, validation_id: uuid.UUID, error: str) -> Validation | None:
    """Record that the sandbox could not run a validation at all (after retries)."""
    validation = (
        Validation.objects.select_related("version")
        .filter(pk=validation_id, status=ValidationStatus.QUEUED)
        .first()
    )
    if validation is None:
        return None
    return _finish_validation(
        validation, status=ValidationStatus.ERROR, rows=[], passed=0, error=_clip(error)
    )


def _finish_validation(
    validation: Validation, *, status: str, rows: list, passed: int, error: str
) -> Validation | None:
    with transaction.atomic():
        locked = Validation.objects.select_for_update().filter(
            pk=validation.pk, status=ValidationStatus.QUEUED
        )
        if not locked.exists():
            return None  # another delivery finished it first
        event = event_append(
            agent=validation.version.agent,
            event_type=events.VALIDATION_FINISHED,
            payload={
                "validation_id": str(validation.pk),
                "version_id": str(validation.version_id),
                "kind": validation.kind,
                "status": status,
                "cases_passed": passed,
                "cases_total": validation.cases_total,
                "outcomes": [row.outcome for row in rows],
                "error": error,
                # What each case gave, so the cases can be rebuilt from the ledger
                # (their params and expected results are the version's or the request's).
                "cases": [{name: getattr(row, name) for name in CASE_RESULT} for row in rows],
            },
            source_type=SourceType.TOOL_RESULT,
        )
        ValidationCase.objects.bulk_create(rows)
        locked.update(
            status=status,
            cases_passed=passed,
            error=error,
            finish_event=event,
            finished_at=event.recorded_at,
        )
    validation.refresh_from_db()
    return validation


# ---------------------------------------------------------------------- executions


def _check_params(version: SkillVersion, params: Any) -> dict:
    if not isinstance(params, dict):
        raise InvalidInput("params: a JSON object", details={"params": ["must be an object"]})
    if problem := json_storage_error(params, path="params", depth=1):
        raise InvalidInput(problem, details={"params": [problem]})
    if errors := schema_errors(version.parameter_schema, params):
        first = errors[0]
        raise Unprocessable(
            f"params do not match the skill's parameter_schema: "
            f"{first['path'] or '(root)'}: {first['message']}",
            code="invalid_params",
            details={"params": errors},
        )
    return params


def _check_usable(version: SkillVersion, allow_unvalidated: bool) -> None:
    if version.status != VersionStatus.VALIDATED and not allow_unvalidated:
        raise Conflict(
            f"skill version {version.pk} is {version.status}, not validated; send "
            '"allow_unvalidated": true to run it anyway',
            code="not_validated",
            details={"status": version.status},
        )


def _check_permissions(version: SkillVersion, scopes: Any) -> None:
    if scopes is None:
        return  # an operator or a worker, not an API key
    held = set(scopes)
    if "admin" in held:
        return
    if missing := sorted(set(version.required_permissions) - held):
        raise PermissionDenied(
            f"this skill needs the API key scopes {missing}; the key has {sorted(held)}",
            code="missing_permission",
            details={"required_permissions": missing},
        )


def _check_task(task: Any, context: Any) -> None:
    if not isinstance(task, str) or len(task) > MAX_TASK:
        raise InvalidInput(
            f"task: text of at most {MAX_TASK} characters", details={"task": ["invalid"]}
        )
    if not isinstance(context, dict):
        raise InvalidInput("context: a JSON object", details={"context": ["must be an object"]})
    for name, value in (("task", task), ("context", context)):
        if problem := json_storage_error(value, path=name, depth=1):
            raise InvalidInput(problem, details={name: [problem]})


@dataclass(frozen=True)
class ExecuteInput:
    params: dict
    allow_unvalidated: bool = False
    task: str = ""
    context: dict | None = None
    session_id: str = ""


def execution_request(
    *,
    agent: Agent,
    version_id: uuid.UUID,
    data: ExecuteInput,
    scopes: Any = None,
    actor: str = "",
) -> Execution:
    """Queue a sandbox execution (run after commit). Refuses, writing nothing:
    Conflict `not_validated` without allow_unvalidated for a version that is
    not validated; PermissionDenied `missing_permission` when `scopes` lack the
    version's required permissions; Unprocessable `invalid_params` (every
    schema error listed) for parameters that do not fit."""
    context = data.context or {}
    _check_task(data.task, context)
    with transaction.atomic():
        version = lifecycle.locked_version(agent, version_id)
        _check_usable(version, data.allow_unvalidated)
        _check_permissions(version, scopes)
        params = _check_params(version, data.params)
        execution = Execution(
            agent=agent,
            version=version,
            source=ExecutionSource.SANDBOX,
            version_status=version.status,
            params=params,
            novel_params=not any(params == case["params"] for case in version.examples),
            task=data.task,
            context=context,
            session_id=data.session_id,
        )
        execution.source_event = event_append(
            agent=agent,
            event_type=events.EXECUTION_REQUESTED,
            payload={
                "execution_id": str(execution.pk),
                "version_id": str(version.pk),
                "version_status": version.status,
                "params": params,
                "task": data.task,
                "context": context,
            },
            actor=actor,
            session_id=data.session_id,
            source_type=SourceType.AGENT_INFERENCE,
        )
        execution.created_at = execution.source_event.recorded_at
        execution.save(force_insert=True)
        transaction.on_commit(lambda: _enqueue_execution(execution.pk))
    return execution


def _enqueue_execution(execution_id: uuid.UUID) -> None:
    from ..tasks import execute_version

    execute_version.delay(str(execution_id))


def execution_run(*, execution_id: uuid.UUID) -> Execution | None:
    """Run a queued execution in the sandbox and record it (None when it is gone
    or already finished). Raises SandboxUnavailable for the task to retry."""
    execution = (
        Execution.objects.select_related("version", "version__agent")
        .filter(pk=execution_id, status=ExecutionStatus.QUEUED)
        .first()
    )
    if execution is None:
        logger.info("execution %s is gone or finished", execution_id)
        return None
    return _run_once(execution, "execution", ExecutionStatus.QUEUED, _execution_run)


def _execution_run(execution: Execution) -> Execution | None:
    result = _run(execution.version, execution.params)
    verdict, validator_passed = _verdict(result)
    return _finish_execution(
        execution,
        outcome=result.outcome,
        result=_storable(result.result),
        verdict=verdict,
        validator_passed=validator_passed,
        succeeded=result.outcome == "ok" and validator_passed is not False,
        error=_clip(result.error),
        stdout=_clip(result.stdout),
        stderr=_clip(result.stderr),
        tool_calls=_tool_calls(result),
        duration_ms=max(0, int(result.duration_ms or 0)),
    )


def _tool_calls(result) -> list:
    calls = _storable(list(result.tool_calls or [])[:200])
    return calls if isinstance(calls, list) else [calls]


def execution_fail(*, execution_id: uuid.UUID, error: str) -> Execution | None:
    """Record that no sandbox could run a queued execution (after retries)."""
    execution = (
        Execution.objects.select_related("version", "version__agent")
        .filter(pk=execution_id, status=ExecutionStatus.QUEUED)
        .first()
    )
    if execution is None:
        return None
    return _finish_execution(
        execution,
        outcome="unavailable",
        result=None,
        verdict=None,
        validator_passed=None,
        succeeded=False,
        error=_clip(error),
        stdout="",
        stderr="",
        tool_calls=[],
        duration_ms=0,
    )


def _finish_execution(execution: Execution, **fields: Any) -> Execution | None:
    with transaction.atomic():
        locked = Execution.objects.select_for_update().filter(
            pk=execution.pk, status=ExecutionStatus.QUEUED
        )
        if not locked.exists():
            return None
        event = event_append(
            agent=execution.version.agent,
            event_type=events.EXECUTION_FINISHED,
            payload={
                "execution_id": str(execution.pk),
                "version_id": str(execution.version_id),
                # Every column the finish sets, so the run can be rebuilt from the ledger.
                **{name: fields[name] for name in EXECUTION_RESULT},
            },
            session_id=execution.session_id,
            source_type=SourceType.TOOL_RESULT,
        )
        locked.update(
            status=ExecutionStatus.FINISHED,
            finish_event=event,
            finished_at=event.recorded_at,
            **fields,
        )
    _after_outcome(execution.version_id)
    execution.refresh_from_db()
    return execution


def _after_outcome(version_id: uuid.UUID) -> None:
    lifecycle.consider_promotion(version_id=version_id)
    lifecycle.consider_deprecation(version_id=version_id)


@dataclass(frozen=True)
class ReportInput:
    params: dict
    succeeded: bool
    result: Any = None
    evidence: Any = None
    externally_verified: bool = False
    duration_ms: int | None = None
    error: str = ""
    task: str = ""
    context: dict | None = None
    session_id: str = ""


def execution_report(
    *, agent: Agent, version_id: uuid.UUID, data: ReportInput, actor: str = ""
) -> Execution:
    """Record an execution the agent ran itself, with its evidence.

    An externally verified run must carry evidence (InvalidInput otherwise).
    Parameters must fit the schema (Unprocessable `invalid_params`). A
    successful externally verified run can validate an experimental version
    whose hold-out replay passed; failures count against a validated one."""
    context = data.context or {}
    _check_task(data.task, context)
    if data.externally_verified and data.evidence in (None, {}, [], ""):
        raise InvalidInput(
            "evidence: an externally verified execution needs its evidence",
            details={"evidence": ["required when externally_verified is true"]},
        )
    for name in ("result", "evidence", "error"):
        if problem := json_storage_error(getattr(data, name), path=name, depth=1):
            raise InvalidInput(problem, details={name: [problem]})
    with transaction.atomic():
        version = lifecycle.locked_version(agent, version_id)
        params = _check_params(version, data.params)
        execution = Execution(
            agent=agent,
            version=version,
            source=ExecutionSource.REPORTED,
            status=ExecutionStatus.FINISHED,
            version_status=version.status,
            params=params,
            novel_params=not any(params == case["params"] for case in version.examples),
            task=data.task,
            context=context,
            outcome="ok" if data.succeeded else "error",
            result=data.result,
            succeeded=data.succeeded,
            externally_verified=data.externally_verified,
            evidence=data.evidence,
            error=_clip(data.error),
            duration_ms=data.duration_ms,
            session_id=data.session_id,
        )
        execution.source_event = event_append(
            agent=agent,
            event_type=events.EXECUTION_REPORTED,
            payload={
                "execution_id": str(execution.pk),
                "version_id": str(version.pk),
                "version_status": version.status,
                "params": params,
                "succeeded": data.succeeded,
                "result": data.result,
                "externally_verified": data.externally_verified,
                "evidence": data.evidence,
                "task": data.task,
                "context": context,
                "error": execution.error,
                "duration_ms": data.duration_ms,
            },
            actor=actor,
            session_id=data.session_id,
            source_type=SourceType.AGENT_INFERENCE,
        )
        execution.finish_event = execution.source_event
        execution.created_at = execution.finished_at = execution.source_event.recorded_at
        execution.save(force_insert=True)
    _after_outcome(version.pk)
    execution.refresh_from_db()
    return execution
