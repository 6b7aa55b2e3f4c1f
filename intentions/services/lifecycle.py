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

from django.db import connection, transaction
from django.utils.dateparse import parse_datetime

from ledger.services import event_append, json_storage_error
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.provenance import PrivacyClass, RetentionClass, SourceType
from piper.tenancy.clock import now_for
from piper.tenancy.models import Agent

from ..models import (
    TERMINAL,
    TRANSITIONS,
    Intention,
    IntentionDependency,
    IntentionStatus,
    Thread,
    TriggerType,
)
from . import engine, triggers
from .escalation import escalate_locked, escalation_policy_check


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


def _ledger(intention: Intention, event_type: str, payload: dict):
    return event_append(
        agent=intention.agent,
        event_type=event_type,
        payload={"intention_id": str(intention.pk), **payload},
        session_id=intention.inherited_by or intention.source_session,
        source_type=SourceType.AGENT_INFERENCE,
    )


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
        _lock_dependencies(agent, dependency_ids)
        dependencies = _own_intentions(agent, dependency_ids)
        now = now_for(agent.pk)
        _refuse_ended(dependencies)
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
            status=IntentionStatus.BLOCKED
            if engine.unmet(dependencies)
            else IntentionStatus.ACTIVE,
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
        engine.record_transition(
            intention,
            intention.status,
            at=now,
            reason="created",
            event=intention.source_event,
            from_status="",
        )
        if intention.trigger_type == TriggerType.DEPENDENCY and not engine.unmet(dependencies):
            # Its dependencies were already done: its trigger has happened.
            engine.fire_safely(
                intention_id=intention.pk, cause=TriggerType.DEPENDENCY, at=now_for(agent.pk)
            )
    intention.refresh_from_db()
    return intention


def _lock_dependencies(agent: Agent, ids: Sequence[uuid.UUID]) -> None:
    """Lock these intentions FOR SHARE: a cancel, expiry or completion of one
    (FOR NO KEY UPDATE) waits for this transaction, and this one for theirs.

    In the lock order of the cascades (dependents_lock, lock_dependents): an
    intention before the ones that wait on it. So among `ids` one that another
    of them (transitively) waits on is locked first; the rest in pk order."""
    if not ids:
        return
    order = sorted(ids)
    if len(ids) > 1:
        with connection.cursor() as cursor:
            # How many of `ids` each one waits on, directly or not: an intention
            # waits on fewer of them than anything waiting on it.
            cursor.execute(
                """
                WITH RECURSIVE up(start, id) AS (
                    SELECT d.intention_id, d.depends_on_id
                    FROM intentions_intentiondependency d WHERE d.intention_id = ANY(%(ids)s)
                  UNION
                    SELECT u.start, d.depends_on_id
                    FROM up u JOIN intentions_intentiondependency d ON d.intention_id = u.id
                )
                SELECT start, count(*) FROM up WHERE id = ANY(%(ids)s) GROUP BY start
                """,
                {"ids": order},
            )
            above = dict(cursor.fetchall())
        order.sort(key=lambda pk: (above.get(pk, 0), pk))
    with connection.cursor() as cursor:
        # Rows are locked as the sort hands them out: in `order`. Django's
        # select_for_update has no FOR SHARE (two creations may share one).
        cursor.execute(
            """
            SELECT id FROM intentions_intention
            WHERE agent_id = %s AND id = ANY(%s)
            ORDER BY array_position(%s::uuid[], id)
            FOR SHARE
            """,
            [agent.pk, order, order],
        )


def _own_intentions(agent: Agent, ids: Sequence[uuid.UUID]) -> list[Intention]:
    found = {i.pk: i for i in Intention.objects.filter(agent=agent, pk__in=ids)}
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise Unprocessable(
            f"dependency {missing[0]} does not exist",
            code="unknown_intention",
            details={"dependencies": missing},
        )
    return [found[i] for i in ids]


