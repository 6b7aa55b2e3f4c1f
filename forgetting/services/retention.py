"""Retention: per-agent policies, and the sweep that erases what they let expire.

A policy says how many days an agent keeps events of a retention class, an
event type (or a family, 'tool.*') and/or a source type. The sweep
(celery-beat, `manage.py retention_sweep`) erases expired events through the
same erasure as a request — every projection, tombstones, a receipt — in
bounded chunks, one agent at a time under an advisory lock: a redelivered
task, or a second beat, finds the lock held or nothing left to do.

Never swept: events under legal hold (retention class 'permanent'), the purge
records themselves, and an event whose erasure would take a younger one with
it (an entity still used by recent facts, a document chunked recently):
retention lets old evidence go, it does not cut into what is still kept.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Q, QuerySet

from ledger.models import Event
from ledger.services import event_append
from piper.errors import InvalidInput
from piper.provenance import RetentionClass, SourceType
from piper.tenancy.clock import now_for
from piper.tenancy.models import Agent

from ..models import ErasureKind, RetentionPolicy
from .erasure import AUDIT_EVENT_TYPES, Selector, erasure_run, with_dependents

POLICY_SET = "retention.policy_set"
POLICY_DELETED = "retention.policy_deleted"
EVENT_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9_]*([.:/-][a-z0-9_]+)*(\.\*)?$")
SWEEP_CHUNK = 10_000
SWEEP_BUDGET_SECONDS = 60.0
REQUESTED_BY = "retention sweep"


def _errors(*, name, retention_class, event_type, source_type, max_age_days) -> dict:
    errors: dict[str, list[str]] = {}
    if not isinstance(name, str) or not name.strip() or len(name) > 100:
        errors["name"] = ["a name of 1-100 characters"]
    if retention_class == RetentionClass.PERMANENT:
        errors["retention_class"] = [
            "'permanent' is the legal hold: no policy expires it (lift a hold with an erasure "
            "and legal_hold_lifted)"
        ]
    elif retention_class not in ("", *RetentionClass.values):
        errors["retention_class"] = [f"one of {RetentionClass.values[:-1]}, or empty for any"]
    if not isinstance(event_type, str) or (event_type and not EVENT_TYPE_PATTERN.match(event_type)):
        errors["event_type"] = ["an event type ('tool.called') or a family ('tool.*'), or empty"]
    if source_type not in ("", *SourceType.values):
        errors["source_type"] = [f"one of {SourceType.values}, or empty for any"]
    if isinstance(max_age_days, bool) or not isinstance(max_age_days, int) or max_age_days < 1:
        errors["max_age_days"] = ["a whole number of days, at least 1"]
    return errors


def expired_events(policy: RetentionPolicy, *, now=None) -> QuerySet[Event]:
    """The agent's events this policy lets expire by `now` (default: the agent's
    clock, piper.tenancy.clock — simulated for a battery agent), not yet erased,
    oldest first."""
    now = now or now_for(policy.agent_id)
    events = (
        Event.objects.filter(
            agent_id=policy.agent_id,
            redacted_at__isnull=True,
            recorded_at__lt=now - timedelta(days=policy.max_age_days),
        )
        .exclude(retention_class=RetentionClass.PERMANENT)
        .exclude(event_type__in=AUDIT_EVENT_TYPES)
        .exclude(event_type__in=(POLICY_SET, POLICY_DELETED))
    )
    if policy.retention_class:
        events = events.filter(retention_class=policy.retention_class)
    if policy.source_type:
        events = events.filter(source_type=policy.source_type)
    if policy.event_type.endswith(".*"):
        events = events.filter(event_type__startswith=policy.event_type[:-1])
    elif policy.event_type:
        events = events.filter(event_type=policy.event_type)
    return events.order_by("seq")


def retention_policy_check(
    *,
    agent: Agent,
    name: str,
    max_age_days: int,
    retention_class: str = "",
    event_type: str = "",
    source_type: str = "",
    is_active: bool = True,
    confirm: bool = False,
    policy: RetentionPolicy | None = None,
) -> dict:
    """What retention_policy_set checks, without writing: InvalidInput as it
    would raise it; else the policy's fields."""
    errors = _errors(
        name=name,
        retention_class=retention_class,
        event_type=event_type,
        source_type=source_type,
        max_age_days=max_age_days,
    )
    if errors:
        field_name, messages = next(iter(errors.items()))
        raise InvalidInput(f"{field_name}: {messages[0]}", details=errors)
    taken = RetentionPolicy.objects.filter(agent=agent, name=name)
    if policy is not None:
        taken = taken.exclude(pk=policy.pk)
    if taken.exists():
        raise InvalidInput(
            f"name: the agent already has a retention policy named {name!r}",
            code="name_taken",
            details={"name": ["taken"]},
        )
    fields = {
        "name": name,
        "retention_class": retention_class,
        "event_type": event_type,
        "source_type": source_type,
        "max_age_days": max_age_days,
        "is_active": is_active,
    }
    if is_active and not confirm and _erases_everything(RetentionPolicy(agent=agent, **fields)):
        raise InvalidInput(
            "this policy would erase every event of the agent's that retention can reach; "
            "narrow it (retention_class, event_type, source_type) or send confirm: true",
            code="confirm_required",
            details={"confirm": ["required for a policy that erases everything"]},
        )
    return fields


