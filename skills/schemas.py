"""JSON Schema validation of a skill's parameters, with JSON Schema's regex `$`.

JSON Schema's `pattern` is an ECMA-262 regex: `$` (without the multiline
flag) matches only at the very end of the text. jsonschema runs patterns
with Python's `re`, where `$` also matches before a final newline, so
`^[a-z]{3,12}$` accepted "abc\\n". Here `$` outside a character class is
read as `\\Z`, the end of the text.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError


@lru_cache(maxsize=512)
def _ecma(pattern: str) -> re.Pattern:
    out, i, in_class = [], 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
        i += 1
    return re.compile("".join(out))


def _pattern(validator, pattern: str, instance: Any, schema: dict):
    if validator.is_type(instance, "string") and not _ecma(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def parameter_validator(schema: dict):
    """A validator for `schema` (its own draft) whose `pattern` ends where the text ends."""
    base = jsonschema.validators.validator_for(schema)
    return jsonschema.validators.extend(base, {"pattern": _pattern})(schema)
