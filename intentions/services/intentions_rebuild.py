"""Rebuild the intentions engine's rows from the ledger (DESIGN §1): intentions,
their dependencies, status history, firings, escalations and pending items are
a fold of the agent's events, in chain order.

| event | makes |
|---|---|
| intention.created | the intention (every column), its dependencies, its first transition |
| intention.fired | a firing (its id), the intention due, a transition, a fired pending item |
| intention.{rearmed,blocked,due,executing,completed,cancelled,expired} | a transition; the status and the columns the move set (`set`: the next occurrence's due_at, attempts, …) |
| intention.failed | attempts (a failure that moved nothing) |
| intention.escalated | an escalation (its id), escalated_at and escalation, an escalated pending item |
| intention.escalation_policy_set / dependencies_set | the policy / the dependencies |
| intention.rehearsed | last_rehearsed_at, a rehearsed pending item |
| intention.scrubbed | an erasure's scrubbed words; its copy of the creation stands where the erased creation stood |
| thread.handover_acknowledged | inherited_by of the thread's open intentions |
| thread.pending_cleared | cleared_at of the items |

Every row takes its event's record time (created_at, updated_at, recorded_at)
and the engine's clock the event names (transition `at`, fired_at,
escalated_at, added_at). A rebuild writes rows only: it fires, escalates and
sends nothing (webhook messages are delivery state, not a projection, and stay
as they are; firings and escalations keep their ids, so they stay attached).

Older ledgers are read too: a column no event carries (events written before
they carried it) keeps what the row says, and an id an event does not carry is
the id of the row the same event made, if it is still there. Intentions whose
every event is gone (erased) are left as they are.

Threads must exist: rebuild `working_state` first when both are dropped.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.utils.dateparse import parse_datetime

from ledger.models import Event
from ledger.projections import rebuild_each_agent
from piper.ids import uuid7
from piper.tenancy.models import Agent

from ..models import (
    TERMINAL,
    Escalation,
    Firing,
    Intention,
    IntentionDependency,
    IntentionStatus,
    PendingItem,
    Thread,
    Transition,
)
from .state import HANDOVER_ACKNOWLEDGED, PENDING_CLEARED

logger = logging.getLogger(__name__)

CREATED = "intention.created"
FIRED = "intention.fired"
FAILED = "intention.failed"
ESCALATED = "intention.escalated"
POLICY_SET = "intention.escalation_policy_set"
DEPENDENCIES_SET = "intention.dependencies_set"
REHEARSED = "intention.rehearsed"
SCRUBBED = "intention.scrubbed"
MOVES = {
    "intention.rearmed": IntentionStatus.ACTIVE,
    "intention.blocked": IntentionStatus.BLOCKED,
    "intention.due": IntentionStatus.DUE,
    "intention.executing": IntentionStatus.EXECUTING,
    "intention.completed": IntentionStatus.COMPLETED,
    "intention.cancelled": IntentionStatus.CANCELLED,
    "intention.expired": IntentionStatus.EXPIRED,
}
EVENT_TYPES = (
    CREATED,
    FIRED,
    FAILED,
    ESCALATED,
    POLICY_SET,
    DEPENDENCIES_SET,
    REHEARSED,
    SCRUBBED,
    HANDOVER_ACKNOWLEDGED,
    PENDING_CLEARED,
    *MOVES,
)
# Reasons of moves recorded before their events named one.
DEFAULT_REASONS = {
    "intention.expired": "expires_at passed",
    "intention.rearmed": "dependencies met",
}
COLUMNS = (
    "thread_id",
    "description",
    "priority",
    "trigger_type",
    "trigger_spec",
    "not_before",
    "due_at",
    "rrule",
    "expires_at",
    "required_context",
    "completion_criteria",
    "completion_evidence",
    "status",
    "occurrence",
    "armed_after_seq",
    "attempts",
    "last_fired_at",
    "last_rehearsed_at",
    "retry_policy",
    "escalation_policy",
    "escalated_at",
    "escalation",
    "source_session",
    "inherited_by",
    "source_event_id",
    "created_at",
    "updated_at",
)
DATETIMES = (
    "not_before",
    "due_at",
    "expires_at",
    "last_fired_at",
    "last_rehearsed_at",
    "escalated_at",
)
# intention.created's payload key for each column it carries (older events carry fewer).
CREATED_COLUMNS = {
    "priority": "priority",
    "expires_at": "expires_at",
    "required_context": "required_context",
    "completion_criteria": "completion_criteria",
    "retry_policy": "retry_policy",
    "escalation_policy": "escalation_policy",
    "last_rehearsed_at": "at",
}
FIRING_COLUMNS = ("occurrence", "fired_at", "cause", "cause_event_id", "event_id", "recorded_at")
ESCALATION_COLUMNS = (
    "occurrence",
    "reason",
    "attempts",
    "escalated_at",
    "policy",
    "event_id",
    "recorded_at",
)
PENDING_COLUMNS = ("added_at", "cleared_at")
REBUILD_SETTING = "piper.rebuild"  # transaction-local; migrations 0011, 0012
BATCH = 2000


def _when(value: Any):
    return parse_datetime(value) if isinstance(value, str) else value


def rebuild_projection(*, agent: Agent | None = None) -> int:
    """Rebuild the intentions engine's rows (one agent's, or every agent's) from
    the ledger, in one transaction, and return the number of events applied.

    The rows come back as they were: ids, statuses, occurrences, times,
    firings, escalations, dependencies, history, pending items. Nothing fires,
    escalates or is sent. The agents' threads, then their intentions (FOR NO
    KEY UPDATE, as the services take them), then their chain heads are locked
    for the duration, so no write interleaves."""
    # The services' lock order: thread, intention rows, chain head.
    return rebuild_each_agent(
        agent,
        lock=[
            Thread.objects.select_for_update(of=("self",), no_key=True),
            Intention.objects.select_for_update(of=("self",), no_key=True),
        ],
        projected=Intention,
        event_types=[CREATED],
        rebuild_agent=_rebuild_agent,
    )


@dataclass
class _Fold:
    """The intentions of one agent, as its events make them."""

    agent_id: Any
    # What is there now: the columns and ids older events do not carry.
    rows: dict[uuid.UUID, dict]
    firing_ids: dict[uuid.UUID, uuid.UUID]  # event -> firing
    escalation_ids: dict[uuid.UUID, uuid.UUID]  # event -> escalation
    transitions_now: dict[uuid.UUID, tuple[int, Any]]  # event -> (transition id, at)
    intentions: dict[uuid.UUID, dict] = field(default_factory=dict)
    # Columns no event gave: the row's value stands (older ledgers).
    unknown: dict[uuid.UUID, set[str]] = field(default_factory=dict)
    dependencies: dict[uuid.UUID, list[uuid.UUID]] = field(default_factory=dict)
    transitions: list[Transition] = field(default_factory=list)
    firings: dict[uuid.UUID, Firing] = field(default_factory=dict)
    escalations: dict[uuid.UUID, Escalation] = field(default_factory=dict)
    # (thread, intention, kind, occurrence) -> added_at, cleared_at
    pending: dict[tuple, dict] = field(default_factory=dict)
    applied: int = 0

    def at(self, event: Event, value: Any = None):
        """The engine's clock an event names; for an older event, its
        transition's, else its record time."""
        if value:
            return _when(value)
        known = self.transitions_now.get(event.pk)
        return known[1] if known else event.recorded_at

    def transition(
        self, intention: dict, event: Event | None, *, copied: bool = False, **fields: Any
    ) -> None:
        """A history row; none for an erased event (its row went with it) unless
        a scrubbed copy stands for the event (the erasure kept its row)."""
        if event is None or (event.erased and not copied):
            return
        known = self.transitions_now.get(event.pk)
        self.transitions.append(
            Transition(
                id=known[0] if known else None,
                intention_id=intention["id"],
                from_status=fields.pop("from_status", intention["status"]),
                occurrence=fields.pop("occurrence", intention["occurrence"]),
                event_id=event.pk,
                recorded_at=event.recorded_at,
                **fields,
            )
        )

    def done(self, intention_id: uuid.UUID) -> bool:
        """dependencies.unmet's 'done', over the fold: completed once, not by a skip."""
        intention = self.intentions.get(intention_id)
        if intention is None:
            return False
        if intention["status"] == IntentionStatus.COMPLETED and not intention["rrule"]:
            return True
        return any(
            t.intention_id == intention_id
            and t.to_status == IntentionStatus.COMPLETED
            and t.reason != "skipped"
            for t in self.transitions
        )

    def created(self, event: Event, payload: dict) -> None:
        """`payload` is the creation's, or (erased) its scrubbed copy's."""
        intention_id = uuid.UUID(payload["intention_id"])
        row = self.rows.get(intention_id, {})
        dependencies = [uuid.UUID(d) for d in payload.get("dependencies") or []]
        status = payload.get("status") or (
            IntentionStatus.BLOCKED
            if not all(self.done(d) for d in dependencies)
            else IntentionStatus.ACTIVE
        )
        at = self.at(event, payload.get("at"))
        intention = {
            "id": intention_id,
            "thread_id": uuid.UUID(payload["thread_id"]) if payload.get("thread_id") else None,
            "description": payload["description"],
            "priority": 0,
            "trigger_type": payload["trigger_type"],
            "trigger_spec": payload.get("trigger_spec") or {},
            "not_before": _when(payload.get("not_before")),
            "due_at": _when(payload.get("due_at")),
            "rrule": payload.get("rrule") or "",
            "expires_at": None,
            "required_context": [],
            "completion_criteria": "",
            "completion_evidence": None,
            "status": status,
            "occurrence": 1,
            "armed_after_seq": event.seq,
            "attempts": 0,
            "last_fired_at": None,
            "last_rehearsed_at": at,
            "retry_policy": {},
            "escalation_policy": {},
            "escalated_at": None,
            "escalation": None,
            "source_session": payload.get("source_session", event.session_id),
            "inherited_by": "",
            "source_event_id": event.pk,
            "created_at": event.recorded_at,
            "updated_at": event.recorded_at,
        }
        unknown = set()
        for column, key in CREATED_COLUMNS.items():
            if key in payload:
                value = payload[key]
                intention[column] = _when(value) if column in DATETIMES else value
            else:
                unknown.add(column)
        if "last_rehearsed_at" in unknown and "last_rehearsed_at" in row:
            intention["last_rehearsed_at"] = row["last_rehearsed_at"]
        self.intentions[intention_id] = intention
        self.unknown[intention_id] = unknown
        self.dependencies[intention_id] = dependencies
        self.transition(
            intention,
            event,
            copied=event.erased,
            from_status="",
            to_status=status,
            reason="created",
            at=at,
        )
        self.applied += 1

    def fired(self, intention: dict, event: Event, payload: dict | None = None) -> None:
        """`payload` is the firing's, or (erased) its scrubbed copy's."""
        payload = payload if payload is not None else event.payload
        firing_id = payload.get("firing_id") or self.firing_ids.get(event.pk)
        firing_id = uuid.UUID(str(firing_id)) if firing_id else uuid7()
        fired_at = _when(payload["fired_at"])
        occurrence = payload.get("occurrence", intention["occurrence"])
        cause = payload["cause"]
        cause_event_id = payload.get("cause_event_id")
        self.firings[firing_id] = Firing(
            id=firing_id,
            agent_id=self.agent_id,
            intention_id=intention["id"],
            occurrence=occurrence,
            fired_at=fired_at,
            cause=cause,
            cause_event_id=uuid.UUID(cause_event_id) if cause_event_id else None,
            event_id=event.pk,
            recorded_at=event.recorded_at,
        )
        self.transition(
            intention,
            event,
            copied=event.erased,
            to_status=IntentionStatus.DUE,
            reason=f"fired by {cause}",
            at=fired_at,
            occurrence=occurrence,
        )
        intention.update(
            status=IntentionStatus.DUE, last_fired_at=fired_at, updated_at=event.recorded_at
        )
        self.pend(intention, "fired", occurrence, fired_at)
        self.applied += 1

    def pend(self, intention: dict, kind: str, occurrence: int, at: Any, *, again=False) -> None:
        if intention["thread_id"] is None:
            return
        key = (intention["thread_id"], intention["id"], kind, occurrence)
        if key not in self.pending or again:  # a rehearsal puts its item back
            self.pending[key] = {"added_at": at, "cleared_at": None}

    def moved(self, intention: dict, event: Event) -> None:
        payload = event.payload
        to_status = payload.get("to") or MOVES[event.event_type]
        reason = payload.get("reason") or DEFAULT_REASONS.get(event.event_type, "")
        self.transition(
            intention,
            event,
            from_status=payload.get("from", intention["status"]),
            to_status=to_status,
            reason=reason,
            at=self.at(event, payload.get("at")),
            occurrence=payload.get("occurrence", intention["occurrence"]),
        )
        intention.update(status=to_status, updated_at=event.recorded_at)
        if "set" in payload:
            for name, value in payload["set"].items():
                intention[name] = _when(value) if name in DATETIMES else value
        elif to_status == IntentionStatus.ACTIVE and (
            reason == "next occurrence" or reason.startswith("failed:")
        ):
            # Older moves named none of what they set: the row's values stand.
            intention["occurrence"] += 1
            self.unknown[intention["id"]] |= {"due_at", "attempts", "completion_evidence"}
        elif to_status == IntentionStatus.COMPLETED:
            self.unknown[intention["id"]].add("completion_evidence")
        self.applied += 1

    def failed(self, intention: dict, event: Event) -> None:
        intention["attempts"] = event.payload.get("attempts", intention["attempts"] + 1)
        intention["updated_at"] = event.recorded_at
        self.applied += 1

    def escalated(self, intention: dict, event: Event) -> None:
        payload = event.payload
        escalation_id = payload.get("escalation_id") or self.escalation_ids.get(event.pk)
        escalation_id = uuid.UUID(str(escalation_id)) if escalation_id else uuid7()
        at = _when(payload["escalated_at"])
        self.escalations[escalation_id] = Escalation(
            id=escalation_id,
            agent_id=self.agent_id,
            intention_id=intention["id"],
            occurrence=payload["occurrence"],
            reason=payload["reason"],
            attempts=payload["attempts"],
            escalated_at=at,
            policy=payload.get("policy", intention["escalation_policy"]),
            event_id=event.pk,
            recorded_at=event.recorded_at,
        )
        shown = {
            name: payload.get(name)
            for name in (
                "reason",
                "occurrence",
                "attempts",
                "after_failures",
                "overdue_seconds",
                "to_session",
                "note",
                "notify",
            )
        }
        intention.update(
            escalated_at=at,
            escalation={**shown, "id": str(escalation_id), "event_id": str(event.pk)},
            updated_at=event.recorded_at,
        )
        self.pend(intention, "escalated", payload["occurrence"], at)
        self.applied += 1

    def scrubbed(self, intention: dict, event: Event) -> None:
        payload = event.payload
        for name in ("description", "completion_criteria", "required_context", "trigger_spec"):
            if name in payload:
                intention[name] = payload[name]
        intention["source_event_id"] = event.pk
        self.applied += 1

    def acknowledged(self, event: Event) -> None:
        thread_id = uuid.UUID(event.payload["thread_id"])
        for intention in self.intentions.values():
            if intention["thread_id"] == thread_id and intention["status"] not in TERMINAL:
                intention["inherited_by"] = event.payload["session"]
        self.applied += 1

    def cleared(self, event: Event, pending_now: dict[int, dict]) -> None:
        payload = event.payload
        thread_id = uuid.UUID(payload["thread_id"])
        if "cleared" in payload:
            keys = [
                (thread_id, uuid.UUID(c["intention_id"]), c["kind"], c["occurrence"])
                for c in payload["cleared"]
            ]
        else:  # an older event names the items by id only: their rows say which
            keys = [pending_now[i]["key"] for i in payload.get("items", []) if i in pending_now]
        at = self.at(event, payload.get("at"))
        for key in keys:
            if key in self.pending:
                if "at" not in payload:
                    at = next(
                        (p["cleared_at"] for p in pending_now.values() if p["key"] == key), at
                    )
                self.pending[key]["cleared_at"] = at
        self.applied += 1


