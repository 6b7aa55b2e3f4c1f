"""Request and response shapes of threads: working state, handover, resume.

Inputs are strict: unknown fields and mistyped values are refused, never
coerced. Outputs declare their fields (that is the OpenAPI schema) and build
the body directly from what the selectors loaded: a resume of a thread with a
thousand intentions must stay within milliseconds.
"""

from __future__ import annotations

from rest_framework import serializers

from piper.api.serializers import (
    CursorQuerySerializer,
    EnumField,
    PolicyClassesSerializer,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    api_datetime,
    api_id,
    page_of,
)

from .models import Handover, PendingItem, Thread, WorkingState
from .serializers import MAX_IDS, MAX_SESSION, IntentionOutputSerializer, intention_status
from .services.state import STATE_FIELDS

MAX_INT = 2**31 - 1  # PostgreSQL integer (versions)
MAX_BIGINT = 2**63 - 1  # PostgreSQL bigint (pending item ids)


# ---------------------------------------------------------------------- threads in


class ThreadCreateInputSerializer(StrictSerializer):
    key = StrictCharField(max_length=200, help_text="Your own name for the thread (unique).")
    session_id = StrictCharField(
        max_length=MAX_SESSION,
        required=False,
        allow_blank=True,
        default="",
        help_text="The session holding the thread, when it is created.",
    )


class ThreadListQuerySerializer(CursorQuerySerializer):
    status = EnumField(component="ThreadStatusEnum", choices=Thread.Status.choices, required=False)


STATE_HELP = (
    "The checkpoint: a working set, not a transcript (64 KiB at most). Fields, all optional: "
    + ", ".join(f"{name} ({shape})" for name, shape in STATE_FIELDS.items())
    + ". Artifacts and tool handles may carry checked_at (ISO 8601 with a zone) and "
    "freshness_seconds: a resume lists those older than their freshness for re-checking. "
    "failed_branches are the branches not to retry."
)


class WorkingStateWriteInputSerializer(PolicyClassesSerializer, StrictSerializer):
    state = serializers.DictField(help_text=STATE_HELP)
    based_on = StrictIntegerField(
        min_value=0,
        max_value=MAX_INT,
        help_text="The version you read (0 for a new thread). Another write since then makes "
        "this one 409 stale_version.",
    )
    session_id = StrictCharField(
        max_length=MAX_SESSION, required=False, allow_blank=True, default=""
    )


class WorkingStateQuerySerializer(StrictSerializer):
    version = serializers.IntegerField(
        min_value=0,
        max_value=MAX_INT,
        required=False,
        help_text="An earlier version (default: the current one).",
    )


class HandoverInputSerializer(StrictSerializer):
    to_session = StrictCharField(max_length=MAX_SESSION, help_text="The inheriting session.")
    from_session = StrictCharField(
        max_length=MAX_SESSION,
        required=False,
        allow_blank=True,
        default="",
        help_text="Default: the session holding the thread.",
    )
    note = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")


class SessionInputSerializer(StrictSerializer):
    session_id = StrictCharField(max_length=MAX_SESSION)


class PendingClearInputSerializer(StrictSerializer):
    ids = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=MAX_BIGINT),
        allow_empty=False,
        max_length=MAX_IDS,
        help_text="Ids of pending items the agent has seen.",
    )


# --------------------------------------------------------------------- threads out


class ThreadOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    key = serializers.CharField()
    status = EnumField(component="ThreadStatusEnum", choices=Thread.Status.choices)
    session_id = serializers.CharField(help_text="The session holding the thread now.")
    current_version = serializers.IntegerField(help_text="0 until the first write.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, thread: Thread) -> dict:
        return {
            "id": str(thread.pk),
            "key": thread.key,
            "status": thread.status,
            "session_id": thread.session_id,
            "current_version": thread.current_version,
            "created_at": api_datetime(thread.created_at),
            "updated_at": api_datetime(thread.updated_at),
        }


class WorkingStateOutputSerializer(serializers.Serializer):
    thread_id = serializers.UUIDField()
    version = serializers.IntegerField(help_text="0: nothing written yet (an empty state).")
    based_on = serializers.IntegerField(allow_null=True)
    state = serializers.DictField(help_text="The checkpoint as written.")
    size_bytes = serializers.IntegerField()
    session_id = serializers.CharField()
    source_event_id = serializers.UUIDField(allow_null=True)
    created_at = serializers.DateTimeField(allow_null=True)

    def to_representation(self, state: WorkingState) -> dict:
        return {
            "thread_id": str(state.thread_id),
            "version": state.version,
            "based_on": state.based_on,
            "state": state.state,
            "size_bytes": state.size_bytes,
            "session_id": state.session_id,
            "source_event_id": api_id(state.source_event_id),
            "created_at": api_datetime(state.created_at),
        }


WorkingStatePageSerializer = page_of(WorkingStateOutputSerializer, "WorkingStatePageSerializer")


class HandoverOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    thread_id = serializers.UUIDField()
    from_session = serializers.CharField()
    to_session = serializers.CharField()
    frozen_version = serializers.IntegerField()
    status = EnumField(component="HandoverStatusEnum", choices=Handover.Status.choices)
    note = serializers.CharField()
    succession_event_id = serializers.UUIDField()
    created_at = serializers.DateTimeField()
    resumed_at = serializers.DateTimeField(allow_null=True)
    acknowledged_at = serializers.DateTimeField(allow_null=True)

    def to_representation(self, handover: Handover) -> dict:
        return {
            "id": str(handover.pk),
            "thread_id": str(handover.thread_id),
            "from_session": handover.from_session,
            "to_session": handover.to_session,
            "frozen_version": handover.frozen_version,
            "status": handover.status,
            "note": handover.note,
            "succession_event_id": str(handover.succession_event_id),
            "created_at": api_datetime(handover.created_at),
            "resumed_at": api_datetime(handover.resumed_at),
            "acknowledged_at": api_datetime(handover.acknowledged_at),
        }


class PendingItemOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="Send it to …/pending/clear once seen.")
    kind = EnumField(component="PendingKindEnum", choices=PendingItem.Kind.choices)
    intention_id = serializers.UUIDField()
    description = serializers.CharField()
    priority = serializers.IntegerField()
    status = intention_status(help_text="The intention's status now.")
    occurrence = serializers.IntegerField()
    added_at = serializers.DateTimeField(help_text="On the engine's clock.")

    def to_representation(self, item: PendingItem) -> dict:
        intention = item.intention
        return {
            "id": item.pk,
            "kind": item.kind,
            "intention_id": str(intention.pk),
            "description": intention.description,
            "priority": intention.priority,
            "status": intention.status,
            "occurrence": item.occurrence,
            "added_at": api_datetime(item.added_at),
        }


