"""Parameters the service draws itself, for a replay the author did not choose.

A version's examples and hold-out cases are the author's inputs; passing them
shows the procedure fits the author's idea of it. Promotion to validated also
needs evidence the author did not pick (lifecycle.validated_evidence): one
way is a *drawn* replay, the procedure run in the sandbox on inputs drawn here
from its parameter_schema and judged by its validator.

`draw_params` draws from a seeded generator over the JSON Schema subset
skills use: objects (properties, required, additionalProperties false),
strings (length bounds, enum, const, a few formats, and a `pattern` made of
literals, character classes, groups, alternatives and repeats, drawn by
walking Python's own parse of the regex), integers and numbers (bounds),
booleans, null, arrays (item schema, length bounds). A schema outside it
(oneOf / anyOf / allOf, $ref, a regex with look-arounds or back-references)
raises Undrawable with the reason: such a version is validated by a
different key's verified run instead. Every drawn value is checked against
the schema with jsonschema.
"""

from __future__ import annotations

import random
import re
import string
from typing import Any

from .schemas import parameter_validator

try:  # Python's regex parser: public as sre_parse until 3.11, re._parser after
    from re import _parser as regex_parser
except ImportError:  # pragma: no cover
    import sre_parse as regex_parser

DRAWN_CASES = 8
MAX_ATTEMPTS = 50  # draws per case before giving up (a schema our bounds cannot meet)
MAX_REPEAT = 8  # an open-ended repeat (*, +, {n,}) draws at most this many more
UNSUPPORTED = ("oneOf", "anyOf", "allOf", "not", "$ref", "patternProperties", "if")
_ALPHABET = string.ascii_letters + string.digits + "-_ "


class Undrawable(Exception):
    """The schema uses what the drawer does not draw; the message says what."""


def _check_supported(schema: Any, path: str) -> None:
    if not isinstance(schema, dict):
        raise Undrawable(f"{path}: not a schema object")
    for keyword in UNSUPPORTED:
        if keyword in schema:
            raise Undrawable(f"{path}: '{keyword}' is not drawn")
    for name, sub in (schema.get("properties") or {}).items():
        _check_supported(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        _check_supported(schema["items"], f"{path}[]")


_CATEGORIES = {
    "CATEGORY_DIGIT": string.digits,
    "CATEGORY_WORD": string.ascii_letters + string.digits + "_",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_DIGIT": string.ascii_letters + "_-",
    "CATEGORY_NOT_WORD": "-.:/ ",
    "CATEGORY_NOT_SPACE": string.ascii_letters + string.digits,
}
_PRINTABLE = string.ascii_letters + string.digits + "-_.:/ "


def _class_chars(items) -> str:
    """The characters a [...] class allows, from its parsed items."""
    chars, negate = [], False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            chars.append(chr(arg))
        elif name == "RANGE":
            chars.extend(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 200) + 1))
        elif name == "CATEGORY":
            chars.extend(_CATEGORIES.get(str(arg), ""))
        else:
            raise Undrawable(f"regex class item {name} is not drawn")
    if negate:
        chars = [c for c in _PRINTABLE if c not in chars]
    if not chars:
        raise Undrawable("a regex class allows no character the drawer draws")
    return "".join(chars)


def _regex_text(parsed, rng: random.Random) -> str:
    out = []
    for op, arg in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append(rng.choice([c for c in _PRINTABLE if c != chr(arg)]))
        elif name == "ANY":
            out.append(rng.choice(_PRINTABLE))
        elif name == "IN":
            out.append(rng.choice(_class_chars(arg)))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            high = low + MAX_REPEAT if high == regex_parser.MAXREPEAT else high
            out.extend(_regex_text(sub, rng) for _ in range(rng.randint(low, high)))
        elif name == "SUBPATTERN":
            out.append(_regex_text(arg[-1], rng))
        elif name == "BRANCH":
            out.append(_regex_text(rng.choice(arg[1]), rng))
        elif name == "AT":
            continue  # ^, $, \b: where, not what
        else:
            raise Undrawable(f"regex {name.lower()} is not drawn")
    return "".join(out)