def _fold(agent_id: Any, *, excluding: Any = None) -> tuple[_Fold, dict[int, dict]]:
    """The agent's intentions as its events make them; `excluding` (ids, or a
    subquery of them) are events an erasure is about to remove, read as erased."""
    fold = _Fold(
        agent_id=agent_id,
        rows={row["id"]: row for row in Intention.objects.filter(agent_id=agent_id).values()},
        firing_ids=dict(Firing.objects.filter(agent_id=agent_id).values_list("event_id", "id")),
        escalation_ids=dict(
            Escalation.objects.filter(agent_id=agent_id).values_list("event_id", "id")
        ),
        transitions_now={
            event_id: (pk, at)
            for pk, event_id, at in Transition.objects.filter(
                intention__agent_id=agent_id, event_id__isnull=False
            ).values_list("id", "event_id", "at")
        },
    )
    pending_now = {
        p["id"]: {
            "key": (p["thread_id"], p["intention_id"], p["kind"], p["occurrence"]),
            "added_at": p["added_at"],
            "cleared_at": p["cleared_at"],
        }
        for p in PendingItem.objects.filter(agent_id=agent_id).values()
    }
    events = (
        Event.objects.filter(agent_id=agent_id, event_type__in=EVENT_TYPES)
        .order_by("seq")
        .only("id", "seq", "event_type", "payload", "session_id", "recorded_at", "redacted_at")
    )
    excluded = (
        set(events.filter(pk__in=excluding).values_list("pk", flat=True))
        if excluding is not None
        else set()
    )
    # An erased creation or firing that an erasure scrubbed comes back from its last copy.
    copies: dict[str, dict] = {}
    for copy in events.filter(event_type=SCRUBBED, redacted_at__isnull=True):
        if copy.pk in excluded:
            continue
        if copy.payload.get("created"):
            copies[copy.payload["created_event_id"]] = copy.payload["created"]
        copies.update(copy.payload.get("fired") or {})
    for event in events.iterator(chunk_size=BATCH):
        kind = event.event_type
        event.erased = event.redacted_at is not None or event.pk in excluded
        if event.erased:
            copy = copies.get(str(event.pk))
            if kind == CREATED and copy is not None:
                fold.created(event, copy)
            elif kind == FIRED and copy is not None:
                intention = fold.intentions.get(uuid.UUID(copy["intention_id"]))
                if intention is not None:
                    fold.fired(intention, event, copy)
            continue
        if kind == CREATED:
            fold.created(event, event.payload)
            continue
        if kind == HANDOVER_ACKNOWLEDGED:
            fold.acknowledged(event)
            continue
        if kind == PENDING_CLEARED:
            fold.cleared(event, pending_now)
            continue
        intention = fold.intentions.get(uuid.UUID(event.payload["intention_id"]))
        if intention is None:
            continue  # its creation was erased, and the intention with it
        if kind == FIRED:
            fold.fired(intention, event)
        elif kind in MOVES:
            fold.moved(intention, event)
        elif kind == FAILED:
            fold.failed(intention, event)
        elif kind == ESCALATED:
            fold.escalated(intention, event)
        elif kind == POLICY_SET:
            intention["escalation_policy"] = event.payload["escalation_policy"]
            intention["updated_at"] = event.recorded_at
            fold.applied += 1
        elif kind == DEPENDENCIES_SET:
            fold.dependencies[intention["id"]] = [
                uuid.UUID(d) for d in event.payload["dependencies"]
            ]
            fold.applied += 1
        elif kind == REHEARSED:
            at = fold.at(event, event.payload.get("at"))
            intention["last_rehearsed_at"] = at
            fold.pend(intention, "rehearsed", event.payload["occurrence"], at, again=True)
            fold.applied += 1
        elif kind == SCRUBBED:
            fold.scrubbed(intention, event)
    return fold, pending_now


