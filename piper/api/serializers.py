"""Serializer conventions shared by every app."""

import re
from datetime import UTC, datetime

from django.utils import timezone
from rest_framework import serializers

from piper.provenance import PrivacyClass, RetentionClass


def api_datetime(value: datetime | None) -> str | None:
    """A moment as every response writes it: ISO 8601 in UTC with 'Z' for +00:00
    and microseconds only when there are any — what DRF's DateTimeField gives with
    TIME_ZONE UTC, without its per-call time-zone lookup. None stays None."""
    if value is None:
        return None
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


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
    """A query parameter holding a comma-separated list: `predicates=a,b,c`."""

    def to_internal_value(self, data):
        if isinstance(data, str):
            data = [part.strip() for part in data.split(",")]
        return super().to_internal_value(data)


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
