"""Escalation: an intention that keeps failing, or sits due without being acted
on, is escalated — exactly once per occurrence.

An intention's `escalation_policy` (POLICY_FIELDS; `{}` for never):

    {"after_failures": 3,        # escalate once attempts (failed tries) reach 3
     "overdue_seconds": 3600,    # … or once it has been due, not started, for an hour
     "notify": ["webhook"],      # also POST it through the webhook outbox
     "to_session": "oncall",     # who should take it (recorded and delivered)
     "note": "page the owner"}   # free text, delivered with it

At least one of after_failures and overdue_seconds is required. The failure
condition is checked the moment a failure is reported (intention_fail) and by
every engine cycle; the overdue condition by every engine cycle (escalate_due),
against the engine's clock and the time the intention last became due (it
fired, or a failed attempt sent it back from executing): time spent executing
is never overdue time.

Escalating writes, in one transaction under the intention's row lock: an
Escalation row (unique per intention and occurrence), an `intention.escalated`
ledger event, `escalated_at` and `escalation` on the intention (a
compare-and-set on escalated_at IS NULL), a pending item in its thread, and —
when notify asks for it and the agent has an active webhook — an outbox
message. Two workers, a repeated cycle or a redelivered task escalate nothing
more. escalated_at stays set through the retries of an occurrence
(intention_fail re-arms a time intention as a new occurrence: the same
commitment, so it does not escalate again); it is cleared when the next
occurrence of a recurring intention is armed (complete or skip).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, F, FloatField, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from piper.errors import InvalidInput
from piper.ids import uuid7
from piper.provenance import SourceType
from piper.tenancy.clock import now_for, scan_scope
from piper.tenancy.models import Agent

from ..models import (
    Escalation,
    Intention,
    IntentionStatus,
    OutboxMessage,
    PendingItem,
    Transition,
    Webhook,
)
from .transitions import intention_event

logger = logging.getLogger(__name__)

OPEN = (
    IntentionStatus.ACTIVE,
    IntentionStatus.BLOCKED,
    IntentionStatus.DUE,
    IntentionStatus.EXECUTING,
)
MAX_FAILURES = 100
MAX_OVERDUE_SECONDS = 365 * 24 * 3600
MAX_TO_SESSION = 200
MAX_NOTE = 1000
NOTIFY_CHANNELS = ("webhook",)
POLICY_FIELDS = ("after_failures", "overdue_seconds", "notify", "to_session", "note")
SCAN_CHUNK = 500


# --------------------------------------------------------------------------- the policy


def _whole(value: Any, least: int, most: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and least <= value <= most


def escalation_policy_errors(policy: Any) -> dict[str, list[str]]:
    """What is wrong with `policy`, by field ({} when it is a valid policy)."""
    if not isinstance(policy, dict):
        return {"escalation_policy": ["must be a JSON object"]}
    errors: dict[str, list[str]] = {}
    for key in sorted(set(policy) - set(POLICY_FIELDS)):
        errors[key] = [f"unknown field; allowed: {', '.join(sorted(POLICY_FIELDS))}"]
    for key, most in (("after_failures", MAX_FAILURES), ("overdue_seconds", MAX_OVERDUE_SECONDS)):
        if key in policy and not _whole(policy[key], 1, most):
            errors[key] = [f"a whole number from 1 to {most}"]
    notify = policy.get("notify", [])
    if not (
        isinstance(notify, list)
        and all(channel in NOTIFY_CHANNELS for channel in notify)
        and len(set(notify)) == len(notify)
    ):
        errors["notify"] = [f"a list of distinct channels from: {', '.join(NOTIFY_CHANNELS)}"]
    for key, most in (("to_session", MAX_TO_SESSION), ("note", MAX_NOTE)):
        value = policy.get(key, "")
        if not isinstance(value, str) or len(value) > most:
            errors[key] = [f"text of at most {most} characters"]
    if not errors and policy and "after_failures" not in policy and "overdue_seconds" not in policy:
        errors["escalation_policy"] = [
            "needs after_failures or overdue_seconds (or both); send {} for no escalation"
        ]
    return errors


def escalation_policy_check(policy: Any) -> dict:
    """The policy, or InvalidInput naming the field and what is allowed:
    details {"escalation_policy": {field: [message]}} as for a nested serializer."""
    errors = escalation_policy_errors(policy)
    if not errors:
        return policy
    if set(errors) == {"escalation_policy"}:
        [message] = errors["escalation_policy"]
        raise InvalidInput(
            f"escalation_policy: {message}", details={"escalation_policy": [message]}
        )
    field, messages = next(iter(errors.items()))
    raise InvalidInput(
        f"escalation_policy.{field}: {messages[0]}", details={"escalation_policy": errors}
    )


def escalation_reason(intention: Intention, now: datetime) -> str | None:
    """Why the intention should escalate now (Escalation.Reason), or None: not
    open, already escalated, no (valid) policy, or no condition holds."""
    policy = intention.escalation_policy
    if (
        intention.escalated_at is not None
        or intention.status not in OPEN
        or not policy
        or escalation_policy_errors(policy)  # a row written before policies were checked
    ):
        return None
    after = policy.get("after_failures")
    if after is not None and intention.attempts >= after:
        return Escalation.Reason.FAILURES
    overdue = policy.get("overdue_seconds")
    if (
        overdue is not None
        and intention.status == IntentionStatus.DUE
        and intention.last_fired_at is not None
        and now - due_since(intention) >= timedelta(seconds=overdue)
    ):
        return Escalation.Reason.OVERDUE
    return None


def due_since(intention: Intention) -> datetime:
    """When the due intention last became due, on the engine's clock: it fired, or
    a failure sent this occurrence's attempt back from executing (the attempt was
    no neglect), whichever came last."""
    back = (
        Transition.objects.filter(
            intention=intention,
            occurrence=intention.occurrence,
            from_status=IntentionStatus.EXECUTING,
            to_status=IntentionStatus.DUE,
        )
        .order_by("-id")
        .values_list("at", flat=True)
        .first()
    )
    return max(intention.last_fired_at, back) if back else intention.last_fired_at


# ----------------------------------------------------------------------------- escalate


@dataclass(frozen=True)
class Escalated:
    intention_id: uuid.UUID
    occurrence: int
    reason: str
    escalation_id: uuid.UUID


class _AlreadyEscalated(Exception):
    pass


def escalate_locked(intention: Intention, *, at: datetime) -> Escalated | None:
    """Escalate `intention` if its policy's condition holds at `at`. The caller
    holds its row lock (FOR NO KEY UPDATE) in a transaction; the intention's
    agent is loaded. Returns the escalation, or None (no condition holds, or it
    is escalated already). Writes nothing in the second case."""
    reason = escalation_reason(intention, at)
    if reason is None:
        return None
    try:
        with transaction.atomic():
            return _escalate(intention, reason=reason, at=at)
    except _AlreadyEscalated:  # a racer without our lock got there first: its escalation stands
        return None


def _escalate(intention: Intention, *, reason: str, at: datetime) -> Escalated:
    policy = intention.escalation_policy
    notify = list(policy.get("notify", []))
    details = {
        "reason": reason,
        "occurrence": intention.occurrence,
        "attempts": intention.attempts,
        "after_failures": policy.get("after_failures"),
        "overdue_seconds": policy.get("overdue_seconds"),
        "to_session": policy.get("to_session", ""),
        "note": policy.get("note", ""),
        "notify": notify,
    }
    escalation_id = uuid7()
    event = intention_event(
        intention,
        "intention.escalated",
        {
            "escalation_id": str(escalation_id),
            "policy": policy,
            **details,
            "escalated_at": at.isoformat(),
            "last_fired_at": intention.last_fired_at.isoformat()
            if intention.last_fired_at
            else None,
        },
        source_type=SourceType.OBSERVATION,
    )
    try:
        with transaction.atomic():
            escalation = Escalation.objects.create(
                id=escalation_id,
                agent_id=intention.agent_id,
                intention=intention,
                occurrence=intention.occurrence,
                reason=reason,
                attempts=intention.attempts,
                escalated_at=at,
                policy=policy,
                event=event,
                recorded_at=event.recorded_at,
            )
    except IntegrityError:
        raise _AlreadyEscalated from None
    shown = {**details, "id": str(escalation.pk), "event_id": str(event.pk)}
    changed = Intention.objects.filter(pk=intention.pk, escalated_at__isnull=True).update(
        escalated_at=at, escalation=shown, updated_at=event.recorded_at
    )
    if not changed:
        raise _AlreadyEscalated
    intention.escalated_at, intention.escalation = at, shown
    if intention.thread_id:
        PendingItem.objects.get_or_create(
            thread_id=intention.thread_id,
            intention=intention,
            kind=PendingItem.Kind.ESCALATED,
            occurrence=intention.occurrence,
            defaults={"agent_id": intention.agent_id, "added_at": at},
        )
    if "webhook" in notify:
        _queue_webhook(intention, escalation, shown)
    return Escalated(intention.pk, intention.occurrence, reason, escalation.pk)


def _queue_webhook(intention: Intention, escalation: Escalation, shown: dict) -> None:
    if not Webhook.objects.filter(agent_id=intention.agent_id, is_active=True).exists():
        return
    message = OutboxMessage.objects.create(
        agent_id=intention.agent_id,
        escalation=escalation,
        payload={
            "type": "intention.escalated",
            "escalation_id": str(escalation.pk),
            "intention_id": str(intention.pk),
            "occurrence": escalation.occurrence,
            "reason": escalation.reason,
            "attempts": escalation.attempts,
            "description": intention.description,
            "priority": intention.priority,
            "status": intention.status,
            "thread": intention.thread.key if intention.thread_id else None,
            "escalated_at": escalation.escalated_at.isoformat(),
            "last_fired_at": intention.last_fired_at.isoformat()
            if intention.last_fired_at
            else None,
            "to_session": shown["to_session"],
            "note": shown["note"],
        },
    )
    from ..tasks import deliver_outbox_message

    transaction.on_commit(lambda: deliver_outbox_message.delay(str(message.pk)))


# ------------------------------------------------------------------------------- sweep


def _policy_number(key: str) -> str:
    """SQL: escalation_policy->key as a number; NULL when absent or not a number
    (rows written before policies were checked must not break the sweep)."""
    policy = "intentions_intention.escalation_policy"
    return (
        f"(CASE WHEN jsonb_typeof({policy} -> '{key}') = 'number' "
        f"THEN ({policy} ->> '{key}')::float8 END)"
    )


def _candidates(scope: Q, now: datetime):
    """Open, not yet escalated intentions whose policy's condition may hold at `now`
    (escalation_reason decides, under the row lock: an intention becomes due no
    earlier than it last fired, so counting from the firing finds them all)."""
    after = RawSQL(_policy_number("after_failures"), (), output_field=FloatField())
    overdue_at = RawSQL(
        "intentions_intention.last_fired_at + "
        f"make_interval(secs => {_policy_number('overdue_seconds')})",
        (),
        output_field=DateTimeField(),
    )
    return (
        Intention.objects.filter(scope, status__in=OPEN, escalated_at__isnull=True)
        .exclude(escalation_policy={})
        .alias(after=after, overdue_at=overdue_at)
        .filter(
            Q(after__isnull=False, after__lte=F("attempts"))
            | Q(status=IntentionStatus.DUE, overdue_at__lte=now)
        )
    )


def escalate_due(
    *, agent: Agent | None = None, now: datetime | None = None, chunk: int = SCAN_CHUNK
) -> list[Escalated]:
    """Escalate every open intention whose policy's condition holds: with
    `agent`, that agent's at its own clock; else every wall-clock agent's at
    the wall clock (celery-beat's cycle). Each escalation is its own short
    transaction; rows another worker holds are skipped (it is escalating or
    changing them: the next cycle looks again). Idempotent: a second run, or a
    concurrent one, escalates nothing more."""
    now = now or (now_for(agent.pk) if agent else timezone.now())
    escalated: list[Escalated] = []
    after = None
    while True:
        query = _candidates(scan_scope(agent), now).order_by("pk")
        if after is not None:
            query = query.filter(pk__gt=after)
        ids = list(query.values_list("pk", flat=True)[:chunk])
        for pk in ids:
            with transaction.atomic():
                intention = (
                    Intention.objects.select_for_update(of=("self",), skip_locked=True, no_key=True)
                    .select_related("agent", "thread")
                    .filter(pk=pk, status__in=OPEN, escalated_at__isnull=True)
                    .first()
                )
                if intention is None:  # escalated, finished or locked meanwhile
                    continue
                if result := escalate_locked(intention, at=now):
                    escalated.append(result)
        if len(ids) < chunk:
            return escalated
        after = ids[-1]
