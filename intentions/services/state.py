"""Working state: versioned checkpoints per thread, and succession handover.

Every write is a new version and a ledger event. A write names the version
it was based on; if another write got in first, it answers 409 (optimistic
concurrency) instead of silently overwriting. During a handover the thread
is frozen: only the named successor, after resuming, can take it over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.utils.dateparse import parse_datetime

from ledger.services import event_append, json_storage_error
from piper.api.rendering import RawJSON
from piper.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from piper.ids import uuid7
from piper.provenance import PrivacyClass, RetentionClass, SourceType
from piper.tenancy.clock import now_for
from piper.tenancy.models import Agent

from ..models import (
    MAX_STATE_BYTES,
    Handover,
    Intention,
    IntentionStatus,
    PendingItem,
    Thread,
    WorkingState,
)
from ..selectors import EXTERNAL, dependencies_to_recheck, open_intentions_rendered

# The ledger events of working state; services/rebuild.py replays them.
THREAD_CREATED = "thread.created"
STATE_WRITTEN = "working_state.written"
HANDOVER_STARTED = "thread.handover_started"
THREAD_RESUMED = "thread.resumed"
HANDOVER_ACKNOWLEDGED = "thread.handover_acknowledged"
PENDING_CLEARED = "thread.pending_cleared"
STATE_SCRUBBED = "working_state.scrubbed"  # written by services/erasure.py

TEXT = "text"
TEXT_LIST = "list of text"
ITEMS = "list of objects"
ANY = "any JSON"

# The checkpoint's fields and their shapes. A working set, not a transcript.
STATE_FIELDS: dict[str, str] = {
    "goal": TEXT,
    "subgoal": TEXT,
    "goal_stack": TEXT_LIST,
    "plan": ANY,
    "assumptions": TEXT_LIST,
    "unresolved_questions": TEXT_LIST,
    "artifacts": ITEMS,  # {name, ref, checked_at, freshness_seconds, …}
    "tool_handles": ITEMS,  # same shape as artifacts
    "last_action": ANY,
    "last_observation": ANY,
    "blockers": TEXT_LIST,
    "decision_points": ANY,
    "failed_branches": ITEMS,  # {branch, reason, …}: not to be retried
    "next_action": ANY,
    "source_session": TEXT,
}


def _state_errors(state: Any) -> dict[str, list[str]]:
    if not isinstance(state, dict):
        return {"state": ["must be a JSON object"]}
    errors: dict[str, list[str]] = {}
    for key, value in state.items():
        shape = STATE_FIELDS.get(key)
        if shape is None:
            errors[key] = [f"unknown field; allowed: {', '.join(STATE_FIELDS)}"]
        elif value is None or shape == ANY:
            continue
        elif shape == TEXT and not isinstance(value, str):
            errors[key] = ["must be text"]
        elif shape == TEXT_LIST and not (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        ):
            errors[key] = ["must be a list of text"]
        elif shape == ITEMS and not (
            isinstance(value, list) and all(isinstance(v, dict) for v in value)
        ):
            errors[key] = ["must be a list of objects"]
    for key in EXTERNAL:
        for index, item in enumerate(state.get(key) or []):
            if not isinstance(item, dict):
                continue
            checked = item.get("checked_at")
            if checked is not None and (not isinstance(checked, str) or not _aware(checked)):
                errors.setdefault(key, []).append(
                    f"[{index}].checked_at: an ISO 8601 time with a zone"
                )
            fresh = item.get("freshness_seconds")
            if fresh is not None and (
                isinstance(fresh, bool) or not isinstance(fresh, int) or fresh < 0
            ):
                errors.setdefault(key, []).append(
                    f"[{index}].freshness_seconds: a whole number ≥ 0"
                )
            if "watch" in item and (problem := _watch_error(item["watch"], checked)):
                errors.setdefault(key, []).append(f"[{index}].watch: {problem}")
    # depth=1: the state sits under payload["state"] in its ledger event.
    if not errors and (problem := json_storage_error(state, path="state", depth=1)):
        errors["state"] = [problem]
    return errors


def _watch_error(watch: Any, checked: Any) -> str | None:
    """A watch names one fact (subject, predicate) and needs the time of the last check."""
    if not isinstance(watch, dict) or set(watch) != {"subject", "predicate"}:
        return "an object with exactly subject and predicate (the fact it depends on)"
    for name, limit in (("subject", 200), ("predicate", 100)):
        value = watch[name]
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            return f"{name}: 1-{limit} characters"
    if checked is None:
        return "needs checked_at (a change is one after the last check)"
    return None


def _aware(text: str) -> bool:
    try:
        parsed = parse_datetime(text)
    except ValueError:
        return False
    return parsed is not None and parsed.tzinfo is not None


def _size(state: dict) -> int:
    return len(json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode())


def thread_event(
    agent: Agent, thread_id, event_type: str, payload: dict, session_id: str = "", **classes
) -> Any:
    """Append `event_type` about a thread to its agent's ledger, the payload
    naming the thread first (as transitions.intention_event does for an
    intention): what the agent did to its working state, observed."""
    return event_append(
        agent=agent,
        event_type=event_type,
        payload={"thread_id": str(thread_id), **payload},
        session_id=session_id,
        source_type=SourceType.OBSERVATION,
        **classes,
    )


# ------------------------------------------------------------------------ threads


def thread_get_or_create(*, agent: Agent, key: str, session_id: str = "") -> tuple[Thread, bool]:
    """The agent's thread named `key`, created on first use (version 0, empty)."""
    if not isinstance(key, str) or not key.strip() or len(key) > 200:
        raise InvalidInput("thread key: 1-200 characters", details={"key": ["invalid"]})
    key = key.strip()
    existing = Thread.objects.filter(agent=agent, key=key).first()
    if existing:
        return existing, False
    try:
        with transaction.atomic():
            # The row's times are its event's record time, so a rebuild gives them back.
            thread_id = uuid7()
            event = thread_event(agent, thread_id, THREAD_CREATED, {"thread": key}, session_id)
            thread = Thread.objects.create(
                id=thread_id,
                agent=agent,
                key=key,
                session_id=session_id,
                created_at=event.recorded_at,
                updated_at=event.recorded_at,
            )
            return thread, True
    except IntegrityError:  # created concurrently
        return Thread.objects.get(agent=agent, key=key), False


