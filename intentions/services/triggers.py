"""Trigger specs: how each is validated when an intention is made, and how it matches.

time       due_at / not_before / rrule on the intention itself; spec {}.
event      {"event_type": "deploy.*", "conditions": [{"field": "payload.env", "op": "eq", "value": "prod"}]}
           (event_type is exact or a glob; fields are event columns or payload paths).
state      {"subject": "<entity name or id>", "predicate": "<name>", "op": "eq", "value": …}
           over the agent's current facts (ops: eq ne gt gte lt lte in exists absent).
dependency fires when every intention it depends on has completed; spec {}.
manual     fires only when asked; spec {}.
"""

from __future__ import annotations

import fnmatch
from datetime import datetime
from typing import Any

from dateutil.rrule import rrulestr

from ledger.services import json_storage_error
from piper.errors import InvalidInput

from ..models import TriggerType

OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "contains", "exists", "absent")
EVENT_FIELDS = ("event_type", "actor", "session_id", "source_type", "source_ref", "authority")
MAX_CONDITIONS = 20


def _bad(message: str, field: str = "trigger_spec") -> InvalidInput:
    return InvalidInput(f"{field}: {message}", code="invalid_trigger", details={field: [message]})


def _check_condition(cond: Any, where: str) -> None:
    if not isinstance(cond, dict) or set(cond) - {"field", "op", "value"}:
        raise _bad(f"{where}: a condition is {{field, op, value}}")
    if not isinstance(cond.get("field"), str) or not cond["field"]:
        raise _bad(f"{where}.field: a field name, e.g. 'payload.env'")
    op = cond.get("op", "eq")
    if op not in OPS:
        raise _bad(f"{where}.op: one of {', '.join(OPS)}")
    if op in ("exists", "absent"):
        return
    if "value" not in cond:
        raise _bad(f"{where}.value: required for op {op!r}")
    if op == "in" and not isinstance(cond["value"], list):
        raise _bad(f"{where}.value: a list for op 'in'")


def validate_spec(trigger_type: str, spec: Any) -> dict:
    """The spec, checked; raises InvalidInput (code invalid_trigger) naming what to fix."""
    if trigger_type not in TriggerType.values:
        raise InvalidInput(
            f"trigger_type must be one of {TriggerType.values}",
            code="invalid_trigger",
            details={"trigger_type": ["unknown"]},
        )
    spec = {} if spec is None else spec
    if not isinstance(spec, dict):
        raise _bad("must be a JSON object")
    if trigger_type == TriggerType.EVENT:
        if set(spec) - {"event_type", "conditions"}:
            raise _bad("an event trigger has event_type and conditions only")
        if not isinstance(spec.get("event_type"), str) or not spec["event_type"].strip():
            raise _bad("event_type: the event type to wait for (a glob like 'deploy.*' is fine)")
        conditions = spec.get("conditions", [])
        if not isinstance(conditions, list) or len(conditions) > MAX_CONDITIONS:
            raise _bad(f"conditions: a list of at most {MAX_CONDITIONS}")
        for index, cond in enumerate(conditions):
            _check_condition(cond, f"conditions[{index}]")
    elif trigger_type == TriggerType.STATE:
        if set(spec) - {"subject", "predicate", "op", "value"}:
            raise _bad("a state trigger has subject, predicate, op and value only")
        for key in ("subject", "predicate"):
            if not isinstance(spec.get(key), str) or not spec[key].strip():
                raise _bad(f"{key}: required (an entity name or id; a predicate name)")
        _check_condition(
            {
                "field": "value",
                "op": spec.get("op", "eq"),
                **({"value": spec["value"]} if "value" in spec else {}),
            },
            "state",
        )
    elif spec:
        raise _bad(f"a {trigger_type} trigger takes no spec (send {{}})")
    # The spec is kept in the ledger (payload["trigger_spec"]): it must be storable there.
    if problem := json_storage_error(spec, path="trigger_spec", depth=1):
        raise _bad(problem.removeprefix("trigger_spec").lstrip(".: ") or problem)
    return spec


def occurrences_exist(rrule: str, start: datetime) -> datetime:
    """The first occurrence of `rrule` from `start`; InvalidInput if it does not
    parse or never occurs."""
    try:
        rule = rrulestr(rrule, dtstart=start)
        first = rule.after(start, inc=True)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(
            f"rrule: does not parse ({exc})", code="invalid_rrule", details={"rrule": [str(exc)]}
        ) from exc
    if first is None:
        raise InvalidInput(
            "rrule: never occurs from its start",
            code="invalid_rrule",
            details={"rrule": ["never occurs"]},
        )
    return first


def next_occurrence(rrule: str, start: datetime, after: datetime) -> datetime | None:
    return rrulestr(rrule, dtstart=start).after(after, inc=False)


# ------------------------------------------------------------------------ matching


def _lookup(record: dict, path: str) -> tuple[bool, Any]:
    value: Any = record
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _same(a: Any, b: Any) -> bool:
    # As JSON: true is not 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def condition_holds(op: str, found: bool, actual: Any, expected: Any) -> bool:
    if op == "exists":
        return found
    if op == "absent":
        return not found
    if not found:
        return False
    try:
        if op == "eq":
            return _same(actual, expected)
        if op == "ne":
            return not _same(actual, expected)
        if op == "in":
            return actual in expected
        if op == "contains":
            return expected in actual
        if op in ("gt", "gte", "lt", "lte"):
            if isinstance(actual, bool) or isinstance(expected, bool):
                return False
            return {
                "gt": actual > expected,
                "gte": actual >= expected,
                "lt": actual < expected,
                "lte": actual <= expected,
            }[op]
    except TypeError:  # incomparable types: the condition simply does not hold
        return False
    return False


def event_matches(spec: dict, event: Any) -> bool:
    pattern = spec["event_type"]
    if not fnmatch.fnmatchcase(event.event_type, pattern):
        return False
    record = {name: getattr(event, name) for name in EVENT_FIELDS}
    record["payload"] = event.payload
    for cond in spec.get("conditions", []):
        found, actual = _lookup(record, cond["field"])
        if not condition_holds(cond.get("op", "eq"), found, actual, cond.get("value")):
            return False
    return True
