"""Request and response shapes of the intentions API (and the engine's helpers:
webhook, clock, tick); the threads' are in thread_serializers.py.

Inputs are strict: unknown fields and mistyped values are refused, never
coerced; a time must name its zone. Outputs declare their fields (that is the
OpenAPI schema) and build the body directly from what the selectors loaded.
"""

from __future__ import annotations

from django.core.validators import URLValidator
from rest_framework import serializers

from piper.api.serializers import (
    AwareDateTimeField,
    CommaListField,
    CursorQuerySerializer,
    EnumField,
    JSONObjectField,
    PolicyClassesSerializer,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    api_datetime,
    api_id,
    page_of,
)

from .models import (
    Escalation,
    Firing,
    Intention,
    IntentionStatus,
    Transition,
    TriggerType,
)
from .services import escalation as escalation_policy

MAX_SESSION = 200
MAX_REASON = 250  # the service prefixes it ("failed: …; retry 2") into a 300-character column
MAX_IDS = 1000
SMALLINT = 32767


def intention_status(**kwargs) -> EnumField:
    return EnumField(component="IntentionStatusEnum", choices=IntentionStatus.choices, **kwargs)


def trigger_type(**kwargs) -> EnumField:
    return EnumField(component="TriggerTypeEnum", choices=TriggerType.choices, **kwargs)


# ---------------------------------------------------------------------- intentions


class RetryPolicySerializer(StrictSerializer):
    max_retries = StrictIntegerField(
        min_value=0, max_value=100, required=False, help_text="Default 0: a failure escalates."
    )
    backoff_seconds = StrictIntegerField(
        min_value=1,
        max_value=7 * 24 * 3600,
        required=False,
        help_text="Default 60; doubled on each retry.",
    )


class EscalationPolicySerializer(StrictSerializer):
    """When the engine escalates the intention. {} (the default): never."""

    after_failures = StrictIntegerField(
        min_value=1,
        max_value=escalation_policy.MAX_FAILURES,
        required=False,
        help_text="Escalate once this many attempts have failed (POST …/fail), retries included.",
    )
    overdue_seconds = StrictIntegerField(
        min_value=1,
        max_value=escalation_policy.MAX_OVERDUE_SECONDS,
        required=False,
        help_text="Escalate once it has been due this long (since it last fired, on the "
        "engine's clock) and nobody started, completed or cancelled it.",
    )
    notify = serializers.ListField(
        child=EnumField(
            component="EscalationNotifyEnum",
            choices=[("webhook", "POST it to the agent's webhook, through the outbox")],
        ),
        required=False,
        max_length=len(escalation_policy.NOTIFY_CHANNELS),
        help_text="Channels besides the ledger, the intention itself and its thread's "
        "pending list (always). Default: none.",
    )
    to_session = StrictCharField(
        max_length=escalation_policy.MAX_TO_SESSION,
        required=False,
        allow_blank=True,
        help_text="Who should take it over, recorded and delivered with the escalation.",
    )
    note = StrictCharField(
        max_length=escalation_policy.MAX_NOTE,
        required=False,
        allow_blank=True,
        help_text="Free text delivered with the escalation.",
    )


ESCALATION_POLICY_HELP = (
    "When to escalate: after_failures and/or overdue_seconds (at least one), notify "
    '(["webhook"]), to_session, note. Escalated at most once per occurrence; a wrong shape '
    "is 400 naming the field."
)