def _locked_thread(agent: Agent, thread_id) -> Thread:
    # NO KEY UPDATE: writers of one thread still exclude each other, but a
    # firing that adds a pending item (an FK to the thread: KEY SHARE) does not
    # wait for us while we wait for its agent's chain head — that was a deadlock.
    thread = Thread.objects.select_for_update(no_key=True).filter(agent=agent, pk=thread_id).first()
    if thread is None:
        raise NotFound(f"thread {thread_id} not found")
    return thread


def working_state_write(
    *,
    agent: Agent,
    thread: Thread,
    state: dict,
    based_on: int,
    session_id: str = "",
    privacy_class: str = PrivacyClass.INTERNAL,
    retention_class: str = RetentionClass.STANDARD,
) -> WorkingState:
    """Write a new version. Raises InvalidInput (shape), PayloadTooLarge (over
    MAX_STATE_BYTES), Conflict stale_version (another write got in after
    `based_on`) or thread_frozen (a handover is open)."""
    errors = _state_errors(state)
    if errors:
        name, messages = next(iter(errors.items()))
        raise InvalidInput(f"{name}: {messages[0]}", details=errors)
    size = _size(state)
    if size > MAX_STATE_BYTES:
        raise PayloadTooLarge(
            f"working state is {size} bytes; the limit is {MAX_STATE_BYTES}. Keep the working "
            "set (goal, plan, open questions…) and put transcripts in events or sources.",
            code="state_too_large",
            details={"limit_bytes": MAX_STATE_BYTES, "size_bytes": size},
        )
    if isinstance(based_on, bool) or not isinstance(based_on, int) or based_on < 0:
        raise InvalidInput(
            "based_on must be the version you read (0 for a new thread)",
            details={"based_on": ["invalid"]},
        )
    with transaction.atomic():
        locked = _locked_thread(agent, thread.pk)
        if locked.status == Thread.Status.HANDING_OVER:
            raise Conflict(
                f"thread {locked.key!r} is frozen for a handover; the successor resumes and "
                "acknowledges it first",
                code="thread_frozen",
            )
        if locked.current_version != based_on:
            raise Conflict(
                f"working state is at version {locked.current_version}, not {based_on}: read it, "
                "merge your change, and write again",
                code="stale_version",
                details={"current_version": locked.current_version, "based_on": based_on},
            )
        version = based_on + 1
        # The row's id is in its event, so a rebuild from the ledger gives it back.
        state_id = uuid7()
        event = thread_event(
            agent,
            locked.pk,
            STATE_WRITTEN,
            {
                "thread": locked.key,
                "version": version,
                "state": state,
                "working_state_id": str(state_id),
            },
            session_id,
            privacy_class=privacy_class,
            retention_class=retention_class,
        )
        written = WorkingState.objects.create(
            id=state_id,
            agent=agent,
            thread=locked,
            version=version,
            based_on=based_on,
            state=state,
            size_bytes=size,
            session_id=session_id,
            source_event=event,
            created_at=event.recorded_at,
        )
        Thread.objects.filter(pk=locked.pk).update(
            current_version=version,
            updated_at=event.recorded_at,
            session_id=session_id or locked.session_id,
        )
        return written