def retention_policy_set(
    *,
    agent: Agent,
    name: str,
    max_age_days: int,
    retention_class: str = "",
    event_type: str = "",
    source_type: str = "",
    is_active: bool = True,
    confirm: bool = False,
    policy: RetentionPolicy | None = None,
) -> RetentionPolicy:
    """Create a policy (or change `policy`), with a 'retention.policy_set' event.

    InvalidInput (400) for a bad field, 'permanent' among them, or — code
    'confirm_required' — a policy that would erase every event the agent has
    that retention can reach (no class, type or source to narrow it, or all
    of them expired already) without `confirm`. Conflict-free: a name taken by
    another policy of the agent is InvalidInput too.
    """
    fields = retention_policy_check(
        agent=agent,
        name=name,
        max_age_days=max_age_days,
        retention_class=retention_class,
        event_type=event_type,
        source_type=source_type,
        is_active=is_active,
        confirm=confirm,
        policy=policy,
    )
    draft = RetentionPolicy(agent=agent, **fields)
    with transaction.atomic():
        policy_id = policy.pk if policy is not None else draft.pk
        event = event_append(
            agent=agent,
            event_type=POLICY_SET,
            payload={"policy_id": str(policy_id), **fields, "confirm": bool(confirm)},
            source_type=SourceType.OPERATOR,
        )
        if policy is None:
            draft.source_event = event
            draft.save()
            return draft
        RetentionPolicy.objects.filter(pk=policy.pk).update(
            **fields, source_event=event, updated_at=event.recorded_at
        )
        policy.refresh_from_db()
        return policy


def _erases_everything(policy: RetentionPolicy) -> bool:
    if not (policy.retention_class or policy.event_type or policy.source_type):
        return True
    reachable = (
        Event.objects.filter(agent_id=policy.agent_id, redacted_at__isnull=True)
        .exclude(retention_class=RetentionClass.PERMANENT)
        .exclude(event_type__in=AUDIT_EVENT_TYPES)
        .order_by()
        .count()
    )
    return reachable > 0 and expired_events(policy).count() == reachable


def retention_policy_delete(*, agent: Agent, policy: RetentionPolicy) -> None:
    with transaction.atomic():
        event_append(
            agent=agent,
            event_type=POLICY_DELETED,
            payload={"policy_id": str(policy.pk), "name": policy.name},
            source_type=SourceType.OPERATOR,
        )
        RetentionPolicy.objects.filter(pk=policy.pk).delete()


@dataclass
class SweepResult:
    agents: int = 0
    erased: int = 0  # events, dependents included
    receipts: list[uuid.UUID] = field(default_factory=list)
    kept: int = 0  # expired, but a younger event depends on them
    more: bool = False  # stopped by the budget with expired events left
    skipped_locked: int = 0  # agents another sweep held
    would_erase: dict[str, int] = field(default_factory=dict)  # dry run: policy -> events


