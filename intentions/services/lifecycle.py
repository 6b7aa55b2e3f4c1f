"""Intentions: make, start, complete, skip, fail, cancel, expire, fire by hand.

Every change is a compare-and-set on the status under a row lock, recorded as
a Transition and a ledger event. Completed one-shot and cancelled intentions
never come back (and PostgreSQL refuses it too); a recurring intention moves
to its next occurrence only after this one is completed or skipped.

An intention that ends without ever being done takes the intentions blocked
on it along (dependents_cancel): they could never fire.

A dependency on a recurring intention is met by its first successful
completion of an occurrence (a skip is not one). Should the series end with
none — cancelled, expired, or its RRULE (or expires_at) running out on a
skip — what waits on it is cancelled by the same cascade as a cancel or an
expiry, the last with the reason "dependency <id> ended without success".
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from ledger.services import event_append, json_storage_error
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.provenance import PrivacyClass, RetentionClass, SourceType
from piper.tenancy.clock import now_for
from piper.tenancy.models import Agent

from ..models import (
    TERMINAL,
    Intention,
    IntentionDependency,
    IntentionStatus,
    Thread,
    TriggerType,
)
from . import triggers
from .dependencies import (
    ENDED_WITHOUT_SUCCESS,
    dependents_cancel,
    lock_dependencies,
    lock_dependents_to_cancel,
    lock_dependents_to_release,
    own_dependencies,
    reaches,
    refuse_ended,
    release_dependents,
    unmet,
)
from .escalation import escalate_locked, escalation_policy_check
from .firing import fire_safely
from .transitions import intention_event, move_locked, record_transition


@dataclass(frozen=True)
class IntentionInput:
    description: str
    trigger_type: str
    trigger_spec: dict = field(default_factory=dict)
    thread: Thread | None = None
    priority: int = 0
    not_before: datetime | None = None
    due_at: datetime | None = None
    rrule: str = ""
    expires_at: datetime | None = None
    dependencies: Sequence[uuid.UUID] = ()
    required_context: list = field(default_factory=list)
    completion_criteria: str = ""
    retry_policy: dict = field(default_factory=dict)
    escalation_policy: dict = field(default_factory=dict)
    source_session: str = ""
    privacy_class: str = PrivacyClass.INTERNAL
    retention_class: str = RetentionClass.STANDARD


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _check_times(data: IntentionInput) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    for name in ("not_before", "due_at", "expires_at"):
        moment = getattr(data, name)
        if moment is not None and moment.tzinfo is None:
            errors[name] = ["must carry a time zone, e.g. 2026-01-31T09:00:00Z"]
    if errors:
        return errors
    if data.not_before and data.due_at and data.due_at < data.not_before:
        errors["due_at"] = ["must not be before not_before"]
    if data.trigger_type == TriggerType.TIME and data.due_at is None and data.not_before is None:
        errors["due_at"] = ["a time trigger needs due_at (or not_before)"]
    if data.rrule and data.trigger_type != TriggerType.TIME:
        errors["rrule"] = ["recurrence applies to time triggers"]
    start = data.due_at or data.not_before
    if data.expires_at and start and data.expires_at <= start:
        errors["expires_at"] = ["must be after due_at (and not_before)"]
    return errors


MAX_REASON = 300


def _check_reason(reason: Any, *, required: bool = False) -> str:
    if not isinstance(reason, str) or len(reason) > MAX_REASON or (required and not reason.strip()):
        raise InvalidInput(
            f"reason: {'required, ' if required else ''}text of at most {MAX_REASON} characters",
            details={"reason": ["invalid"]},
        )
    return reason


def _check_retry_policy(policy: Any) -> None:
    if not isinstance(policy, dict):
        raise InvalidInput(
            "retry_policy: a JSON object", details={"retry_policy": ["must be an object"]}
        )
    problems = [
        f"unknown key {k!r}" for k in sorted(set(policy) - {"max_retries", "backoff_seconds"})
    ]
    for key, least in (("max_retries", 0), ("backoff_seconds", 1)):
        value = policy.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < least
        ):
            problems.append(f"{key} must be a whole number >= {least}")
    if problems:
        raise InvalidInput(f"retry_policy: {problems[0]}", details={"retry_policy": problems})


def intention_create(*, agent: Agent, data: IntentionInput) -> Intention:
    """Make an intention. Raises InvalidInput (bad spec, times, rrule),
    Unprocessable (unknown dependency, or one that ended undone: it would wait
    forever), before writing anything. A dependency intention whose
    dependencies are already complete fires at once.

    The dependencies are locked (FOR SHARE) before their status is read, so a
    concurrent cancel, expiry or completion of one is either seen here (422
    `dependency_ended`, or not blocked) or waits for this commit and then
    sees the new intention among its dependents: it never stays blocked on a
    dependency that ended, nor misses a release."""
    if not isinstance(data.description, str) or not data.description.strip():
        raise InvalidInput("describe what is to be done", details={"description": ["required"]})
    if problem := json_storage_error(data.description, path="description", depth=1):
        raise InvalidInput(problem, details={"description": [problem]})
    spec = triggers.validate_spec(data.trigger_type, data.trigger_spec)
    _check_retry_policy(data.retry_policy)
    escalation_policy_check(data.escalation_policy)
    errors = _check_times(data)
    if errors:
        name, messages = next(iter(errors.items()))
        raise InvalidInput(f"{name}: {messages[0]}", details=errors)
    for name in ("required_context", "escalation_policy"):
        if problem := json_storage_error(getattr(data, name), path=name, depth=1):
            raise InvalidInput(problem, details={name: [problem]})
    if data.thread is not None and data.thread.agent_id != agent.pk:
        raise NotFound(f"thread {data.thread.pk} not found")
    # A time trigger with only not_before fires from that moment.
    due_at = data.due_at or (data.not_before if data.trigger_type == TriggerType.TIME else None)
    if data.rrule:
        start = data.due_at or data.not_before
        due_at = triggers.occurrences_exist(data.rrule, start)
    dependency_ids = list(dict.fromkeys(data.dependencies))
    if data.trigger_type == TriggerType.DEPENDENCY and not dependency_ids:
        raise InvalidInput(
            "a dependency trigger needs dependencies", details={"dependencies": ["required"]}
        )
    with transaction.atomic():
        lock_dependencies(agent, dependency_ids)
        dependencies = own_dependencies(agent, dependency_ids)
        now = now_for(agent.pk)
        refuse_ended(dependencies)
        intention = Intention(
            agent=agent,
            thread=data.thread,
            description=data.description.strip(),
            priority=data.priority,
            trigger_type=data.trigger_type,
            trigger_spec=spec,
            not_before=data.not_before,
            due_at=due_at,
            rrule=data.rrule,
            expires_at=data.expires_at,
            required_context=data.required_context,
            completion_criteria=data.completion_criteria,
            retry_policy=data.retry_policy,
            escalation_policy=data.escalation_policy,
            source_session=data.source_session,
            status=IntentionStatus.BLOCKED if unmet(dependencies) else IntentionStatus.ACTIVE,
            last_rehearsed_at=now,
        )
        intention.source_event = event_append(
            agent=agent,
            event_type="intention.created",
            payload={
                "intention_id": str(intention.pk),
                "description": intention.description,
                "trigger_type": intention.trigger_type,
                "trigger_spec": spec,
                "due_at": due_at.isoformat() if due_at else None,
                "not_before": data.not_before.isoformat() if data.not_before else None,
                "rrule": data.rrule,
                "dependencies": [str(d.pk) for d in dependencies],
                "thread_id": str(data.thread.pk) if data.thread else None,
                # The rest of the row, so a rebuild from the ledger gives it back.
                "status": intention.status,
                "priority": intention.priority,
                "expires_at": _iso(data.expires_at),
                "required_context": data.required_context,
                "completion_criteria": data.completion_criteria,
                "retry_policy": data.retry_policy,
                "escalation_policy": data.escalation_policy,
                "at": intention.last_rehearsed_at.isoformat(),
            },
            session_id=data.source_session,
            source_type=SourceType.AGENT_INFERENCE,
            privacy_class=data.privacy_class,
            retention_class=data.retention_class,
        )
        # Event triggers match only what happens after the intention exists.
        intention.armed_after_seq = intention.source_event.seq
        intention.created_at = intention.updated_at = intention.source_event.recorded_at
        intention.save(force_insert=True)
        IntentionDependency.objects.bulk_create(
            [IntentionDependency(intention=intention, depends_on=d) for d in dependencies]
        )
        record_transition(
            intention,
            intention.status,
            at=now,
            reason="created",
            event=intention.source_event,
            from_status="",
        )
        if intention.trigger_type == TriggerType.DEPENDENCY and not unmet(dependencies):
            # Its dependencies were already done: its trigger has happened.
            fire_safely(
                intention_id=intention.pk, cause=TriggerType.DEPENDENCY, at=now_for(agent.pk)
            )
    intention.refresh_from_db()
    return intention


def intention_set_dependencies(
    *, agent: Agent, intention: Intention, dependencies: Sequence[uuid.UUID]
) -> Intention:
    """Replace what an armed intention waits for. A cycle is refused (422), as
    is a dependency that ended undone (cancelled or expired, never completed);
    a dependency trigger must keep at least one dependency. The new
    dependencies are locked as in intention_create, so one ending or completing
    meanwhile is seen here or sees the new links."""
    ids = list(dict.fromkeys(dependencies))
    with transaction.atomic():
        # The new dependencies before the intention: their cascades lock them first too.
        lock_dependencies(agent, ids)
        locked = _locked(agent, intention.pk)
        if locked.status not in (IntentionStatus.ACTIVE, IntentionStatus.BLOCKED):
            raise Conflict(
                f"intention is {locked.status}; only a waiting one can change what it waits for",
                code="not_armed",
            )
        if locked.trigger_type == TriggerType.DEPENDENCY and not ids:
            raise InvalidInput(
                "a dependency trigger needs dependencies", details={"dependencies": ["required"]}
            )
        targets = own_dependencies(agent, ids)
        refuse_ended(targets)
        if locked.pk in ids or reaches(ids, locked.pk):
            raise Unprocessable(
                "these dependencies would make a cycle: an intention would wait for itself",
                code="dependency_cycle",
                details={"dependencies": [str(i) for i in ids]},
            )
        IntentionDependency.objects.filter(intention=locked).delete()
        IntentionDependency.objects.bulk_create(
            [IntentionDependency(intention=locked, depends_on=t) for t in targets]
        )
        intention_event(
            locked,
            "intention.dependencies_set",
            {"dependencies": [str(i) for i in ids]},
            source_type=SourceType.AGENT_INFERENCE,
        )
        now = now_for(agent.pk)
        if unmet(targets):
            if locked.status == IntentionStatus.ACTIVE:
                move_locked(locked, IntentionStatus.BLOCKED, now, "waiting for dependencies")
        elif locked.status == IntentionStatus.BLOCKED:
            if locked.trigger_type == TriggerType.DEPENDENCY:
                fire_safely(intention_id=locked.pk, cause=TriggerType.DEPENDENCY, at=now)
            else:  # nothing left to wait for: its own trigger decides
                move_locked(locked, IntentionStatus.ACTIVE, now, "dependencies met")
    locked.refresh_from_db()
    return locked


def _locked(agent: Agent, intention_id: uuid.UUID) -> Intention:
    intention = (
        Intention.objects.select_for_update(of=("self",), no_key=True)
        .select_related("agent", "source_event")
        .filter(agent=agent, pk=intention_id)
        .first()
    )
    if intention is None:
        raise NotFound(f"intention {intention_id} not found")
    return intention


def intention_start(*, agent: Agent, intention_id: uuid.UUID) -> Intention:
    """The agent starts on a due intention."""
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        move_locked(intention, IntentionStatus.EXECUTING, now_for(agent.pk), "started")
    return intention


def intention_complete(
    *, agent: Agent, intention_id: uuid.UUID, evidence: Any = None, occurrence: int | None = None
) -> Intention:
    """Done. A recurring intention moves on to its next occurrence (or ends when
    the rule has none); dependents whose dependencies are all done fire.
    Completing a cancelled or expired intention is a Conflict. With
    `occurrence`, only that occurrence is completed: Conflict stale_occurrence
    when the intention has moved past it (a concurrent or repeated completion
    would otherwise complete the next occurrence too)."""
    return _finish(agent, intention_id, evidence=evidence, skipped=False, occurrence=occurrence)


def intention_skip(
    *, agent: Agent, intention_id: uuid.UUID, reason: str = "", occurrence: int | None = None
) -> Intention:
    """Skip this occurrence of a recurring intention: it moves to the next. A
    skip never releases dependents. When it was the last occurrence and none
    was ever completed, the series ended without success: the blocked
    intentions waiting on it are cancelled (dependents_cancel), with the
    reason "dependency <id> ended without success". `occurrence` as for
    intention_complete."""
    reason = _check_reason(reason)
    return _finish(
        agent,
        intention_id,
        evidence={"skipped": True, "reason": reason},
        skipped=True,
        occurrence=occurrence,
    )


def _finish(
    agent: Agent,
    intention_id: uuid.UUID,
    *,
    evidence: Any,
    skipped: bool,
    occurrence: int | None = None,
) -> Intention:
    if evidence is not None and (problem := json_storage_error(evidence, path="evidence")):
        raise InvalidInput(problem, details={"evidence": [problem]})
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        # Lock order: intention rows, then the ledger's chain head (the first
        # move_locked takes it). Dependents are locked now, not when released.
        lock_dependents_to_release(intention)
        if skipped and not intention.rrule:
            raise Conflict(
                "only a recurring intention can skip an occurrence; cancel a one-shot",
                code="not_recurring",
            )
        if intention.status in TERMINAL:
            raise Conflict(
                f"intention is {intention.status}; it cannot be completed",
                code="invalid_transition",
                details={"status": intention.status, "to": "completed"},
            )
        if occurrence is not None and occurrence != intention.occurrence:
            raise Conflict(
                f"occurrence {occurrence} is not pending: the intention is at occurrence "
                f"{intention.occurrence}; read it again",
                code="stale_occurrence",
                details={"current_occurrence": intention.occurrence, "occurrence": occurrence},
            )
        following = None
        if intention.rrule:
            this_one = intention.due_at or intention.not_before
            following = triggers.next_occurrence(intention.rrule, _first_start(intention), this_one)
            if intention.expires_at is not None and following is not None:
                following = following if following < intention.expires_at else None
        # A last occurrence skipped: if none was ever done, nothing waiting on
        # the series can run (lock_dependents_to_cancel finds nothing if one was).
        doomed = lock_dependents_to_cancel(intention) if skipped and following is None else []
        now = now_for(agent.pk)
        move_locked(
            intention,
            IntentionStatus.COMPLETED,
            now,
            "skipped" if skipped else "completed",
            completion_evidence=evidence,
        )
        if following is not None:
            move_locked(
                intention,
                IntentionStatus.ACTIVE,
                now,
                "next occurrence",
                due_at=following,
                occurrence=intention.occurrence + 1,
                completion_evidence=None,
                attempts=0,
                escalated_at=None,  # a new occurrence may escalate again
                escalation=None,
            )
        if not skipped:
            release_dependents(intention=intention, at=now)
        elif doomed:
            dependents_cancel(intention, doomed, at=now, how=ENDED_WITHOUT_SUCCESS)
    intention.refresh_from_db()
    return intention


def _first_start(intention: Intention) -> datetime:
    """The recurrence's anchor: the first occurrence's due time, from the creation event."""
    payload = intention.source_event.payload
    return (
        parse_datetime(payload.get("due_at") or payload.get("not_before") or "") or intention.due_at
    )


def intention_fail(*, agent: Agent, intention_id: uuid.UUID, reason: str) -> Intention:
    """The attempt failed. Within retry_policy.max_retries a time intention is
    re-armed after backoff_seconds, doubling each time; beyond them it stays
    due. Once attempts reach escalation_policy.after_failures it is escalated,
    in the same transaction (services/escalation.py; at most once per
    occurrence, retries included)."""
    reason = _check_reason(reason, required=True)
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        if intention.status not in (IntentionStatus.DUE, IntentionStatus.EXECUTING):
            raise Conflict(
                f"intention is {intention.status}; only a due or executing one can fail",
                code="invalid_transition",
            )
        policy = intention.retry_policy or {}
        attempts = intention.attempts + 1
        now = now_for(agent.pk)
        if attempts <= policy.get("max_retries", 0) and intention.trigger_type == TriggerType.TIME:
            backoff = timedelta(seconds=policy.get("backoff_seconds", 60) * 2 ** (attempts - 1))
            # A retry is a new occurrence: it may fire again, exactly once.
            move_locked(
                intention,
                IntentionStatus.ACTIVE,
                now,
                f"failed: {reason}; retry {attempts}",
                due_at=now + backoff,
                occurrence=intention.occurrence + 1,
                attempts=attempts,
            )
        elif intention.status == IntentionStatus.EXECUTING:
            move_locked(
                intention,
                IntentionStatus.DUE,
                now,
                f"failed: {reason}; escalate",
                attempts=attempts,
            )
        else:
            event = intention_event(
                intention,
                "intention.failed",
                {
                    "reason": reason,
                    "escalate": intention.escalation_policy,
                    "attempts": attempts,
                    "at": now.isoformat(),
                },
                source_type=SourceType.AGENT_INFERENCE,
            )
            Intention.objects.filter(pk=intention.pk).update(
                attempts=attempts, updated_at=event.recorded_at
            )
            intention.attempts = attempts
        escalate_locked(intention, at=now)
    intention.refresh_from_db()
    return intention


def intention_set_escalation_policy(
    *, agent: Agent, intention_id: uuid.UUID, policy: dict
) -> Intention:
    """Replace an open intention's escalation_policy ({} for none). InvalidInput
    for a policy of the wrong shape; Conflict not_open for a completed,
    cancelled or expired one. Should the new policy's condition hold already,
    the intention is escalated now (unless this occurrence already was: a new
    policy never escalates an occurrence twice)."""
    escalation_policy_check(policy)
    if problem := json_storage_error(policy, path="escalation_policy", depth=1):
        raise InvalidInput(problem, details={"escalation_policy": [problem]})
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        if intention.status in TERMINAL:
            raise Conflict(
                f"intention is {intention.status}; only an open one can change its escalation",
                code="not_open",
                details={"status": intention.status},
            )
        event = intention_event(
            intention,
            "intention.escalation_policy_set",
            {"escalation_policy": policy, "previous": intention.escalation_policy},
            source_type=SourceType.AGENT_INFERENCE,
        )
        Intention.objects.filter(pk=intention.pk).update(
            escalation_policy=policy, updated_at=event.recorded_at
        )
        intention.escalation_policy = policy
        escalate_locked(intention, at=now_for(agent.pk))
    intention.refresh_from_db()
    return intention


def intention_cancel(*, agent: Agent, intention_id: uuid.UUID, reason: str = "") -> Intention:
    """Cancelled intentions never fire again. Idempotent for a cancelled one
    (no event, no transition). Its blocked dependents that can now never run
    are cancelled with it, in the same transaction (dependents_cancel)."""
    reason = _check_reason(reason)
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        if intention.status == IntentionStatus.CANCELLED:
            return intention
        doomed = lock_dependents_to_cancel(intention)  # before the first ledger write: lock order
        now = now_for(agent.pk)
        move_locked(intention, IntentionStatus.CANCELLED, now, reason or "cancelled")
        dependents_cancel(intention, doomed, at=now)
    return intention


def intention_expire(*, agent: Agent, intention_id: uuid.UUID) -> Intention:
    """Expire it now. Its blocked dependents that can now never run are
    cancelled with it (dependents_cancel)."""
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        doomed = lock_dependents_to_cancel(intention)
        now = now_for(agent.pk)
        move_locked(intention, IntentionStatus.EXPIRED, now, "expired by request")
        dependents_cancel(intention, doomed, at=now)
    return intention


def intention_fire(*, agent: Agent, intention_id: uuid.UUID) -> Intention:
    """Fire a manual intention (or any armed one) now."""
    intention = Intention.objects.filter(agent=agent, pk=intention_id).first()
    if intention is None:
        raise NotFound(f"intention {intention_id} not found")
    if intention.status not in (IntentionStatus.ACTIVE, IntentionStatus.BLOCKED):
        raise Conflict(
            f"intention is {intention.status}; only an armed one can fire", code="not_armed"
        )
    fire_safely(
        intention_id=intention.pk,
        occurrence=intention.occurrence,
        cause=TriggerType.MANUAL,
        at=now_for(agent.pk),
    )
    intention.refresh_from_db()
    return intention