class IntentionCreateInputSerializer(PolicyClassesSerializer, StrictSerializer):
    description = StrictCharField(max_length=2000, help_text="What is to be done.")
    trigger_type = trigger_type()
    trigger_spec = JSONObjectField(
        required=False,
        default=dict,
        help_text='time, dependency, manual: {}. event: {"event_type": "deploy.*", '
        '"conditions": [{"field": "payload.env", "op": "eq", "value": "prod"}]}. state: '
        '{"subject": "<entity>", "predicate": "<name>", "op": "eq", "value": …} over current '
        "facts. Ops: eq ne gt gte lt lte in contains exists absent. A spec that does not fit "
        "is 400 invalid_trigger.",
    )
    thread = serializers.UUIDField(
        required=False, allow_null=True, default=None, help_text="The thread's id."
    )
    priority = StrictIntegerField(
        min_value=-SMALLINT, max_value=SMALLINT, required=False, default=0
    )
    not_before = AwareDateTimeField(required=False, allow_null=True, default=None)
    due_at = AwareDateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Not before not_before (400). A time trigger needs due_at or not_before.",
    )
    rrule = StrictCharField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="RFC 5545 recurrence (time triggers), from due_at; one that never occurs is "
        "400 invalid_rrule.",
    )
    expires_at = AwareDateTimeField(required=False, allow_null=True, default=None)
    dependencies = serializers.ListField(
        child=serializers.UUIDField(),
        required=False,
        default=list,
        max_length=MAX_IDS,
        help_text="Ids of intentions that must complete first (422 unknown_intention).",
    )
    required_context = serializers.ListField(
        child=serializers.JSONField(), required=False, default=list, max_length=MAX_IDS
    )
    completion_criteria = StrictCharField(
        max_length=2000, required=False, allow_blank=True, default=""
    )
    retry_policy = RetryPolicySerializer(required=False, default=dict)
    escalation_policy = EscalationPolicySerializer(
        required=False, default=dict, help_text=ESCALATION_POLICY_HELP
    )
    source_session = StrictCharField(
        max_length=MAX_SESSION, required=False, allow_blank=True, default=""
    )


class IntentionListQuerySerializer(CursorQuerySerializer):
    status = CommaListField(
        child=intention_status(),
        required=False,
        help_text="One status, or several comma-separated.",
    )
    trigger_type = CommaListField(
        child=trigger_type(),
        required=False,
        help_text="One trigger type, or several comma-separated.",
    )
    thread = serializers.UUIDField(required=False, help_text="A thread's id.")
    escalated = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only those escalated (at their pending occurrence); false: only the "
        "others.",
    )


class IntentionDueQuerySerializer(CursorQuerySerializer):
    thread = serializers.UUIDField(required=False, help_text="A thread's id.")


OCCURRENCE_HELP = (
    "The occurrence you mean (the intention's `occurrence` as you read it). When the "
    "intention has moved past it — another completion got there first — the answer is 409 "
    "stale_occurrence, instead of the next occurrence being completed too."
)


class CompleteInputSerializer(StrictSerializer):
    evidence = serializers.JSONField(
        required=False, allow_null=True, default=None, help_text="What shows it was done."
    )
    occurrence = StrictIntegerField(min_value=1, required=False, help_text=OCCURRENCE_HELP)


class ReasonInputSerializer(StrictSerializer):
    reason = StrictCharField(max_length=MAX_REASON, required=False, allow_blank=True, default="")


class SkipInputSerializer(ReasonInputSerializer):
    occurrence = StrictIntegerField(min_value=1, required=False, help_text=OCCURRENCE_HELP)


class FailInputSerializer(StrictSerializer):
    reason = StrictCharField(max_length=MAX_REASON, help_text="What went wrong.")


class EmptyInputSerializer(StrictSerializer):
    """No fields: send {} or nothing."""


class EscalationPolicyInputSerializer(StrictSerializer):
    escalation_policy = EscalationPolicySerializer(
        help_text="The new policy, whole ({} for none). " + ESCALATION_POLICY_HELP
    )


class DependenciesInputSerializer(StrictSerializer):
    dependencies = serializers.ListField(
        child=serializers.UUIDField(),
        max_length=MAX_IDS,
        help_text="The full new list ([] for none). A cycle is 422 dependency_cycle.",
    )