def intentions_refold(*, agent: Agent, excluding: Any) -> None:
    """Erasure's step, after it removed what the erased events made: every row
    of the agent's intentions engine as a rebuild after the purge will make it
    (an intention whose firing, move or escalation was erased goes back to what
    its other events say; a firing or escalation whose event was erased goes,
    with its webhook message). Nothing fires, escalates or is sent."""
    if Event.objects.filter(agent=agent, pk__in=excluding, event_type__in=EVENT_TYPES).exists():
        _rebuild_agent(agent.pk, excluding=excluding)


def _rebuild_agent(agent_id: Any, *, excluding: Any = None) -> int:
    fold, pending_now = _fold(agent_id, excluding=excluding)
    ids = list(fold.intentions)
    with connection.cursor() as cursor:
        # History rows and the state machine yield to the ledger here only (0012).
        cursor.execute("SELECT set_config(%s, 'on', true)", [REBUILD_SETTING])
    dependency_ids = dict(
        ((i, d), pk)
        for pk, i, d in IntentionDependency.objects.filter(intention_id__in=ids).values_list(
            "id", "intention_id", "depends_on_id"
        )
    )
    IntentionDependency.objects.filter(intention_id__in=ids).delete()

    new = []
    for intention_id, columns in fold.intentions.items():
        row = fold.rows.get(intention_id)
        for name in fold.unknown[intention_id]:
            if row is not None:
                columns[name] = row[name]
        if row is None:
            new.append(Intention(id=intention_id, agent_id=agent_id, **_columns(columns)))
        else:
            _update_changed(Intention, intention_id, row, columns, COLUMNS)
    Intention.objects.bulk_create(new, batch_size=BATCH)

    IntentionDependency.objects.bulk_create(
        [
            IntentionDependency(id=dependency_ids.get((i, d)), intention_id=i, depends_on_id=d)
            for i, targets in fold.dependencies.items()
            for d in targets
            if d in fold.intentions or d in fold.rows
        ],
        batch_size=BATCH,
    )
    _put_transitions(fold.transitions, ids)
    _put(Firing, fold.firings, FIRING_COLUMNS, ids)
    _put(Escalation, fold.escalations, ESCALATION_COLUMNS, ids)
    _put_pending(agent_id, fold, pending_now, ids)
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, 'off', true)", [REBUILD_SETTING])

    left = set(fold.rows) - set(fold.intentions)
    if left:
        logger.warning(
            "intentions rebuild: %d intention(s) of agent %s named by no surviving event, kept",
            len(left),
            agent_id,
        )
    return fold.applied


