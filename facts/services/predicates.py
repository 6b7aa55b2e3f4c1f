"""Predicates: a name with a cardinality and a value type, redefined only when
the believed facts still fit."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.utils.dateparse import parse_datetime

from ledger.services import json_storage_error
from piper.errors import Conflict, InvalidInput
from piper.ids import uuid7
from piper.tenancy.models import Agent

from .. import projection as p
from ..models import (
    MAX_VOLATILITY_SECONDS,
    Cardinality,
    Fact,
    FactStatus,
    Predicate,
    ValueType,
)
from .common import MISSING, OPERATOR, Provenance, a_or_an, append_and_apply

PREDICATE_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")


def _value_type_error(value_type: str, value: Any) -> str | None:
    checks = {
        ValueType.ANY: lambda v: True,
        ValueType.STRING: lambda v: isinstance(v, str),
        ValueType.NUMBER: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        ValueType.INTEGER: lambda v: isinstance(v, int) and not isinstance(v, bool),
        ValueType.BOOLEAN: lambda v: isinstance(v, bool),
        ValueType.OBJECT: lambda v: isinstance(v, dict),
        ValueType.ARRAY: lambda v: isinstance(v, list),
        ValueType.DATETIME: lambda v: isinstance(v, str) and _is_datetime(v),
    }
    if value_type == ValueType.ENTITY:
        return "this predicate relates entities: send object_entity, not value"
    if value is None:
        return "a fact needs a value (to say it no longer holds, retract or end it)"
    if not checks[value_type](value):
        return f"expected {a_or_an(ValueType(value_type).label.lower())} value, got {type(value).__name__}"
    return None


def value_error(value_type: str, value: Any) -> str | None:
    """Why `value` cannot be a fact's value: the predicate's type, or the ledger's limits."""
    return _value_type_error(value_type, value) or json_storage_error(value, path="value")


def _is_datetime(text: str) -> bool:
    try:
        parsed = parse_datetime(text)
    except ValueError:
        return False
    return parsed is not None and parsed.tzinfo is not None


def predicate_define(
    *,
    agent: Agent,
    name: str,
    cardinality: str | None = None,
    value_type: str | None = None,
    volatility_seconds: int | None | Any = MISSING,
    description: str | None = None,
    aliases: Sequence[str] | None = None,
    examples: Sequence[str] | None = None,
    provenance: Provenance = OPERATOR,
) -> Predicate:
    """Create a predicate, or change one. Unchanged definitions write nothing.

    `aliases`: other words a question may use for it (recall, recall/about.py);
    trimmed, lower-cased, each once, in the order given. `examples`:
    questions that ask for it, about "it" ("How far along is it?"), which
    recall compares by meaning with a question that names a subject; trimmed,
    each once, in the order given.

    Raises Conflict (cardinality_conflict / value_type_conflict) when existing
    believed facts would break under the new definition.
    """
    if not isinstance(name, str) or len(name) > 100 or not PREDICATE_NAME.fullmatch(name):
        raise InvalidInput(
            "predicate names are lower-case words joined by '_' or '.', e.g. 'lives_in'",
            details={"predicate": ["invalid format"]},
        )
    if cardinality is not None and cardinality not in Cardinality.values:
        raise InvalidInput(
            f"cardinality must be one of {Cardinality.values}", details={"cardinality": ["invalid"]}
        )
    if value_type is not None and value_type not in ValueType.values:
        raise InvalidInput(
            f"value_type must be one of {ValueType.values}", details={"value_type": ["invalid"]}
        )
    if volatility_seconds not in (MISSING, None) and (
        isinstance(volatility_seconds, bool)
        or not isinstance(volatility_seconds, int)
        or not 1 <= volatility_seconds <= MAX_VOLATILITY_SECONDS
    ):
        raise InvalidInput(
            f"volatility_seconds must be an integer from 1 to {MAX_VOLATILITY_SECONDS} (a "
            "century), or null for a value that never needs re-checking",
            details={"volatility_seconds": ["invalid"]},
        )
    if aliases is not None:
        aliases = clean_aliases(aliases)
    if examples is not None:
        examples = clean_examples(examples)
    with transaction.atomic():
        current = Predicate.objects.select_for_update().filter(agent=agent, name=name).first()
        definition = {
            "predicate_id": str(current.pk if current else uuid7()),
            "name": name,
            "cardinality": cardinality or (current.cardinality if current else Cardinality.ONE),
            "value_type": value_type or (current.value_type if current else ValueType.ANY),
            "volatility_seconds": (
                (current.volatility_seconds if current else None)
                if volatility_seconds is MISSING
                else volatility_seconds
            ),
            "description": description
            if description is not None
            else (current.description if current else ""),
            "aliases": aliases if aliases is not None else (current.aliases if current else []),
            "examples": (
                examples if examples is not None else (current.examples if current else [])
            ),
        }
        if current:
            unchanged = all(
                getattr(current, key) == definition[key]
                for key in (
                    "cardinality",
                    "value_type",
                    "volatility_seconds",
                    "description",
                    "aliases",
                    "examples",
                )
            )
            if unchanged:
                return current
            _check_redefinition(current, definition)
        return append_and_apply(
            agent=agent, drafts=[provenance.draft(p.PREDICATE_DEFINED, definition)]
        )[0].obj