def working_state_current(*, thread: Thread) -> WorkingState | None:
    return WorkingState.objects.filter(thread=thread).order_by("-version").first()


# ----------------------------------------------------------------------- handover


def handover_start(
    *, agent: Agent, thread: Thread, to_session: str, from_session: str = "", note: str = ""
) -> Handover:
    """Freeze the thread and record the succession in the ledger. Conflict if a
    handover is already open."""
    if not isinstance(to_session, str) or not to_session.strip():
        raise InvalidInput("name the inheriting session", details={"to_session": ["required"]})
    with transaction.atomic():
        locked = _locked_thread(agent, thread.pk)
        if locked.status == Thread.Status.HANDING_OVER:
            open_one = (
                Handover.objects.filter(thread=locked)
                .exclude(status=Handover.Status.ACKNOWLEDGED)
                .first()
            )
            raise Conflict(
                f"thread {locked.key!r} is already being handed over to {open_one.to_session!r}"
                if open_one
                else f"thread {locked.key!r} is already being handed over",
                code="handover_open",
            )
        handover_id = uuid7()  # in the event, as the resume and acknowledgement carry it
        event = thread_event(
            agent,
            locked.pk,
            HANDOVER_STARTED,
            {
                "thread": locked.key,
                "from_session": from_session or locked.session_id,
                "to_session": to_session,
                "frozen_version": locked.current_version,
                "note": note,
                "handover_id": str(handover_id),
            },
            from_session or locked.session_id,
        )
        Thread.objects.filter(pk=locked.pk).update(
            status=Thread.Status.HANDING_OVER, updated_at=event.recorded_at
        )
        return Handover.objects.create(
            id=handover_id,
            agent=agent,
            thread=locked,
            from_session=from_session or locked.session_id,
            to_session=to_session,
            frozen_version=locked.current_version,
            note=note,
            succession_event=event,
            created_at=event.recorded_at,
        )


@dataclass
class ResumePackage:
    """What a successor needs, in the order it needs it."""

    thread: Thread
    handover: Handover | None
    checkpoint: WorkingState | None
    # As the API shows them (selectors.open_intentions_rendered): JSON text rendered
    # by PostgreSQL, written into the response unparsed; .parsed() gives the list.
    intentions: RawJSON
    recheck: list[dict]
    failed_branches: list[dict]
    pending: list[PendingItem]
    now: datetime