def _columns(columns: dict) -> dict:
    return {name: columns[name] for name in COLUMNS}


def _update_changed(model, pk: Any, now: dict, made: dict, columns: tuple[str, ...]) -> None:
    """Set the columns of one row that differ from what the fold made. A rebuild
    mostly finds rows as the ledger makes them: one UPDATE per row that differs
    is far cheaper than bulk_update's CASE over every row and column."""
    differ = {name: made[name] for name in columns if now[name] != made[name]}
    if differ:
        model.objects.filter(pk=pk).update(**differ)


def _put(model, made: dict, columns: tuple[str, ...], intention_ids: list) -> None:
    """Rows of `model` as the fold made them, keeping their ids (webhook
    messages point at firings and escalations): changed ones updated, missing
    ones inserted, ones no event makes deleted."""
    existing = {
        row["id"]: row
        for row in model.objects.filter(intention_id__in=intention_ids).values("id", *columns)
    }
    stale = set(existing) - set(made)
    if stale:
        model.objects.filter(pk__in=stale).delete()
    for pk, row in made.items():
        if pk in existing:
            _update_changed(
                model, pk, existing[pk], {name: getattr(row, name) for name in columns}, columns
            )
    model.objects.bulk_create([r for pk, r in made.items() if pk not in existing], batch_size=BATCH)