def clean_aliases(aliases: Any) -> list[str]:
    from ..models import MAX_PREDICATE_ALIAS_CHARS, MAX_PREDICATE_ALIASES

    return _clean_phrases(
        aliases,
        field="aliases",
        most=MAX_PREDICATE_ALIASES,
        chars=MAX_PREDICATE_ALIAS_CHARS,
        what="a word or phrase",
        example='["due", "due by"]',
        lower=True,
    )


def clean_examples(examples: Any) -> list[str]:
    from ..models import MAX_PREDICATE_EXAMPLE_CHARS, MAX_PREDICATE_EXAMPLES

    return _clean_phrases(
        examples,
        field="examples",
        most=MAX_PREDICATE_EXAMPLES,
        chars=MAX_PREDICATE_EXAMPLE_CHARS,
        what='a question about "it"',
        example='["How far along is it?"]',
        lower=False,
    )


def _clean_phrases(
    values: Any, *, field: str, most: int, chars: int, what: str, example: str, lower: bool
) -> list[str]:
    """A predicate's list of phrases: a list of at most `most` strings of 1 to
    `chars` characters, spaces collapsed (and lower-cased), each once, in order."""
    if isinstance(values, str) or not isinstance(values, Sequence):
        raise InvalidInput(
            f"{field} must be a list, each item {what}, e.g. {example}",
            details={field: ["not a list"]},
        )
    if len(values) > most:
        raise InvalidInput(
            f"at most {most} {field} per predicate (got {len(values)})",
            details={field: ["too many"]},
        )
    cleaned: list[str] = []
    for value in values:
        text = " ".join(value.split()) if isinstance(value, str) else ""
        text = text.lower() if lower else text
        if not text or len(text) > chars:
            raise InvalidInput(
                f"each item of {field} must be {what} of 1 to {chars} characters (got {value!r})",
                details={field: [f"invalid {field[:-1]}"]},
            )
        if text not in cleaned:
            cleaned.append(text)
    return cleaned


def _check_redefinition(current: Predicate, definition: dict) -> None:
    believed = Fact.objects.filter(
        predicate=current, status=FactStatus.ACTIVE, superseded_at__isnull=True
    )
    if current.cardinality == Cardinality.MANY and definition["cardinality"] == Cardinality.ONE:
        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT DISTINCT a.subject_id FROM facts_fact a JOIN facts_fact b
                  ON b.predicate_id = a.predicate_id AND b.subject_id = a.subject_id AND b.id > a.id
                 AND b.status = 'active' AND b.superseded_at IS NULL
                 AND tstzrange(a.valid_from, a.valid_to) && tstzrange(b.valid_from, b.valid_to)
                WHERE a.predicate_id = %s AND a.status = 'active' AND a.superseded_at IS NULL
                LIMIT 5
                """,
                [current.pk],
            )
            subjects = [str(row[0]) for row in cursor.fetchall()]
        if subjects:
            raise Conflict(
                f"predicate {current.name!r} cannot become single-valued: some subjects hold "
                "several values at the same time; end or retract the extra values first",
                code="cardinality_conflict",
                details={"subjects": subjects},
            )
    new_type = definition["value_type"]
    if new_type != current.value_type and new_type != ValueType.ANY:
        if new_type == ValueType.ENTITY or current.value_type == ValueType.ENTITY:
            clash = believed.exists()
        else:
            clash = any(
                _value_type_error(new_type, v)
                for v in believed.values_list("object_value", flat=True).iterator()
            )
        if clash:
            raise Conflict(
                f"predicate {current.name!r} has believed values that are not of type {new_type!r}",
                code="value_type_conflict",
                details={"value_type": [new_type]},
            )
