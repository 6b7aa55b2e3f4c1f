"""The host tools a skill may declare and call: the only doors out of the sandbox.

A version lists `required_tools`; creating it with a name not in TOOLS is a
422. When it runs, the sandbox offers it exactly those tools, each bound to
the executing agent (`fact_current` reads only that agent's facts). A tool
takes one JSON object and returns JSON; bad arguments raise ToolError, which
the sandbox reports to the skill as the call's error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

MAX_TEXT = 1_000_000


class ToolError(ValueError):
    pass


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: str  # what the one JSON object argument holds
    run: Callable[[Any, dict], Any]  # (agent, args) -> JSON


def _text(args: Any, name: str = "text") -> str:
    if not isinstance(args, dict):
        raise ToolError("tools take one JSON object of arguments")
    value = args.get(name)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ToolError(f"'{name}' must be a string of at most {MAX_TEXT} characters")
    return value


def _sha256(agent, args: dict) -> str:
    return hashlib.sha256(_text(args).encode()).hexdigest()


def _crc32(agent, args: dict) -> int:
    return zlib.crc32(_text(args).encode())


def _hmac_sha256(agent, args: dict) -> str:
    return hmac.new(_text(args, "key").encode(), _text(args).encode(), hashlib.sha256).hexdigest()


def _base64_encode(agent, args: dict) -> str:
    return base64.b64encode(_text(args).encode()).decode()


def _base64_decode(agent, args: dict) -> str:
    try:
        return base64.b64decode(_text(args), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise ToolError(f"not base64 of UTF-8 text: {exc}") from None


def _regex_match(agent, args: dict) -> dict | None:
    pattern = _text(args, "pattern")
    if len(pattern) > 500:
        raise ToolError("'pattern' must be at most 500 characters")
    try:
        found = re.search(pattern, _text(args))
    except re.error as exc:
        raise ToolError(f"not a valid regular expression: {exc}") from None
    if found is None:
        return None
    return {"match": found.group(0), "groups": list(found.groups()), "named": found.groupdict()}


def _now(agent, args: dict) -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _fact_current(agent, args: dict) -> Any:
    """{"subject", "predicate"} -> the believed current value (a list for a many-valued
    predicate), an entity's name for a relation, or None when nothing is known."""
    from facts import selectors
    from piper.errors import NotFound

    subject, predicate = _text(args, "subject"), _text(args, "predicate")
    try:
        entity = selectors.entity_resolve(agent=agent, ref=subject)
        pred = selectors.predicate_get(agent=agent, name=predicate)
    except NotFound:
        return None
    values = [
        fact.object_entity.name if fact.object_entity_id else fact.object_value
        for fact in selectors.facts_current(agent=agent, subject=entity, predicate=pred)
    ]
    if pred.cardinality == "many":
        return values
    return values[0] if values else None


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool("sha256", "SHA-256 of the UTF-8 text, lower-case hex", '{"text"}', _sha256),
        Tool("crc32", "CRC-32 (zlib) of the UTF-8 text, an unsigned integer", '{"text"}', _crc32),
        Tool("hmac_sha256", "HMAC-SHA256 of text under key, hex", '{"key", "text"}', _hmac_sha256),
        Tool("base64_encode", "Base64 of the UTF-8 text", '{"text"}', _base64_encode),
        Tool("base64_decode", "UTF-8 text of the Base64", '{"text"}', _base64_decode),
        Tool(
            "regex_match",
            "First match of pattern in text: {match, groups, named} or null",
            '{"pattern", "text"}',
            _regex_match,
        ),
        Tool("now", "The current time, ISO 8601 UTC", "{}", _now),
        Tool(
            "fact_current",
            "The agent's believed current value of subject.predicate, or null",
            '{"subject", "predicate"}',
            _fact_current,
        ),
    )
}


def unknown_tools(names: Iterable[str]) -> list[str]:
    return [name for name in names if name not in TOOLS]


def bound_tools(*, agent, names: Iterable[str]) -> Mapping[str, Callable[[dict], Any]]:
    """The declared tools, each a one-argument callable bound to `agent`: what
    skills.sandbox.run_skill offers the skill's code, and nothing more."""

    def bind(tool: Tool) -> Callable[[dict], Any]:
        return lambda args: tool.run(agent, args)

    return {name: bind(TOOLS[name]) for name in names}