def thread_resume(*, agent: Agent, thread: Thread, session_id: str) -> ResumePackage:
    """The checkpoint; active intentions (due and overdue first); external
    dependencies to re-check; failed branches. During a handover only the
    named successor may resume (Conflict otherwise)."""
    now = now_for(agent.pk)
    with transaction.atomic():
        locked = _locked_thread(agent, thread.pk)
        handover = (
            Handover.objects.filter(thread=locked)
            .exclude(status=Handover.Status.ACKNOWLEDGED)
            .first()
        )
        if handover is not None and session_id != handover.to_session:
            raise Conflict(
                f"thread {locked.key!r} is being handed over to {handover.to_session!r}, "
                f"not {session_id!r}",
                code="not_the_successor",
            )
        # The predecessor's session: its own threadless promises are all listed.
        predecessor = handover.from_session if handover is not None else locked.session_id
        intentions = open_intentions_rendered(thread=locked, now=now, session=predecessor)
        if handover is not None and handover.status == Handover.Status.PENDING:
            # What the successor was shown: suite H's open items that survived.
            surfaced = [item["id"] for item in intentions.parsed()]
            event = thread_event(
                agent,
                locked.pk,
                THREAD_RESUMED,
                {
                    "handover_id": str(handover.pk),
                    "session": session_id,
                    "surfaced": surfaced,
                },
                session_id,
            )
            Handover.objects.filter(pk=handover.pk).update(
                status=Handover.Status.RESUMED, resumed_at=event.recorded_at, surfaced=surfaced
            )
            handover.refresh_from_db()
    checkpoint = working_state_current(thread=locked)
    state = checkpoint.state if checkpoint else {}
    return ResumePackage(
        thread=locked,
        handover=handover,
        checkpoint=checkpoint,
        intentions=intentions,
        recheck=dependencies_to_recheck(state, now, agent),
        failed_branches=list(state.get("failed_branches") or []),
        pending=list(
            PendingItem.objects.filter(thread=locked, cleared_at__isnull=True).select_related(
                "intention"
            )
        ),
        now=now,
    )


def thread_acknowledge(*, agent: Agent, thread: Thread, session_id: str) -> Handover:
    """The successor confirms it has resumed: the handover is complete, the
    thread is its, and the thread's intentions are inherited by it."""
    with transaction.atomic():
        locked = _locked_thread(agent, thread.pk)
        handover = (
            Handover.objects.select_for_update()
            .filter(thread=locked)
            .exclude(status=Handover.Status.ACKNOWLEDGED)
            .first()
        )
        if handover is None:
            raise Conflict(f"thread {locked.key!r} has no open handover", code="no_handover")
        if session_id != handover.to_session:
            raise Conflict(
                f"only {handover.to_session!r} can acknowledge this handover",
                code="not_the_successor",
            )
        if handover.status != Handover.Status.RESUMED:
            raise Conflict(
                "resume the thread before acknowledging the handover", code="not_resumed"
            )
        event = thread_event(
            agent,
            locked.pk,
            HANDOVER_ACKNOWLEDGED,
            {"handover_id": str(handover.pk), "session": session_id},
            session_id,
        )
        Handover.objects.filter(pk=handover.pk).update(
            status=Handover.Status.ACKNOWLEDGED, acknowledged_at=event.recorded_at
        )
        Thread.objects.filter(pk=locked.pk).update(
            status=Thread.Status.ACTIVE, session_id=session_id, updated_at=event.recorded_at
        )
        Intention.objects.filter(thread=locked).exclude(
            status__in=[
                IntentionStatus.COMPLETED,
                IntentionStatus.CANCELLED,
                IntentionStatus.EXPIRED,
            ]
        ).update(inherited_by=session_id)
        handover.refresh_from_db()
        return handover


def pending_clear(*, agent: Agent, thread: Thread, item_ids: list[int]) -> int:
    """The agent has seen these pending items: they leave the working state."""
    with transaction.atomic():
        cleared = list(
            PendingItem.objects.select_for_update()
            .filter(agent=agent, thread=thread, pk__in=item_ids, cleared_at__isnull=True)
            .values_list("pk", flat=True)
        )
        if not cleared:
            return 0
        now = now_for(agent.pk)
        items = PendingItem.objects.filter(pk__in=cleared).order_by("pk")
        # What each item is, besides its id, so a rebuild that renumbers them finds it.
        which = [
            {"intention_id": str(i), "kind": k, "occurrence": o}
            for i, k, o in items.values_list("intention_id", "kind", "occurrence")
        ]
        items.update(cleared_at=now)
        thread_event(
            agent,
            thread.pk,
            PENDING_CLEARED,
            {
                "items": cleared,
                "cleared": which,
                "at": now.isoformat(),
            },
        )
        return len(cleared)
