"""Dependencies: what an intention waits for, and what its end does to the
intentions waiting on it.

* unmet: is any of these not yet done? Done means completed; for a recurring
  intention, one occurrence completed (a skip is not one).
* A new or changed intention locks its dependencies FOR SHARE
  (lock_dependencies), refuses one that ended undone (refuse_ended) and a
  cycle (reaches).
* Completed: its blocked dependents with every dependency done are released
  (release_dependents), their rows locked first (lock_dependents_to_release).
* Ended undone (cancelled, expired, a series run out on a skip): every blocked
  intention waiting on it, directly or through others never done, is
  cancelled (dependents_cancel), their rows locked first
  (lock_dependents_to_cancel); dependents_sweep finds any the cascade missed.

The lock order everywhere is intention rows (an intention before the ones that
wait on it, the rest in pk order), then the ledger's chain head.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from piper.errors import Unprocessable
from piper.provenance import SourceType
from piper.tenancy.clock import now_for
from piper.tenancy.models import Agent

from ..models import (
    TERMINAL,
    Intention,
    IntentionDependency,
    IntentionStatus,
    Transition,
    TriggerType,
)
from .firing import Fired, fire_safely
from .transitions import intention_event, move_locked, record_transition


def unmet(dependencies) -> bool:
    """Is any of these intentions not yet done? Done means completed — for a
    recurring one, one occurrence completed (it is active again, for its next
    occurrence, or its series is over); a skipped occurrence is not done, so a
    series that ran out with every occurrence skipped was never done."""
    pending = [
        d.pk for d in dependencies if not (d.status == IntentionStatus.COMPLETED and not d.rrule)
    ]
    if not pending:
        return False
    done = set(
        Transition.objects.filter(intention_id__in=pending, to_status=IntentionStatus.COMPLETED)
        .exclude(reason="skipped")
        .values_list("intention_id", flat=True)
    )
    return any(pk not in done for pk in pending)


def _blocked_dependents(intention: Intention):
    """The blocked intentions that wait directly on `intention`."""
    return Intention.objects.filter(
        dependency_links__depends_on=intention, status=IntentionStatus.BLOCKED
    )


def lock_dependents_to_release(intention: Intention) -> None:
    """Lock the blocked intentions waiting directly on `intention`: the rows
    release_dependents may change once it completes. Call it before the first
    ledger write: the lock order everywhere is intention rows, then chain head."""
    list(
        _blocked_dependents(intention)
        .select_for_update(no_key=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def release_dependents(*, intention: Intention, at: datetime) -> list[Fired]:
    """An intention completed. Its blocked dependents with every dependency now
    done are released: a dependency trigger fires; any other trigger is re-armed
    (active) and fires on its own cue."""
    fired = []
    for dependent in _blocked_dependents(intention).select_related("agent"):
        if unmet(
            [link.depends_on for link in dependent.dependency_links.select_related("depends_on")]
        ):
            continue
        if dependent.trigger_type == TriggerType.DEPENDENCY:
            result = fire_safely(
                intention_id=dependent.pk,
                occurrence=dependent.occurrence,
                cause=TriggerType.DEPENDENCY,
                at=at,
            )
            if result:
                fired.append(result)
            continue
        event = intention_event(
            dependent,
            "intention.rearmed",
            {
                "occurrence": dependent.occurrence,
                "from": "blocked",
                "reason": "dependencies met",
                "at": at.isoformat(),
            },
            source_type=SourceType.OBSERVATION,
        )
        record_transition(
            dependent, IntentionStatus.ACTIVE, at=at, reason="dependencies met", event=event
        )
        Intention.objects.filter(pk=dependent.pk, status=IntentionStatus.BLOCKED).update(
            status=IntentionStatus.ACTIVE, updated_at=event.recorded_at
        )
    return fired


def lock_dependencies(agent: Agent, ids: Sequence[uuid.UUID]) -> None:
    """Lock these intentions FOR SHARE: a cancel, expiry or completion of one
    (FOR NO KEY UPDATE) waits for this transaction, and this one for theirs.

    In the lock order of the cascades (lock_dependents_to_cancel,
    lock_dependents_to_release): an intention before the ones that wait on it.
    So among `ids` one that another of them (transitively) waits on is locked
    first; the rest in pk order."""
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


def own_dependencies(agent: Agent, ids: Sequence[uuid.UUID]) -> list[Intention]:
    """The agent's intentions with these ids, in their order; Unprocessable
    unknown_intention when one is not the agent's (or does not exist)."""
    found = {i.pk: i for i in Intention.objects.filter(agent=agent, pk__in=ids)}
    missing = [str(i) for i in ids if i not in found]
    if missing:
        raise Unprocessable(
            f"dependency {missing[0]} does not exist",
            code="unknown_intention",
            details={"dependencies": missing},
        )
    return [found[i] for i in ids]


def refuse_ended(dependencies: Sequence[Intention]) -> None:
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


def reaches(starts: Sequence[uuid.UUID], target: uuid.UUID) -> bool:
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


# How a recurring series that ran out on a skip, never done, ended (in reasons).
ENDED_WITHOUT_SUCCESS = "ended without success"


def ended_undone(intention: Intention) -> bool:
    """Has it ended (cancelled, expired, or a series run out — completed — on a
    skip) without ever being done? Whatever waits on it never can run.
    intention_fail never ends one: beyond its retries it stays due."""
    return intention.status in TERMINAL and unmet([intention])


def lock_dependents_to_cancel(intention: Intention) -> list[Intention]:
    """Lock, in pk order, every blocked intention that waits — directly or
    through other blocked ones — on `intention`: the rows dependents_cancel
    may cancel should it end undone; return them. Call it with `intention`
    locked and before the first ledger write: the lock order everywhere is
    intention rows (this one, then its dependents in pk order, as
    lock_dependents_to_release), then the ledger's chain head.

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
    """lock_dependents_to_cancel's candidates, unlocked: the blocked intentions
    that wait on `intention` directly, or through blocked ones never done."""
    if not unmet([intention]):
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
    (lock_dependents_to_cancel) that waits on it, or on one cancelled here,
    and is still blocked: it could never have every dependency met. Each gets
    the transition and `intention.cancelled` event of any cancel, with the reason
    "dependency <id> <how>" naming the dependency that doomed it — `how` is
    its status unless given ("ended without success"). Returns those
    cancelled, with their reasons, in the order cancelled.

    Dependents that are not blocked (fired, executing, finished) are left
    alone, as are blocked ones whose chain to `intention` passes through an
    intention that was ever done. Another agent's intentions are never
    touched (dependencies are the agent's own)."""
    doomed = _doomed(intention, locked, how=how or intention.status)
    for dependent, reason in doomed:
        move_locked(dependent, IntentionStatus.CANCELLED, at, reason)
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
            if unmet([dependent]):  # never done: its own dependents are doomed too
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
                locked = lock_dependents_to_cancel(root)
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
