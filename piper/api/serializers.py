"""Serializer conventions shared by every app."""

import re
from datetime import UTC, datetime

from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from piper.provenance import Authority, PrivacyClass, RetentionClass, SourceType


def api_datetime(value: datetime | None) -> str | None:
    """A moment as every response writes it: ISO 8601 in UTC with 'Z' for +00:00
    and microseconds only when there are any — what DRF's DateTimeField gives with
    TIME_ZONE UTC, without its per-call time-zone lookup. None stays None."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def api_id(value) -> str | None:
    """An id (a UUID, or a nullable foreign key's) as every response writes it: a
    string, and None stays None."""
    return None if value is None else str(value)


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know, so a typo is an error rather than ignored."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {
                        name: [f"unknown field; allowed: {', '.join(sorted(self.fields))}"]
                        for name in unknown
                    }
                )
        return super().to_internal_value(data)


class StrictCharField(serializers.CharField):
    """A string must arrive as a JSON string: 5 is not "5"."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A number must arrive as a JSON number: true and "0.5" are not numbers."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return super().to_internal_value(data)


class AwareDateTimeField(serializers.DateTimeField):
    """An ISO 8601 date-time that names its time zone: a bare local time is ambiguous
    on both time axes, so it is refused rather than read as UTC."""

    default_error_messages = {
        "naive": "must carry a time zone, e.g. 2026-01-31T09:00:00Z",
    }

    def enforce_timezone(self, value):
        if timezone.is_naive(value):
            self.fail("naive")
        return super().enforce_timezone(value)


class QueryDateTimeField(AwareDateTimeField):
    """AwareDateTimeField for a query string, where an unencoded '+' of a UTC offset
    arrives as a space: `valid_time=2021-01-01T00:00:00+02:00` reads as intended."""

    UNENCODED_PLUS = re.compile(r"^(\S+T\d\d:\d\d(?::\d\d(?:\.\d+)?)?) (\d\d(?::?\d\d)?)$")

    def to_internal_value(self, value):
        if isinstance(value, str):
            value = self.UNENCODED_PLUS.sub(r"\1+\2", value)
        return super().to_internal_value(value)


class StrictIntegerField(serializers.IntegerField):
    """An integer must arrive as a JSON integer: "5", 5.0 and true are not integers."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A boolean must arrive as JSON true or false: "yes" and 1 are not booleans."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class CursorQuerySerializer(StrictSerializer):
    """The query of a cursor-paginated list."""

    cursor = serializers.CharField(required=False, help_text="From a 'next' or 'previous' link.")
    limit = serializers.IntegerField(
        min_value=1, max_value=1000, required=False, help_text="Page size (default 100)."
    )


def page_of(item: type[serializers.Serializer], name: str) -> type[serializers.Serializer]:
    """The shape of one page of a cursor-paginated list (for the schema)."""
    return type(
        name,
        (serializers.Serializer,),
        {
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item(many=True),
        },
    )


class CommaListField(serializers.ListField):
    """A query parameter holding a comma-separated list: `predicates=a,b,c`. An
    empty part is passed to the child, which refuses it like any blank value:
    `a,,b` is a mistake, not two items."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [part.strip() for part in data.split(",")]
        return super().to_internal_value(data)


@extend_schema_field(OpenApiTypes.OBJECT)
class JSONObjectField(serializers.JSONField):
    """A JSON object, documented as one. Unchecked by default: the service checks
    it, so that its error carries the domain's code (e.g. invalid_trigger). With
    `check=True` anything but an object is refused here ("must be a JSON object")."""

    def __init__(self, *, check: bool = False, **kwargs):
        self.check = check
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if self.check and not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object")
        return value


class EnumField(serializers.ChoiceField):
    """A ChoiceField documented as a named enum component (EnumFieldExtension below).

    Many choice sets sit in fields named "status" or "kind"; left to spectacular's
    naming by field name they would collide with each other and be renamed."""

    def __init__(self, *, component: str, choices, **kwargs):
        self.component = component
        super().__init__(choices=choices, **kwargs)


class EnumFieldExtension(OpenApiSerializerFieldExtension):
    target_class = EnumField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        component = ResolvedComponent(
            name=field.component,
            type=ResolvedComponent.SCHEMA,
            object=field.component,
            schema={
                "type": "string",
                "enum": list(field.choices),
                "description": "\n".join(
                    f"* `{value}` - {label}" for value, label in field.choices.items()
                ),
            },
        )
        auto_schema.registry.register_on_missing(component)
        return component.ref


class PolicyClassesSerializer(serializers.Serializer):
    """The two policy classes every write takes (DESIGN §8), to mix into a
    write's input: who may read it (privacy_class, against an API key's
    clearance) and how long it is kept (retention_class, for the retention
    sweep; 'permanent' is a legal hold)."""

    privacy_class = serializers.ChoiceField(
        choices=PrivacyClass.choices,
        required=False,
        default=PrivacyClass.INTERNAL,
        help_text="Who may read it: an API key sees what is up to its clearance.",
    )
    retention_class = serializers.ChoiceField(
        choices=RetentionClass.choices,
        required=False,
        default=RetentionClass.STANDARD,
        help_text="How long it is kept: retention policies sweep by class; 'permanent' is "
        "a legal hold.",
    )


class SourceFieldsSerializer(serializers.Serializer):
    """Who says so and how sure they are (DESIGN §3), to mix into a write's
    input: the same six fields on an event and on a fact's claim."""

    session_id = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    actor = StrictCharField(max_length=200, required=False, allow_blank=True, default="")
    source_type = serializers.ChoiceField(
        choices=SourceType.choices, required=False, default=SourceType.AGENT_INFERENCE
    )
    source_ref = StrictCharField(max_length=500, required=False, allow_blank=True, default="")
    authority = serializers.ChoiceField(
        choices=Authority.choices,
        required=False,
        help_text="Defaults from source_type (operator > system_observation > user_statement > "
        "tool_result > agent_inference > third_party).",
    )
    confidence = StrictFloatField(min_value=0.0, max_value=1.0, required=False, default=1.0)