class EscalationOutputSerializer(serializers.Serializer):
    """Why and when the engine escalated the intention's pending occurrence."""

    id = serializers.UUIDField(help_text="The escalation; X-Piper-Delivery of its webhook.")
    reason = EnumField(component="EscalationReasonEnum", choices=Escalation.Reason.choices)
    occurrence = serializers.IntegerField()
    attempts = serializers.IntegerField(help_text="Failed attempts when it escalated.")
    after_failures = serializers.IntegerField(allow_null=True)
    overdue_seconds = serializers.IntegerField(allow_null=True)
    to_session = serializers.CharField()
    note = serializers.CharField()
    notify = serializers.ListField(child=serializers.CharField())
    event_id = serializers.UUIDField(help_text="The intention.escalated ledger event.")


class IntentionOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    description = serializers.CharField()
    priority = serializers.IntegerField(help_text="Higher comes first.")
    status = intention_status()
    trigger_type = trigger_type()
    trigger_spec = serializers.DictField()
    thread = serializers.UUIDField(allow_null=True, help_text="The thread's id.")
    not_before = serializers.DateTimeField(allow_null=True)
    due_at = serializers.DateTimeField(
        allow_null=True, help_text="For a recurring intention: its pending occurrence."
    )
    rrule = serializers.CharField()
    expires_at = serializers.DateTimeField(allow_null=True)
    occurrence = serializers.IntegerField(help_text="Which occurrence is pending (1, 2, …).")
    last_fired_at = serializers.DateTimeField(allow_null=True, help_text="On the engine's clock.")
    last_rehearsed_at = serializers.DateTimeField(allow_null=True)
    dependencies = serializers.ListField(
        child=serializers.UUIDField(), help_text="Intentions that must complete first."
    )
    required_context = serializers.ListField(child=serializers.JSONField())
    completion_criteria = serializers.CharField()
    completion_evidence = serializers.JSONField(allow_null=True)
    retry_policy = serializers.DictField()
    escalation_policy = serializers.DictField()
    escalated_at = serializers.DateTimeField(
        allow_null=True,
        help_text="When the engine escalated the pending occurrence (its clock); null: not "
        "escalated. Cleared when a recurring intention's next occurrence is armed.",
    )
    escalation = EscalationOutputSerializer(allow_null=True)
    source_session = serializers.CharField()
    inherited_by = serializers.CharField(help_text="The session that took the thread over.")
    source_event_id = serializers.UUIDField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()

    def to_representation(self, intention: Intention) -> dict:
        links = getattr(intention, "dependency_list", None)
        if links is None:  # not prefetched: one query
            links = intention.dependency_links.order_by("id")
        return {
            "id": str(intention.pk),
            "description": intention.description,
            "priority": intention.priority,
            "status": intention.status,
            "trigger_type": intention.trigger_type,
            "trigger_spec": intention.trigger_spec,
            "thread": api_id(intention.thread_id),
            "not_before": api_datetime(intention.not_before),
            "due_at": api_datetime(intention.due_at),
            "rrule": intention.rrule,
            "expires_at": api_datetime(intention.expires_at),
            "occurrence": intention.occurrence,
            "last_fired_at": api_datetime(intention.last_fired_at),
            "last_rehearsed_at": api_datetime(intention.last_rehearsed_at),
            "dependencies": [str(link.depends_on_id) for link in links],
            "required_context": intention.required_context,
            "completion_criteria": intention.completion_criteria,
            "completion_evidence": intention.completion_evidence,
            "retry_policy": intention.retry_policy,
            "escalation_policy": intention.escalation_policy,
            "escalated_at": api_datetime(intention.escalated_at),
            "escalation": intention.escalation,
            "source_session": intention.source_session,
            "inherited_by": intention.inherited_by,
            "source_event_id": str(intention.source_event_id),
            "created_at": api_datetime(intention.created_at),
            "updated_at": api_datetime(intention.updated_at),
        }


IntentionPageSerializer = page_of(IntentionOutputSerializer, "IntentionPageSerializer")