def _sweep_lock(agent_id: uuid.UUID) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_try_advisory_xact_lock(hashtext('forgetting.sweep'), hashtext(%s))",
            [str(agent_id)],
        )
        return cursor.fetchone()[0]


def _erasable(events: list[uuid.UUID], agent: Agent, cutoff) -> tuple[set[uuid.UUID], int]:
    """Of expired `events`, those whose erasure takes nothing younger than
    `cutoff` and nothing under legal hold along, with every event that goes
    with them (a closed set, for erasure_run); and how many were kept."""
    ids = set(events)

    def blocking(extra: set[uuid.UUID]) -> bool:
        return bool(extra) and (
            Event.objects.filter(pk__any=list(extra))
            .filter(Q(recorded_at__gte=cutoff) | Q(retention_class=RetentionClass.PERMANENT))
            .order_by()
            .exists()
        )

    closure = with_dependents(agent, ids)
    if not blocking(closure - ids):
        return closure, 0
    # Rare: find the ones that would take a younger or held event along.
    closure, kept = set(), 0
    for event in events:
        own = with_dependents(agent, {event})
        if blocking(own - {event}):
            kept += 1
        else:
            closure |= own
    return closure, kept


def retention_sweep(
    *,
    agent: Agent | None = None,
    chunk: int = SWEEP_CHUNK,
    budget_seconds: float = SWEEP_BUDGET_SECONDS,
    dry_run: bool = False,
    now=None,
    on_chunk=None,
) -> SweepResult:
    """Erase what the active policies let expire (one agent's, or every agent's),
    `chunk` events at a time, until nothing is left or `budget_seconds` pass
    (then `more` is set: the task re-queues itself). Ages are measured on each
    agent's clock unless `now` is given. Idempotent."""
    started = time.monotonic()
    result = SweepResult()
    policies = RetentionPolicy.objects.filter(is_active=True).select_related("agent")
    if agent is not None:
        policies = policies.filter(agent=agent)
    by_agent: dict[uuid.UUID, list[RetentionPolicy]] = {}
    for policy in policies.order_by("agent_id", "name"):
        by_agent.setdefault(policy.agent_id, []).append(policy)
    for policies_of in by_agent.values():
        owner = policies_of[0].agent
        owner_now = now or now_for(owner.pk)
        result.agents += 1
        for policy in policies_of:
            cutoff = owner_now - timedelta(days=policy.max_age_days)
            if dry_run:
                result.would_erase[policy.name] = expired_events(policy, now=owner_now).count()
                continue
            skip: set[uuid.UUID] = set()
            while True:
                if time.monotonic() - started > budget_seconds:
                    result.more = (
                        expired_events(policy, now=owner_now).exclude(pk__any=skip).exists()
                    )
                    return result
                with transaction.atomic():
                    if not _sweep_lock(owner.pk):
                        result.skipped_locked += 1
                        break
                    batch = list(
                        expired_events(policy, now=owner_now)
                        .exclude(pk__any=skip)
                        .values_list("pk", flat=True)[:chunk]
                    )
                    if not batch:
                        break
                    ids, kept = _erasable(batch, owner, cutoff)
                    result.kept += kept
                    skip |= set(batch) - ids
                    if not ids:
                        continue
                    erased = erasure_run(
                        agent=owner,
                        selector=Selector(),
                        event_ids=sorted(ids, key=str),
                        closed=True,
                        described_as={
                            "retention_policy": policy.name,
                            "policy_id": str(policy.pk),
                            "recorded_before": cutoff.isoformat(),
                        },
                        reason=f"retention policy {policy.name!r}: older than "
                        f"{policy.max_age_days} days",
                        requested_by=REQUESTED_BY,
                        kind=ErasureKind.RETENTION,
                    )
                result.erased += erased.receipt.events
                result.receipts.append(erased.receipt.pk)
                if on_chunk is not None:
                    on_chunk(erased.receipt.events)
    return result