class ThreadDetailOutputSerializer(ThreadOutputSerializer):
    checkpoint = WorkingStateOutputSerializer(help_text="The current version.")
    pending = PendingItemOutputSerializer(
        many=True, help_text="Intentions the engine fired or rehearsed into the working state."
    )
    handover = HandoverOutputSerializer(allow_null=True, help_text="The open handover, if any.")

    def to_representation(self, detail: dict) -> dict:
        return {
            **super().to_representation(detail["thread"]),
            "checkpoint": _STATE.to_representation(detail["checkpoint"]),
            "pending": [_PENDING.to_representation(p) for p in detail["pending"]],
            "handover": None
            if detail["handover"] is None
            else _HANDOVER.to_representation(detail["handover"]),
        }


class PendingClearOutputSerializer(serializers.Serializer):
    cleared = serializers.IntegerField(help_text="How many of the ids were pending.")
    pending = PendingItemOutputSerializer(many=True, help_text="What is still pending.")

    def to_representation(self, body: dict) -> dict:
        return {
            "cleared": body["cleared"],
            "pending": [_PENDING.to_representation(p) for p in body["pending"]],
        }


# One instance of each, for building nested bodies: their to_representation keeps no
# state, and a serializer (with its .data wrapper) per row costs more than the row.
_THREAD = ThreadOutputSerializer()
_STATE = WorkingStateOutputSerializer()
_HANDOVER = HandoverOutputSerializer()
_PENDING = PendingItemOutputSerializer()


# -------------------------------------------------------------------------- resume


class RecheckItemSerializer(serializers.Serializer):
    """An artifact or tool handle as the checkpoint holds it, plus kind and age."""

    kind = EnumField(
        component="RecheckKindEnum",
        choices=[("artifact", "Artifact"), ("tool_handle", "Tool handle")],
    )
    checked_at = serializers.DateTimeField()
    freshness_seconds = serializers.IntegerField()
    age_seconds = serializers.IntegerField(help_text="On the engine's clock, at the resume.")

    def to_representation(self, item: dict) -> dict:
        return item


class ResumeOutputSerializer(serializers.Serializer):
    """What a successor needs, in the order it needs it."""

    checkpoint = WorkingStateOutputSerializer(help_text="1. The current working state.")
    intentions = IntentionOutputSerializer(
        many=True,
        help_text="2. The open intentions a successor inherits: the thread's, and the agent's "
        "that belong to no thread (thread null; the 100 most urgent); due, executing, "
        "overdue, then by due time and priority.",
    )
    recheck = RecheckItemSerializer(
        many=True,
        help_text="3. External dependencies (artifacts, tool handles) whose last check is "
        "older than their freshness_seconds, each with all its own fields.",
    )
    failed_branches = serializers.ListField(
        child=serializers.DictField(), help_text="4. Branches not to retry."
    )
    pending = PendingItemOutputSerializer(
        many=True, help_text="5. Fired or rehearsed intentions not yet cleared."
    )
    thread = ThreadOutputSerializer()
    handover = HandoverOutputSerializer(allow_null=True, help_text="The open handover, if any.")
    now = serializers.DateTimeField(help_text="The engine's clock at the resume.")

    def to_representation(self, package) -> dict:
        return {
            "checkpoint": _STATE.to_representation(package.checkpoint),
            "intentions": package.intentions,  # already in IntentionOutputSerializer's shape
            "recheck": list(package.recheck),
            "failed_branches": list(package.failed_branches),
            "pending": [_PENDING.to_representation(p) for p in package.pending],
            "thread": _THREAD.to_representation(package.thread),
            "handover": None
            if package.handover is None
            else _HANDOVER.to_representation(package.handover),
            "now": api_datetime(package.now),
        }
