"""Serializer conventions shared by every app."""

from rest_framework import serializers


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
