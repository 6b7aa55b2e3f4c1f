"""Request and response shapes of the ledger API."""

from django.conf import settings
from rest_framework import serializers

from piper.api.serializers import (
    PolicyClassesSerializer,
    SourceFieldsSerializer,
    StrictCharField,
    StrictSerializer,
    page_of,
)
from piper.provenance import Authority, PrivacyClass, RetentionClass, SourceType

from .models import Event, Source
from .services import EVENT_TYPE, MAX_EVENT_TYPE, EventDraft


class EventInputSerializer(PolicyClassesSerializer, SourceFieldsSerializer, StrictSerializer):
    """One event to append: what happened, who says so and how sure they are, and
    who may read it and how long it is kept. Unknown fields are refused."""

    event_type = serializers.RegexField(
        EVENT_TYPE,
        max_length=MAX_EVENT_TYPE,
        error_messages={
            "invalid": "use lower-case words joined by '.', ':', '/' or '-', e.g. 'tool.called'"
        },
    )
    payload = serializers.DictField(required=False, default=dict)
    occurred_at = serializers.DateTimeField(
        required=False, help_text="When it happened (ISO 8601). Defaults to the record time."
    )
    parent_event_id = serializers.UUIDField(required=False, allow_null=True, default=None)
    correction_of = serializers.UUIDField(required=False, allow_null=True, default=None)

    def to_draft(self, data: dict) -> EventDraft:
        data = dict(data)
        data["correction_of_id"] = data.pop("correction_of")
        return EventDraft(**data)


class EventBatchInputSerializer(StrictSerializer):
    events = serializers.ListField(child=EventInputSerializer(), allow_empty=False)

    def validate_events(self, value):
        if len(value) > settings.PIPER_MAX_BATCH_EVENTS:  # checked early by the view too
            raise serializers.ValidationError(
                f"at most {settings.PIPER_MAX_BATCH_EVENTS} events per batch"
            )
        return value


class EventOutputSerializer(serializers.Serializer):
    # Declared rather than a ModelSerializer: DRF re-introspects a model
    # serializer's fields on every instantiation, a third of a GET's time.
    id = serializers.UUIDField()
    seq = serializers.IntegerField()
    event_type = serializers.CharField()
    occurred_at = serializers.DateTimeField()
    recorded_at = serializers.DateTimeField()
    session_id = serializers.CharField()
    actor = serializers.CharField()
    source_type = serializers.ChoiceField(choices=SourceType.choices)
    source_ref = serializers.CharField()
    authority = serializers.ChoiceField(choices=Authority.choices)
    confidence = serializers.FloatField()
    payload = serializers.JSONField()
    payload_hash = serializers.CharField()
    # With the payload and the labels, lets a client check payload_hash
    # (ledger.hashing); a purge removes it.
    payload_salt = serializers.CharField()
    hash_version = serializers.IntegerField()
    prev_hash = serializers.CharField()
    hash = serializers.CharField()
    parent_event_id = serializers.UUIDField(allow_null=True)
    correction_of = serializers.UUIDField(source="correction_of_id", allow_null=True)
    privacy_class = serializers.ChoiceField(choices=PrivacyClass.choices)
    retention_class = serializers.ChoiceField(choices=RetentionClass.choices)
    redacted = serializers.SerializerMethodField()

    def get_redacted(self, event: Event) -> bool:
        return event.redacted_at is not None


class EventReceiptSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    seq = serializers.IntegerField()
    hash = serializers.CharField()


class BatchOutputSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    recorded_at = serializers.DateTimeField()
    events = EventReceiptSerializer(many=True)


class EventListQuerySerializer(StrictSerializer):
    """Query parameters of GET /events (cursor, limit and ordering are pagination's)."""

    event_type = serializers.ListField(
        child=serializers.CharField(max_length=MAX_EVENT_TYPE), required=False
    )
    session_id = serializers.CharField(max_length=200, required=False)
    actor = serializers.CharField(max_length=200, required=False)
    occurred_after = serializers.DateTimeField(required=False)
    occurred_before = serializers.DateTimeField(required=False)
    recorded_after = serializers.DateTimeField(required=False)
    recorded_before = serializers.DateTimeField(required=False)
    cursor = serializers.CharField(required=False)
    limit = serializers.IntegerField(min_value=1, max_value=1000, required=False)
    ordering = serializers.ChoiceField(choices=["seq", "-seq"], required=False)


class SourceInputSerializer(StrictSerializer):
    title = StrictCharField(max_length=500)
    uri = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")
    content = StrictCharField(required=False, allow_blank=True, default="", trim_whitespace=False)
    content_hash = StrictCharField(max_length=64, required=False, allow_blank=True, default="")
    media_type = StrictCharField(max_length=100, required=False, default="text/plain")


class SourceOutputSerializer(serializers.ModelSerializer):
    source_event_id = serializers.UUIDField()

    class Meta:
        model = Source
        fields = [
            "id",
            "title",
            "uri",
            "content_hash",
            "media_type",
            "content",
            "source_event_id",
            "created_at",
        ]


EventPageSerializer = page_of(EventOutputSerializer, "EventPageSerializer")
SourcePageSerializer = page_of(SourceOutputSerializer, "SourcePageSerializer")