def _refuse_ended(dependencies: Sequence[Intention]) -> None:
    """Waiting on an intention that ended undone would be waiting forever."""
    ended = [d for d in dependencies if ended_undone(d)]
    if ended:
        first = ended[0]
        how = (
            f"{ENDED_WITHOUT_SUCCESS} (every occurrence was skipped)"
            if first.status == IntentionStatus.COMPLETED
            else f"is {first.status} and was never completed"
        )
        raise Unprocessable(
            f"dependency {first.pk} {how}: this intention could never have every dependency met",
            code="dependency_ended",
            details={"dependencies": [str(d.pk) for d in ended]},
        )


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
        _lock_dependencies(agent, ids)
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
        targets = _own_intentions(agent, ids)
        _refuse_ended(targets)
        if locked.pk in ids or _reaches(ids, locked.pk):
            raise Unprocessable(
                "these dependencies would make a cycle: an intention would wait for itself",
                code="dependency_cycle",
                details={"dependencies": [str(i) for i in ids]},
            )
        IntentionDependency.objects.filter(intention=locked).delete()
        IntentionDependency.objects.bulk_create(
            [IntentionDependency(intention=locked, depends_on=t) for t in targets]
        )
        _ledger(locked, "intention.dependencies_set", {"dependencies": [str(i) for i in ids]})
        now = now_for(agent.pk)
        if engine.unmet(targets):
            if locked.status == IntentionStatus.ACTIVE:
                _move(locked, IntentionStatus.BLOCKED, now, "waiting for dependencies")
        elif locked.status == IntentionStatus.BLOCKED:
            if locked.trigger_type == TriggerType.DEPENDENCY:
                engine.fire_safely(intention_id=locked.pk, cause=TriggerType.DEPENDENCY, at=now)
            else:  # nothing left to wait for: its own trigger decides
                _move(locked, IntentionStatus.ACTIVE, now, "dependencies met")
    locked.refresh_from_db()
    return locked


