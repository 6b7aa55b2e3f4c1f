"""The condition language, evaluated exactly."""

import pytest

from skills import conditions as c

CONTEXT = {"env": {"os": "linux", "cpus": 4, "tags": ["a", "b"]}, "flag": True, "n": 1}


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        ({"path": "env.os", "op": "eq", "value": "linux"}, True),
        ({"path": "env.os", "op": "ne", "value": "linux"}, False),
        ({"path": "env.os", "op": "in", "value": ["mac", "linux"]}, True),
        ({"path": "env.os", "op": "not_in", "value": ["mac", "linux"]}, False),
        ({"path": "env.os", "op": "exists"}, True),
        ({"path": "env.gpu", "op": "exists"}, False),
        ({"path": "env.gpu", "op": "missing"}, True),
        ({"path": "env.os", "op": "missing"}, False),
        ({"path": "env.os", "op": "matches", "value": "^lin"}, True),
        ({"path": "env.cpus", "op": "matches", "value": "4"}, False),
        ({"path": "env.cpus", "op": "lt", "value": 8}, True),
        ({"path": "env.cpus", "op": "lte", "value": 4}, True),
        ({"path": "env.cpus", "op": "gt", "value": 4}, False),
        ({"path": "env.cpus", "op": "gte", "value": 4.0}, True),
        ({"path": "env.os", "op": "gt", "value": 1}, False),
        ({"path": "env.tags.1", "op": "eq", "value": "b"}, True),
        ({"path": "env.tags.5", "op": "exists"}, False),
        ({"path": "flag", "op": "eq", "value": 1}, False),
        ({"path": "n", "op": "eq", "value": True}, False),
        ({"path": "n", "op": "eq", "value": 1.0}, True),
        ({"path": "env.gpu", "op": "ne", "value": "x"}, False),
        ({"path": "env.gpu", "op": "not_in", "value": ["x"]}, False),
    ],
)
def test_condition_holds(condition, holds):
    c.check_condition("c", condition)
    assert c.condition_holds(condition, CONTEXT)[0] is holds


@pytest.mark.parametrize(
    ("trigger", "task", "matched", "found"),
    [
        ({"keywords": ["invoice", "checksum"]}, "the Invoice total", True, ("invoice",)),
        (
            {"keywords": ["invoice", "checksum"], "min_keywords": 2},
            "the invoice",
            False,
            ("invoice",),
        ),
        ({"keywords": ["invoice"]}, "the invoices", False, ()),
        ({"keywords": ["credit note"]}, "a credit   note here", True, ("credit note",)),
        ({"regex": r"INV-\d+"}, "check inv-12", True, ()),
        ({"regex": r"INV-\d+", "keywords": ["x"]}, "nothing", False, ()),
    ],
)
def test_trigger_match(trigger, task, matched, found):
    c.check_trigger(trigger)
    result = c.trigger_match(trigger, task)
    assert (result.matched, result.keywords_found) == (matched, found)