def _from_pattern(pattern: str, rng: random.Random) -> str:
    try:
        parsed = regex_parser.parse(pattern)
    except re.error as exc:
        raise Undrawable(f"pattern {pattern!r} is not a regex: {exc}") from exc
    return _regex_text(parsed, rng)


def _string(schema: dict, rng: random.Random) -> str:
    if "pattern" in schema:
        # jsonschema's pattern is a search, not a full match: the drawn text fits it.
        return _from_pattern(schema["pattern"], rng)
    fmt = schema.get("format")
    if fmt == "date":
        return f"{rng.randint(1990, 2035):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if fmt == "date-time":
        return f"{_string({'format': 'date'}, rng)}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
    if fmt == "email":
        return f"{''.join(rng.choices(string.ascii_lowercase, k=6))}@example.org"
    low = int(schema.get("minLength", 1))
    high = int(schema.get("maxLength", max(low, 1) + 15))
    length = rng.randint(low, max(low, high))
    text = "".join(rng.choices(_ALPHABET, k=length))
    # Leading or trailing spaces read as a different input to many procedures: keep them inside.
    return (
        text
        if length < 2
        else rng.choice(string.ascii_letters) + text[1:-1] + rng.choice(string.digits)
    )


def _value(schema: dict, rng: random.Random, depth: int = 0) -> Any:
    if depth > 8:
        raise Undrawable("nested deeper than 8 levels")
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice([k for k in kind if k != "null"] or kind)
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        value = {}
        for name, sub in properties.items():
            if name in required or rng.random() < 0.5:
                try:
                    value[name] = _value(sub, rng, depth + 1)
                except Undrawable as exc:
                    raise Undrawable(f"{name}: {exc}") from None
        missing = required - set(properties)
        if missing:
            raise Undrawable(f"required properties without a schema: {', '.join(sorted(missing))}")
        return value
    if kind == "string":
        return _string(schema, rng)
    if kind == "integer":
        low = int(schema.get("minimum", schema.get("exclusiveMinimum", -1001) + 1))
        high = int(schema.get("maximum", schema.get("exclusiveMaximum", 1001) - 1))
        return rng.randint(low, max(low, high))
    if kind == "number":
        low = float(schema.get("minimum", -1000.0))
        high = float(schema.get("maximum", 1000.0))
        return round(rng.uniform(low, max(low, high)), 3)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "array":
        low = int(schema.get("minItems", 0))
        high = int(schema.get("maxItems", low + 4))
        items = schema.get("items") or {"type": "string"}
        return [_value(items, rng, depth + 1) for _ in range(rng.randint(low, max(low, high)))]
    raise Undrawable(f"type {kind!r} is not drawn")


def draw_params(
    schema: dict, *, seed: int, count: int = DRAWN_CASES, avoid: list[dict] | None = None
) -> list[dict]:
    """`count` distinct parameter objects that fit `schema`, none equal to one in
    `avoid` (the author's own cases). Raises Undrawable."""
    _check_supported(schema, "parameter_schema")
    if schema.get("type", "object") != "object":
        raise Undrawable("parameter_schema: parameters are drawn as an object")
    checker = parameter_validator(schema)
    rng = random.Random(seed)
    drawn: list[dict] = []
    seen = [*(avoid or [])]
    for _ in range(count):
        for _attempt in range(MAX_ATTEMPTS):
            try:
                candidate = _value(schema, rng)
            except Undrawable as exc:
                raise Undrawable(f"parameter_schema.{exc}") from None
            if candidate not in seen and checker.is_valid(candidate):
                drawn.append(candidate)
                seen.append(candidate)
                break
        else:
            break
    if not drawn:
        raise Undrawable("no drawn value fits the parameter_schema")
    return drawn
