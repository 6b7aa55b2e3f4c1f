"""The shared serializer toolkit (piper/api/serializers.py), on its own."""

import uuid

from django.urls import path
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response

from piper.api.serializers import (
    CommaListField,
    EnumField,
    JSONObjectField,
    StrictSerializer,
    api_id,
)


class Query(StrictSerializer):
    kinds = CommaListField(child=serializers.ChoiceField(choices=["a", "b"]), required=False)


class Body(StrictSerializer):
    checked = JSONObjectField(check=True, required=False)
    unchecked = JSONObjectField(required=False)


def test_api_id():
    value = uuid.UUID("00000000-0000-0000-0000-000000000001")
    assert api_id(value) == "00000000-0000-0000-0000-000000000001"
    assert api_id(7) == "7"
    assert api_id(None) is None


def test_comma_list_splits_and_strips():
    query = Query(data={"kinds": "a, b"})
    assert query.is_valid(), query.errors
    assert query.validated_data == {"kinds": ["a", "b"]}


def test_comma_list_refuses_an_empty_part():
    query = Query(data={"kinds": "a,"})
    assert not query.is_valid()
    assert query.errors == {"kinds": {1: ['"" is not a valid choice.']}}


def test_json_object_checked_only_when_asked():
    body = Body(data={"checked": [1], "unchecked": [1]})
    assert not body.is_valid()
    assert body.errors == {"checked": ["must be a JSON object"]}
    body = Body(data={"checked": {"a": 1}, "unchecked": [1]})
    assert body.is_valid(), body.errors
    assert body.validated_data == {"checked": {"a": 1}, "unchecked": [1]}


class Out(serializers.Serializer):
    status = EnumField(component="ToolkitStatusEnum", choices=[("on", "On"), ("off", "Off")])
    kind = EnumField(component="ToolkitStatusEnum", choices=[("on", "On"), ("off", "Off")])


@extend_schema(responses=Out)
@api_view(["GET"])
def toolkit_view(request):
    return Response({})


def test_enum_field_is_one_named_component():
    schema = SchemaGenerator(patterns=[path("toolkit", toolkit_view)]).get_schema(
        request=None, public=True
    )
    components = schema["components"]["schemas"]
    assert components["ToolkitStatusEnum"] == {
        "type": "string",
        "enum": ["on", "off"],
        "description": "* `on` - On\n* `off` - Off",
    }
    props = components["Out"]["properties"]
    assert props["status"] == props["kind"] == {"$ref": "#/components/schemas/ToolkitStatusEnum"}
