"""The small declarative language of triggers, preconditions and contraindications.

Trigger (over the task text)::

    {"regex": "checksum|crc", "keywords": ["invoice", "record"], "min_keywords": 1}

It matches when the regex (Python syntax, searched case-insensitively) finds a
match, or when at least ``min_keywords`` (default 1) of the keywords occur in
the task as whole words or phrases (case-insensitive). At least one of regex
and keywords is required.

Condition (over the match request's ``context`` JSON)::

    {"path": "env.os", "op": "eq", "value": "linux", "reason": "optional text"}

``path`` is dot-separated object keys (a segment of digits indexes a list).
``op`` is one of eq, ne, in, not_in (value is a list), exists, missing (no
value), matches (value is a regex searched in a string), lt, lte, gt, gte
(numbers). A condition over a path that is absent is false, except
``missing`` (which is then true): a precondition the context cannot show does
not hold, and a contraindication the context cannot show does not apply.

Preconditions are a list of conditions, all of which must hold.
Contraindications are a list whose entries are conditions, or keyword
entries ``{"keywords": ["production", "prod db"], "reason": "…"}`` that
apply when any keyword occurs in the task text; any entry that applies
rejects the skill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

OPS = ("eq", "ne", "in", "not_in", "exists", "missing", "matches", "lt", "lte", "gt", "gte")
NO_VALUE_OPS = ("exists", "missing")
LIST_OPS = ("in", "not_in")
NUMBER_OPS = ("lt", "lte", "gt", "gte")
MAX_REGEX = 500
MAX_KEYWORDS = 50
MAX_CONDITIONS = 50
MAX_PATH = 200
MAX_REASON = 300

_ABSENT = object()


class ConditionError(ValueError):
    """A trigger or condition that is not well formed; `field` says where."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_regex(field: str, pattern: Any) -> None:
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_REGEX:
        raise ConditionError(field, f"a regular expression of 1-{MAX_REGEX} characters")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConditionError(field, f"not a valid regular expression: {exc}") from None


def _check_keywords(field: str, keywords: Any) -> None:
    if (
        not isinstance(keywords, list)
        or not keywords
        or len(keywords) > MAX_KEYWORDS
        or not all(isinstance(k, str) and k.strip() and len(k) <= 200 for k in keywords)
    ):
        raise ConditionError(
            field, f"a list of 1-{MAX_KEYWORDS} non-empty words or phrases (200 characters each)"
        )


def _check_reason(field: str, entry: dict) -> None:
    reason = entry.get("reason", "")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ConditionError(f"{field}.reason", f"text of at most {MAX_REASON} characters")


def check_trigger(trigger: Any) -> dict:
    """The trigger as stored, or ConditionError."""
    if not isinstance(trigger, dict):
        raise ConditionError("trigger", 'an object: {"regex": …} and/or {"keywords": [...]}')
    unknown = sorted(set(trigger) - {"regex", "keywords", "min_keywords"})
    if unknown:
        raise ConditionError(
            f"trigger.{unknown[0]}", "unknown key; allowed: keywords, min_keywords, regex"
        )
    if "regex" not in trigger and "keywords" not in trigger:
        raise ConditionError("trigger", "give a regex, keywords, or both")
    if "regex" in trigger:
        _check_regex("trigger.regex", trigger["regex"])
    if "keywords" in trigger:
        _check_keywords("trigger.keywords", trigger["keywords"])
    if "min_keywords" in trigger:
        least = trigger["min_keywords"]
        count = len(trigger.get("keywords", []))
        if (
            "keywords" not in trigger
            or not isinstance(least, int)
            or isinstance(least, bool)
            or not 1 <= least <= count
        ):
            raise ConditionError(
                "trigger.min_keywords",
                f"a whole number between 1 and the number of keywords ({count})",
            )
    return trigger


def check_condition(field: str, condition: Any) -> None:
    if not isinstance(condition, dict):
        raise ConditionError(field, 'an object {"path", "op", "value"}')
    unknown = sorted(set(condition) - {"path", "op", "value", "reason"})
    if unknown:
        raise ConditionError(
            f"{field}.{unknown[0]}", "unknown key; allowed: op, path, reason, value"
        )
    path = condition.get("path")
    if not isinstance(path, str) or not path or len(path) > MAX_PATH or "" in path.split("."):
        raise ConditionError(f"{field}.path", "dot-separated keys, e.g. 'env.os'")
    op = condition.get("op")
    if op not in OPS:
        raise ConditionError(f"{field}.op", f"one of {', '.join(OPS)}")
    if op in NO_VALUE_OPS:
        if "value" in condition:
            raise ConditionError(f"{field}.value", f"'{op}' takes no value")
    elif "value" not in condition:
        raise ConditionError(f"{field}.value", f"'{op}' needs a value")
    value = condition.get("value")
    if op in LIST_OPS and not isinstance(value, list):
        raise ConditionError(f"{field}.value", f"'{op}' needs a list")
    if op in NUMBER_OPS and not _is_number(value):
        raise ConditionError(f"{field}.value", f"'{op}' needs a number")
    if op == "matches":
        _check_regex(f"{field}.value", value)
    _check_reason(field, condition)


