"""Shapes of the forgetting API: erasure requests and receipts, retention policies."""

from __future__ import annotations

from rest_framework import serializers

from piper.api.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
    api_datetime,
    page_of,
)
from piper.provenance import RetentionClass, SourceType

from .models import Erasure, RetentionPolicy
from .services.erasure import MAX_EVENT_IDS, MAX_TEXT_CHARS

CLASS_HELP = (
    f"One of {[c for c in RetentionClass.values if c != RetentionClass.PERMANENT]}, or empty "
    "for any class but 'permanent' (the legal hold is never swept)."
)
SOURCE_HELP = f"One of {SourceType.values}, or empty for any."


class ErasureInputSerializer(StrictSerializer):
    event_ids = serializers.ListField(
        child=serializers.UUIDField(), required=False, max_length=MAX_EVENT_IDS
    )
    source_id = serializers.UUIDField(required=False)
    actor = StrictCharField(max_length=200, required=False)
    subject = StrictCharField(
        max_length=300, required=False, help_text="An entity's id or any of its names."
    )
    session_id = StrictCharField(max_length=200, required=False)
    occurred_after = serializers.DateTimeField(required=False)
    occurred_before = serializers.DateTimeField(required=False)
    reason = StrictCharField(max_length=MAX_TEXT_CHARS)
    dry_run = StrictBooleanField(required=False, default=False)
    legal_hold_lifted = StrictCharField(
        max_length=MAX_TEXT_CHARS,
        required=False,
        default="",
        help_text="The operator's reason for erasing events under legal hold.",
    )


class ErasureOutputSerializer(serializers.ModelSerializer):
    created_at = serializers.SerializerMethodField()

    class Meta:
        model = Erasure
        fields = [
            "id",
            "kind",
            "status",
            "selector",
            "reason",
            "requested_by",
            "legal_hold_lifted",
            "events",
            "counts",
            "removed",
            "residue_found",
            "residue",
            "duration_ms",
            "created_at",
        ]

    def get_created_at(self, receipt: Erasure) -> str:
        return api_datetime(receipt.created_at)


class ErasureDryRunSerializer(serializers.Serializer):
    dry_run = serializers.BooleanField()
    events = serializers.IntegerField()
    event_ids = serializers.ListField(child=serializers.CharField())
    counts = serializers.DictField(child=serializers.IntegerField())
    removed = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


ErasurePageSerializer = page_of(ErasureOutputSerializer, "ErasurePageSerializer")


class RetentionPolicyInputSerializer(StrictSerializer):
    name = StrictCharField(max_length=100)
    # Checked by the service, whose messages say what is allowed (and why not 'permanent').
    retention_class = StrictCharField(
        max_length=20, required=False, allow_blank=True, default="", help_text=CLASS_HELP
    )
    event_type = StrictCharField(max_length=100, required=False, allow_blank=True, default="")
    source_type = StrictCharField(
        max_length=20, required=False, allow_blank=True, default="", help_text=SOURCE_HELP
    )
    max_age_days = serializers.IntegerField(min_value=1, max_value=36500)
    is_active = StrictBooleanField(required=False, default=True)
    confirm = StrictBooleanField(
        required=False,
        default=False,
        help_text="Required when the policy would erase every event of the agent's it can.",
    )


class RetentionPolicyUpdateSerializer(StrictSerializer):
    """Only the fields sent change."""

    name = StrictCharField(max_length=100, required=False)
    retention_class = StrictCharField(
        max_length=20, required=False, allow_blank=True, help_text=CLASS_HELP
    )
    event_type = StrictCharField(max_length=100, required=False, allow_blank=True)
    source_type = StrictCharField(
        max_length=20, required=False, allow_blank=True, help_text=SOURCE_HELP
    )
    max_age_days = serializers.IntegerField(min_value=1, max_value=36500, required=False)
    is_active = StrictBooleanField(required=False)
    confirm = StrictBooleanField(required=False, default=False)


class RetentionPolicyOutputSerializer(serializers.ModelSerializer):
    retention_class = serializers.CharField(help_text=CLASS_HELP)
    source_type = serializers.CharField(help_text=SOURCE_HELP)
    created_at = serializers.SerializerMethodField()
    updated_at = serializers.SerializerMethodField()

    class Meta:
        model = RetentionPolicy
        fields = [
            "id",
            "name",
            "retention_class",
            "event_type",
            "source_type",
            "max_age_days",
            "is_active",
            "created_at",
            "updated_at",
        ]

    def get_created_at(self, policy: RetentionPolicy) -> str:
        return api_datetime(policy.created_at)

    def get_updated_at(self, policy: RetentionPolicy) -> str:
        return api_datetime(policy.updated_at)
