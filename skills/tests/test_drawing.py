"""skills.drawing: parameters the service draws itself, from a version's schema."""

from __future__ import annotations

import jsonschema
import pytest

from skills.drawing import DRAWN_CASES, Undrawable, draw_params
from skills.tests.factories import SCHEMA

RICH = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 3, "maxLength": 12},
        "count": {"type": "integer", "minimum": 1, "maximum": 9},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "mode": {"enum": ["fast", "safe"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3},
        "when": {"type": "string", "format": "date"},
        "strict": {"type": "boolean"},
    },
    "required": ["name", "count", "mode", "tags"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("schema", [SCHEMA, RICH])
def test_drawn_params_fit_the_schema_are_distinct_and_avoid_the_authors(schema):
    authored = [{"record": "INV-1"}]
    drawn = draw_params(schema, seed=11, avoid=authored)
    assert len(drawn) == DRAWN_CASES
    for params in drawn:
        jsonschema.validate(params, schema)
    assert all(a != b for i, a in enumerate(drawn) for b in drawn[i + 1 :])
    assert not any(params in authored for params in drawn)


def test_a_pattern_is_drawn_by_walking_the_regex():
    schema = {
        "type": "object",
        "properties": {
            "record": {"type": "string", "pattern": "^INV-[0-9]{2,5}$"},
            "code": {"type": "string", "pattern": "^(eu|us)-\\w{3}$"},
        },
        "required": ["record", "code"],
    }
    drawn = draw_params(schema, seed=3)
    assert len(drawn) == DRAWN_CASES
    for params in drawn:
        jsonschema.validate(params, schema)
    # Both branches of the alternation and more than one repeat count are drawn.
    assert {params["code"][:2] for params in drawn} == {"eu", "us"}
    assert len({len(params["record"]) for params in drawn}) > 1


def test_the_same_seed_draws_the_same_params_and_another_seed_others():
    assert draw_params(RICH, seed=5) == draw_params(RICH, seed=5)
    assert draw_params(RICH, seed=5) != draw_params(RICH, seed=6)


@pytest.mark.parametrize(
    ("schema", "why"),
    [
        (
            {
                "type": "object",
                "properties": {"id": {"type": "string", "pattern": "^(?!x)[a-z]+$"}},
                "required": ["id"],
            },
            "parameter_schema.id: regex assert_not is not drawn",
        ),
        ({"type": "object", "oneOf": [{}, {}]}, "parameter_schema: 'oneOf' is not drawn"),
        ({"type": "string"}, "parameter_schema: parameters are drawn as an object"),
        (
            {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 5, "maximum": 1}},
                "required": ["n"],
            },
            "no drawn value fits the parameter_schema",
        ),
    ],
)
def test_what_cannot_be_drawn_says_why(schema, why):
    with pytest.raises(Undrawable) as caught:
        draw_params(schema, seed=1)
    assert str(caught.value) == why


def test_a_pattern_ends_where_the_text_ends_as_json_schema_says():
    """ECMA `$` is the end of the text; Python's also matches before a final newline."""
    from skills.services.definitions import schema_errors

    schema = {
        "type": "object",
        "properties": {"word": {"type": "string", "pattern": "^[a-z]{3,12}$"}},
        "required": ["word"],
    }
    assert schema_errors(schema, {"word": "abc"}) == []
    assert schema_errors(schema, {"word": "abc\n"}) == [
        {"path": "word", "message": "'abc\\n' does not match '^[a-z]{3,12}$'"}
    ]
    in_a_class = {"type": "object", "properties": {"w": {"type": "string", "pattern": "^[$a]+$"}}}
    assert schema_errors(in_a_class, {"w": "$a"}) == []
