"""The API's JSON renderer writes RawJSON text in verbatim and is DRF's otherwise."""

import json
import re
from datetime import UTC, datetime
from decimal import Decimal

from rest_framework.renderers import JSONRenderer as DRFJSONRenderer

from piper.api.rendering import JSONRenderer, RawJSON, _Encoder


def render(data, media_type=None) -> bytes:
    return JSONRenderer().render(data, media_type)


def test_raw_json_is_written_as_it_is():
    text = '[{"id":1,"when":"2026-03-01T09:05:00.000120Z"},{"id":2,"name":"Zoë\\n"}]'

    body = render({"before": 1, "items": RawJSON(text), "after": [2]})

    assert body == ('{"before":1,"items":' + text + ',"after":[2]}').encode()
    assert json.loads(body)["items"][1]["name"] == "Zoë\n"


def test_several_raw_values_nested_and_in_lists_each_land_in_their_place():
    data = {"a": [RawJSON("[1,2]"), {"b": RawJSON('{"c":null}')}], "d": RawJSON('"x"')}

    assert json.loads(render(data)) == {"a": [[1, 2], {"b": {"c": None}}], "d": "x"}


def test_a_string_shaped_like_the_marker_is_left_alone():
    # The marker is random per render: a client's text cannot name a RawJSON slot.
    lookalike = "piper-raw-json-" + "0" * 32 + "-0"

    body = render({"note": lookalike, "items": RawJSON("[]")})

    assert json.loads(body) == {"note": lookalike, "items": []}


def test_without_raw_json_the_output_is_drf_s_byte_for_byte():
    data = {
        "when": datetime(2026, 3, 1, 9, 5, 0, 120, tzinfo=UTC),
        "amount": Decimal("1.50"),
        "text": "line\u2028separator, ünïcode",
        "nested": [{"x": 1.5}, None, True],
    }

    assert render(data) == DRFJSONRenderer().render(data)


def test_an_indent_asked_for_is_kept_and_the_result_is_valid_json():
    body = render({"items": RawJSON('[{"a":1}]')}, "application/json; indent=2")

    assert body.startswith(b'{\n  "items": [{"a":1}]')
    assert json.loads(body) == {"items": [{"a": 1}]}


def test_json_dumps_outside_a_render_parses_the_raw_value():
    assert json.loads(json.dumps({"items": RawJSON("[1]")}, cls=_Encoder)) == {"items": [1]}


def test_nothing_is_left_pending_after_a_render_fails():
    class Unserialisable:
        pass

    try:
        render({"items": RawJSON("[1]"), "bad": Unserialisable()})
    except TypeError:
        pass
    else:
        raise AssertionError("an unserialisable value must raise")
    body = render({"items": RawJSON("[3]")})
    assert re.fullmatch(rb'\{"items":\[3\]\}', body)