def _reaches(starts: Sequence[uuid.UUID], target: uuid.UUID) -> bool:
    """Does any of `starts` (transitively) depend on `target`?"""
    if not starts:
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE reach(id) AS (
                SELECT unnest(%s::uuid[])
                UNION
                SELECT d.depends_on_id FROM intentions_intentiondependency d JOIN reach r ON d.intention_id = r.id
            )
            SELECT EXISTS (SELECT 1 FROM reach WHERE id = %s)
            """,
            [list(starts), target],
        )
        return cursor.fetchone()[0]


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


def _move(intention: Intention, to_status: str, at: datetime, reason: str, **fields: Any) -> None:
    if to_status not in TRANSITIONS[intention.status]:
        raise Conflict(
            f"intention is {intention.status}; it cannot become {to_status}",
            code="invalid_transition",
            details={"status": intention.status, "to": to_status},
        )
    event_type = (
        "intention.rearmed" if to_status == IntentionStatus.ACTIVE else f"intention.{to_status}"
    )
    event = _ledger(
        intention,
        event_type,
        {
            "from": intention.status,
            "to": to_status,
            "reason": reason,
            "occurrence": intention.occurrence,
            "at": at.isoformat(),
            # The columns the move sets besides the status (a rebuild sets them too).
            "set": {
                name: value.isoformat() if isinstance(value, datetime) else value
                for name, value in fields.items()
            },
        },
    )
    engine.record_transition(intention, to_status, at=at, reason=reason, event=event)
    changed = Intention.objects.filter(pk=intention.pk, status=intention.status).update(
        status=to_status, updated_at=event.recorded_at, **fields
    )
    if not changed:  # cannot happen under the row lock; guard anyway
        raise Conflict("intention changed concurrently; retry", code="concurrent_change")
    intention.status = to_status
    for name, value in fields.items():
        setattr(intention, name, value)


def intention_start(*, agent: Agent, intention_id: uuid.UUID) -> Intention:
    """The agent starts on a due intention."""
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        _move(intention, IntentionStatus.EXECUTING, now_for(agent.pk), "started")
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
        # _move takes it). Dependents are locked now, not when released.
        engine.lock_dependents(intention)
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
        # the series can run (dependents_lock finds nothing if one was).
        doomed = dependents_lock(intention) if skipped and following is None else []
        now = now_for(agent.pk)
        _move(
            intention,
            IntentionStatus.COMPLETED,
            now,
            "skipped" if skipped else "completed",
            completion_evidence=evidence,
        )
        if following is not None:
            _move(
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
            engine.release_dependents(intention=intention, at=now)
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
            _move(
                intention,
                IntentionStatus.ACTIVE,
                now,
                f"failed: {reason}; retry {attempts}",
                due_at=now + backoff,
                occurrence=intention.occurrence + 1,
                attempts=attempts,
            )
        elif intention.status == IntentionStatus.EXECUTING:
            _move(
                intention,
                IntentionStatus.DUE,
                now,
                f"failed: {reason}; escalate",
                attempts=attempts,
            )
        else:
            event = _ledger(
                intention,
                "intention.failed",
                {
                    "reason": reason,
                    "escalate": intention.escalation_policy,
                    "attempts": attempts,
                    "at": now.isoformat(),
                },
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
        event = _ledger(
            intention,
            "intention.escalation_policy_set",
            {"escalation_policy": policy, "previous": intention.escalation_policy},
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
        doomed = dependents_lock(intention)  # before the first ledger write: lock order
        now = now_for(agent.pk)
        _move(intention, IntentionStatus.CANCELLED, now, reason or "cancelled")
        dependents_cancel(intention, doomed, at=now)
    return intention


def intention_expire(*, agent: Agent, intention_id: uuid.UUID) -> Intention:
    """Expire it now. Its blocked dependents that can now never run are
    cancelled with it (dependents_cancel)."""
    with transaction.atomic():
        intention = _locked(agent, intention_id)
        doomed = dependents_lock(intention)
        now = now_for(agent.pk)
        _move(intention, IntentionStatus.EXPIRED, now, "expired by request")
        dependents_cancel(intention, doomed, at=now)
    return intention


# How a recurring series that ran out on a skip, never done, ended (in reasons).
ENDED_WITHOUT_SUCCESS = "ended without success"


def ended_undone(intention: Intention) -> bool:
    """Has it ended (cancelled, expired, or a series run out — completed — on a
    skip) without ever being done? Whatever waits on it never can run.
    intention_fail never ends one: beyond its retries it stays due."""
    return intention.status in TERMINAL and engine.unmet([intention])


def dependents_lock(intention: Intention) -> list[Intention]:
    """Lock, in pk order, every blocked intention that waits — directly or
    through other blocked ones — on `intention`, should it end undone; return
    them. Call it with `intention` locked and before the first ledger write:
    the lock order everywhere is intention rows (this one, then its dependents
    in pk order, as lock_dependents), then the ledger's chain head.

    An intention that has ever been done (a recurring one completed, not
    skipped, at least once) releases its dependents when it is completed and
    dooms none when it ends: nothing is locked for it."""
    ids = _waiting_on(intention)
    if not ids:
        return []
    return list(
        Intention.objects.select_for_update(of=("self",), no_key=True)
        .select_related("agent")
        .filter(agent_id=intention.agent_id, pk__in=ids, status=IntentionStatus.BLOCKED)
        .order_by("pk")
    )


def _waiting_on(intention: Intention) -> list[uuid.UUID]:
    """dependents_lock's candidates, unlocked: the blocked intentions that wait
    on `intention` directly, or through blocked ones never done."""
    if not engine.unmet([intention]):
        return []
    with connection.cursor() as cursor:
        # Candidates only: dependents_cancel re-walks the links under the locks.
        cursor.execute(
            """
            WITH RECURSIVE waiting(id) AS (
                SELECT d.intention_id
                FROM intentions_intentiondependency d
                JOIN intentions_intention i ON i.id = d.intention_id
                WHERE d.depends_on_id = %(root)s AND i.agent_id = %(agent)s
                  AND i.status = 'blocked'
              UNION
                SELECT d.intention_id
                FROM waiting w
                JOIN intentions_intentiondependency d ON d.depends_on_id = w.id
                JOIN intentions_intention i ON i.id = d.intention_id
                WHERE i.agent_id = %(agent)s AND i.status = 'blocked'
                  AND NOT EXISTS (
                      SELECT 1 FROM intentions_transition t
                      WHERE t.intention_id = w.id AND t.to_status = 'completed'
                        AND t.reason <> 'skipped'
                  )
            )
            SELECT id FROM waiting
            """,
            {"root": intention.pk, "agent": intention.agent_id},
        )
        return [row[0] for row in cursor.fetchall()]


def dependents_cancel(
    intention: Intention, locked: Sequence[Intention], *, at: datetime, how: str = ""
) -> list[tuple[Intention, str]]:
    """`intention` has just ended undone (cancelled, expired, or a series run
    out on a skip: ended_undone). Cancel each of the `locked`
    (dependents_lock) that waits on it, or on one cancelled here, and is still
    blocked: it could never have every dependency met. Each gets the
    transition and `intention.cancelled` event of any cancel, with the reason
    "dependency <id> <how>" naming the dependency that doomed it — `how` is
    its status unless given ("ended without success"). Returns those
    cancelled, with their reasons, in the order cancelled.

    Dependents that are not blocked (fired, executing, finished) are left
    alone, as are blocked ones whose chain to `intention` passes through an
    intention that was ever done. Another agent's intentions are never
    touched (dependencies are the agent's own)."""
    doomed = _doomed(intention, locked, how=how or intention.status)
    for dependent, reason in doomed:
        _move(dependent, IntentionStatus.CANCELLED, at, reason)
    return doomed


def _doomed(
    intention: Intention, candidates: Sequence[Intention], *, how: str
) -> list[tuple[Intention, str]]:
    """Which of `candidates` dependents_cancel cancels once `intention` ended
    `how`, and why, in order: a walk of the links, writing nothing."""
    if not candidates:
        return []
    by_pk = {i.pk: i for i in candidates}
    waits_on: dict[uuid.UUID, list[Intention]] = {}
    for dependent_id, dependency_id in (
        IntentionDependency.objects.filter(intention_id__in=by_pk)
        .order_by("intention_id")
        .values_list("intention_id", "depends_on_id")
    ):
        waits_on.setdefault(dependency_id, []).append(by_pk[dependent_id])
    doomed: list[tuple[Intention, str]] = []
    taken: set[uuid.UUID] = set()
    ended = [(intention, how)]
    while ended:
        dependency, how = ended.pop(0)
        for dependent in waits_on.get(dependency.pk, ()):
            if dependent.status != IntentionStatus.BLOCKED or dependent.pk in taken:
                continue  # doomed here already, through another dependency
            taken.add(dependent.pk)
            doomed.append((dependent, f"dependency {dependency.pk} {how}"))
            if engine.unmet([dependent]):  # never done: its own dependents are doomed too
                ended.append((dependent, IntentionStatus.CANCELLED))
    return doomed


@dataclass(frozen=True)
class Swept:
    intention: Intention
    reason: str


def dependents_sweep(*, agent: Agent | None = None, dry_run: bool = False) -> list[Swept]:
    """Cancel the blocked intentions still waiting on a dependency that ended
    undone (ended_undone) — left from before the cascade existed, or missed by
    it — exactly as the cascade would have: each with its transition, its
    `intention.cancelled` event and the reason "dependency <id> <how>". With
    `agent`, only its intentions. Returns them in the order cancelled (per
    ended dependency, in pk order). Idempotent: a second run finds nothing.

    `dry_run` writes and locks nothing and returns what a run would cancel.
    Otherwise each ended dependency is one transaction, locking as
    intention_cancel does (the dependency, its dependents, the chain head)."""
    swept: list[Swept] = []
    listed: set[uuid.UUID] = set()
    for root_id in _ended_with_blocked_dependents(agent):
        with transaction.atomic():
            query = Intention.objects.select_related("agent").filter(pk=root_id)
            if not dry_run:
                query = query.select_for_update(of=("self",), no_key=True)
            root = query.first()
            if root is None or not ended_undone(root):
                continue
            how = ENDED_WITHOUT_SUCCESS if root.status == IntentionStatus.COMPLETED else ""
            if dry_run:
                candidates = (
                    Intention.objects.select_related("agent")
                    .filter(
                        agent_id=root.agent_id,
                        pk__in=_waiting_on(root),
                        status=IntentionStatus.BLOCKED,
                    )
                    .order_by("pk")
                )
                doomed = _doomed(root, list(candidates), how=how or root.status)
            else:
                locked = dependents_lock(root)
                doomed = dependents_cancel(root, locked, at=now_for(root.agent_id), how=how)
        for intention, reason in doomed:
            # A dry run would list one waiting on two ended dependencies twice.
            if intention.pk not in listed:
                listed.add(intention.pk)
                swept.append(Swept(intention, reason))
    return swept


def _ended_with_blocked_dependents(agent: Agent | None) -> list[uuid.UUID]:
    """Intentions that ended without ever being done, with a blocked intention
    still waiting on them directly (a chain below it is walked from there)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT DISTINCT r.id
            FROM intentions_intentiondependency d
            JOIN intentions_intention w ON w.id = d.intention_id
            JOIN intentions_intention r ON r.id = d.depends_on_id
            WHERE w.status = 'blocked' AND w.agent_id = r.agent_id
              AND (%(agent)s::uuid IS NULL OR r.agent_id = %(agent)s::uuid)
              AND r.status IN ('completed', 'cancelled', 'expired')
              AND NOT EXISTS (
                  SELECT 1 FROM intentions_transition t
                  WHERE t.intention_id = r.id AND t.to_status = 'completed'
                    AND t.reason <> 'skipped'
              )
            ORDER BY r.id
            """,
            {"agent": agent.pk if agent else None},
        )
        return [row[0] for row in cursor.fetchall()]


def intention_fire(*, agent: Agent, intention_id: uuid.UUID) -> Intention:
    """Fire a manual intention (or any armed one) now."""
    intention = Intention.objects.filter(agent=agent, pk=intention_id).first()
    if intention is None:
        raise NotFound(f"intention {intention_id} not found")
    if intention.status not in (IntentionStatus.ACTIVE, IntentionStatus.BLOCKED):
        raise Conflict(
            f"intention is {intention.status}; only an armed one can fire", code="not_armed"
        )
    engine.fire_safely(
        intention_id=intention.pk,
        occurrence=intention.occurrence,
        cause=TriggerType.MANUAL,
        at=now_for(agent.pk),
    )
    intention.refresh_from_db()
    return intention