def check_preconditions(conditions: Any) -> list:
    if not isinstance(conditions, list) or len(conditions) > MAX_CONDITIONS:
        raise ConditionError("preconditions", f"a list of at most {MAX_CONDITIONS} conditions")
    for i, condition in enumerate(conditions):
        check_condition(f"preconditions[{i}]", condition)
    return conditions


def check_contraindications(entries: Any) -> list:
    if not isinstance(entries, list) or len(entries) > MAX_CONDITIONS:
        raise ConditionError(
            "contraindications", f"a list of at most {MAX_CONDITIONS} conditions or keyword entries"
        )
    for i, entry in enumerate(entries):
        field = f"contraindications[{i}]"
        if isinstance(entry, dict) and "keywords" in entry:
            unknown = sorted(set(entry) - {"keywords", "reason"})
            if unknown:
                raise ConditionError(
                    f"{field}.{unknown[0]}", "unknown key; allowed: keywords, reason"
                )
            _check_keywords(f"{field}.keywords", entry["keywords"])
            _check_reason(field, entry)
        else:
            check_condition(field, entry)
    return entries


# ---------------------------------------------------------------------- evaluation


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern, re.IGNORECASE)


@lru_cache(maxsize=4096)
def _word(phrase: str) -> re.Pattern:
    words = r"\s+".join(re.escape(w) for w in phrase.split())
    return re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)


def keywords_found(keywords: list[str], text: str) -> list[str]:
    return [k for k in keywords if _word(k).search(text)]


@dataclass(frozen=True)
class TriggerMatch:
    matched: bool
    strength: float  # 1.0 for a regex match, else the share of keywords found
    regex_matched: bool
    keywords_found: tuple[str, ...]


def trigger_match(trigger: dict, task: str) -> TriggerMatch:
    regex_matched = bool(trigger.get("regex")) and bool(_compiled(trigger["regex"]).search(task))
    keywords = trigger.get("keywords") or []
    found = tuple(keywords_found(keywords, task)) if keywords else ()
    enough = bool(keywords) and len(found) >= trigger.get("min_keywords", 1)
    share = len(found) / len(keywords) if keywords else 0.0
    return TriggerMatch(
        matched=regex_matched or enough,
        strength=1.0 if regex_matched else share,
        regex_matched=regex_matched,
        keywords_found=found,
    )


def resolve(context: Any, path: str) -> Any:
    """The value at `path` in `context`, or _ABSENT."""
    current = context
    for segment in path.split("."):
        if isinstance(current, dict) and segment in current:
            current = current[segment]
        elif isinstance(current, list) and segment.isdigit() and int(segment) < len(current):
            current = current[int(segment)]
        else:
            return _ABSENT
    return current


def condition_holds(condition: dict, context: Any) -> tuple[bool, Any]:
    """(holds, the value found at the path or None when absent)."""
    value = resolve(context, condition["path"])
    op = condition["op"]
    if value is _ABSENT:
        return op == "missing", None
    expected = condition.get("value")
    if op == "exists":
        holds = True
    elif op == "missing":
        holds = False
    elif op == "eq":
        holds = _same(value, expected)
    elif op == "ne":
        holds = not _same(value, expected)
    elif op == "in":
        holds = any(_same(value, option) for option in expected)
    elif op == "not_in":
        holds = not any(_same(value, option) for option in expected)
    elif op == "matches":
        holds = isinstance(value, str) and bool(_compiled(expected).search(value))
    else:
        holds = (
            _is_number(value)
            and {
                "lt": value < expected,
                "lte": value <= expected,
                "gt": value > expected,
                "gte": value >= expected,
            }[op]
        )
    return holds, value


def _same(a: Any, b: Any) -> bool:
    # JSON equality: true is not 1, and 1 equals 1.0.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def failed_preconditions(preconditions: list, context: Any) -> list[dict]:
    """Each precondition that does not hold, with what the context had there."""
    failed = []
    for condition in preconditions:
        holds, actual = condition_holds(condition, context)
        if not holds:
            failed.append({**condition, "actual": actual})
    return failed


def applying_contraindications(entries: list, task: str, context: Any) -> list[dict]:
    """Each contraindication that applies, with what made it apply."""
    applying = []
    for entry in entries:
        if "keywords" in entry:
            found = keywords_found(entry["keywords"], task)
            if found:
                applying.append({**entry, "found": found})
        else:
            holds, actual = condition_holds(entry, context)
            if holds:
                applying.append({**entry, "actual": actual})
    return applying