TRANSITION_COLUMNS = (
    "intention_id",
    "from_status",
    "to_status",
    "occurrence",
    "reason",
    "at",
    "event_id",
    "recorded_at",
)


def _put_transitions(made: list[Transition], intention_ids: list) -> None:
    """History rows as the fold made them: the ones already there as made are
    kept, the rest replaced (history is never updated in place)."""
    existing = {
        row["id"]: row
        for row in Transition.objects.filter(intention_id__in=intention_ids).values(
            "id", *TRANSITION_COLUMNS
        )
    }
    kept = {
        t.pk
        for t in made
        if t.pk in existing
        and all(existing[t.pk][name] == getattr(t, name) for name in TRANSITION_COLUMNS)
    }
    Transition.objects.filter(pk__in=set(existing) - kept).delete()
    Transition.objects.bulk_create([t for t in made if t.pk not in kept], batch_size=BATCH)


def _put_pending(agent_id: Any, fold: _Fold, pending_now: dict[int, dict], ids: list) -> None:
    by_key = {p["key"]: pk for pk, p in pending_now.items()}
    folded = set(ids)
    stale = [
        pk
        for pk, p in pending_now.items()
        if p["key"][1] in folded and p["key"] not in fold.pending
    ]
    if stale:
        PendingItem.objects.filter(pk__in=stale).delete()
    new = []
    for key, times in fold.pending.items():
        pk = by_key.get(key)
        if pk is not None:
            _update_changed(PendingItem, pk, pending_now[pk], times, PENDING_COLUMNS)
            continue
        thread_id, intention_id, kind, occurrence = key
        new.append(
            PendingItem(
                agent_id=agent_id,
                thread_id=thread_id,
                intention_id=intention_id,
                kind=kind,
                occurrence=occurrence,
                **times,
            )
        )
    PendingItem.objects.bulk_create(new, batch_size=BATCH)