class TransitionOutputSerializer(serializers.Serializer):
    def get_fields(self):
        # "from" is a Python keyword: the fields are named here, not as attributes.
        return {
            "from": intention_status(allow_null=True, help_text="null: created."),
            "to": intention_status(),
            "at": serializers.DateTimeField(help_text="On the engine's clock."),
            "reason": serializers.CharField(),
            "occurrence": serializers.IntegerField(),
            "event_id": serializers.UUIDField(allow_null=True),
        }

    def to_representation(self, transition: Transition) -> dict:
        return {
            "from": transition.from_status or None,
            "to": transition.to_status,
            "at": api_datetime(transition.at),
            "reason": transition.reason,
            "occurrence": transition.occurrence,
            "event_id": api_id(transition.event_id),
        }


class FiringOutputSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    occurrence = serializers.IntegerField()
    fired_at = serializers.DateTimeField(help_text="On the engine's clock.")
    cause = trigger_type()
    cause_event_id = serializers.UUIDField(
        allow_null=True, help_text="The ledger event that matched (event triggers)."
    )
    event_id = serializers.UUIDField(help_text="The intention.fired ledger event.")

    def to_representation(self, firing: Firing) -> dict:
        return {
            "id": str(firing.pk),
            "occurrence": firing.occurrence,
            "fired_at": api_datetime(firing.fired_at),
            "cause": firing.cause,
            "cause_event_id": api_id(firing.cause_event_id),
            "event_id": str(firing.event_id),
        }


class IntentionDetailOutputSerializer(IntentionOutputSerializer):
    transitions = TransitionOutputSerializer(many=True, help_text="Its status history, in order.")
    firings = FiringOutputSerializer(many=True, help_text="One per occurrence that fired.")

    def to_representation(self, intention: Intention) -> dict:
        return {
            **super().to_representation(intention),
            "transitions": [_TRANSITION.to_representation(t) for t in intention.transition_list],
            "firings": [_FIRING.to_representation(f) for f in intention.firing_list],
        }


# One instance of each, for building nested bodies: their to_representation keeps no
# state, and a serializer (with its .data wrapper) per row costs more than the row.
_TRANSITION = TransitionOutputSerializer()
_FIRING = FiringOutputSerializer()


# ------------------------------------------------------------------ engine helpers


class HttpUrlField(serializers.URLField):
    """A URL the outbox can POST to: http or https only."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators = [
            URLValidator(schemes=["http", "https"], message="Enter an http(s) URL.")
            if isinstance(validator, URLValidator)
            else validator
            for validator in self.validators
        ]


class WebhookInputSerializer(StrictSerializer):
    url = HttpUrlField(max_length=2000, help_text="http(s) URL that receives firings.")
    secret = StrictCharField(
        min_length=16,
        max_length=200,
        help_text="Signs each delivery: X-Piper-Signature: sha256=<HMAC-SHA256 of the body>. "
        "Never shown again.",
    )


class WebhookOutputSerializer(serializers.Serializer):
    url = serializers.URLField()
    is_active = serializers.BooleanField()
    created_at = serializers.DateTimeField()


class ClockInputSerializer(StrictSerializer):
    now = AwareDateTimeField(help_text="The agent's simulated 'now'.")


class ClockOutputSerializer(serializers.Serializer):
    now = serializers.DateTimeField(help_text="The engine's 'now' for this agent.")
    simulated = serializers.BooleanField(help_text="false: the wall clock.")


class FiredSerializer(serializers.Serializer):
    intention_id = serializers.UUIDField()
    occurrence = serializers.IntegerField()
    firing_id = serializers.UUIDField()
    cause = trigger_type()


class EscalatedSerializer(serializers.Serializer):
    intention_id = serializers.UUIDField()
    occurrence = serializers.IntegerField()
    reason = EnumField(component="EscalationReasonEnum", choices=Escalation.Reason.choices)
    escalation_id = serializers.UUIDField()


class TickOutputSerializer(serializers.Serializer):
    now = serializers.DateTimeField(help_text="The simulated 'now' the cycle ran at.")
    fired = FiredSerializer(many=True, help_text="What became due: time, then event, then state.")
    rehearsed = serializers.IntegerField(help_text="Long-pending intentions re-surfaced.")
    escalated = EscalatedSerializer(
        many=True, help_text="What escalated (its escalation_policy's condition held)."
    )
