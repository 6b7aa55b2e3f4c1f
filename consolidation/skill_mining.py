"""Repeated verified traces → one candidate skill version (DESIGN.md §8).

A trace (skills.SkillTrace) is a procedure the agent performed step by step,
each step a call of one of skills.tools. Two traces are the *same procedure*
when they call the same tools in the same order and every argument comes from
the same place: one of the trace's named inputs, an earlier step's result (or
a field of it), or one constant value. That is the trace's shape (`Shape`),
and its key groups traces across runs.

When enough traces of one shape, with different inputs, were verified
successes, the shape becomes a skill definition (`definition`): the inputs are
its parameters (JSON Schema types from the values seen), the steps its
procedure (generated Python calling the same tools with the same data flow),
the traces' inputs and outputs its examples and hold-out cases, their tasks'
shared words its trigger, their ledger events its provenance. The sandbox
then runs the examples like any other candidate's: a shape that only
coincided with the outputs fails there, and promotion still needs verified
executions of the new version itself.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_EXAMPLES = 5
MAX_HOLDOUT = 20
MAX_KEYWORDS = 8
_WORD = re.compile(r"[^\W\d_][\w'-]{2,}", re.UNICODE)
# Words that say nothing about what a task is for.
_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "that",
        "this",
        "these",
        "those",
        "then",
        "than",
        "its",
        "it's",
        "our",
        "your",
        "their",
        "was",
        "were",
        "are",
        "been",
        "being",
        "has",
        "have",
        "had",
        "not",
        "but",
        "all",
        "any",
        "each",
        "per",
        "via",
        "one",
        "two",
        "please",
        "need",
        "needs",
        "needed",
        "make",
        "made",
        "get",
        "got",
        "using",
        "use",
        "used",
        "task",
        "job",
        "work",
        "step",
        "steps",
        "value",
        "values",
        "given",
        "new",
        "now",
        "today",
        "some",
        "such",
        "what",
        "which",
        "when",
        "where",
        "who",
        "how",
        "why",
    ]
)


class NotReplayable(ValueError):
    """A trace whose output cannot be produced from its inputs and steps."""


@dataclass(frozen=True)
class Shape:
    """Where each argument of each step, and the output, come from."""

    inputs: tuple[str, ...]
    steps: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]  # (tool, ((arg, source), …))
    output: str

    @property
    def key(self) -> str:
        text = json.dumps([self.inputs, self.steps, self.output], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def tools(self) -> list[str]:
        return list(dict.fromkeys(tool for tool, _ in self.steps))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _is_trivial(value: Any) -> bool:
    """Values too common to say where an argument came from."""
    return value is None or isinstance(value, bool) or value in ("", [], {})


def _source(value: Any, inputs: dict, results: list) -> str:
    """Where `value` came from: input:<name>, step:<i>, step:<i>:<key>, or const:<json>.
    An input is preferred to a step, the latest step to an earlier one."""
    if not _is_trivial(value):
        for name in sorted(inputs):
            if inputs[name] == value and type(inputs[name]) is type(value):
                return f"input:{json.dumps(name)}"
        for i in range(len(results) - 1, -1, -1):
            result = results[i]
            if result == value and type(result) is type(value):
                return f"step:{i}"
            if isinstance(result, dict):
                for key in sorted(result):
                    if result[key] == value and type(result[key]) is type(value):
                        return f"step:{i}:{json.dumps(key)}"
    return f"const:{_canonical(value)}"


def shape_of(inputs: dict, steps: Sequence[dict], output: Any) -> Shape:
    results: list = []
    shaped = []
    for step in steps:
        args = step.get("args") or {}
        shaped.append(
            (
                step["tool"],
                tuple((name, _source(args[name], inputs, results)) for name in sorted(args)),
            )
        )
        results.append(step.get("result"))
    out = _source(output, inputs, results)
    if out.startswith("const:") and not _is_trivial(output) and (inputs or steps):
        # The output is none of the data the procedure had: nothing to replay.
        raise NotReplayable("the output is neither an input nor any step's result")
    return Shape(tuple(sorted(inputs)), tuple(shaped), out)


def _expression(source: str) -> str:
    kind, _, rest = source.partition(":")
    if kind == "input":
        return f"params[{rest}]"
    if kind == "step":
        index, _, key = rest.partition(":")
        return f"r{index}[{key}]" if key else f"r{index}"
    return repr(json.loads(rest))


def procedure(shape: Shape) -> str:
    """Python source of run(params, tools) doing what the traces did."""
    lines = [
        "def run(params, tools):",
        f'    """Learned from verified traces: {" → ".join(t for t, _ in shape.steps)}."""',
    ]
    for i, (tool, args) in enumerate(shape.steps):
        body = ", ".join(f"{json.dumps(name)}: {_expression(src)}" for name, src in args)
        lines.append(f"    r{i} = tools.call({json.dumps(tool)}, {{{body}}})")
    lines.append(f"    return {_expression(shape.output)}")
    return "\n".join(lines) + "\n"


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


def _json_type(value: Any) -> str:
    for python_type, name in _JSON_TYPES:
        if isinstance(value, python_type):
            return name
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "null"


def parameter_schema(shape: Shape, inputs: Sequence[dict]) -> dict:
    properties = {}
    for name in shape.inputs:
        seen = {_json_type(i.get(name)) for i in inputs}
        if seen == {"integer", "number"}:
            seen = {"number"}
        properties[name] = {"type": sorted(seen)[0] if len(seen) == 1 else sorted(seen)}
    return {
        "type": "object",
        "properties": properties,
        "required": list(shape.inputs),
        "additionalProperties": False,
    }


def _result_type_check(outputs: Sequence[Any]) -> str:
    kinds = sorted({_json_type(o) for o in outputs})
    return repr(kinds)


def validator(outputs: Sequence[Any]) -> str:
    """A validator that refuses a result of another JSON type than the traces' outputs
    (a None where text was produced is a failure, not a success)."""
    return (
        "def validate(params, result, tools):\n"
        "    kinds = {bool: 'boolean', int: 'integer', float: 'number', str: 'string',\n"
        "             dict: 'object', list: 'array', type(None): 'null'}\n"
        "    kind = kinds.get(type(result), 'other')\n"
        f"    expected = {_result_type_check(outputs)}\n"
        "    if kind == 'integer' and 'number' in expected:\n"
        "        kind = 'number'\n"
        "    return {'passed': kind in expected, 'detail': 'result is ' + kind}\n"
    )


def keywords(tasks: Sequence[str]) -> list[str]:
    """Words in at least half of the tasks (none of the stop words), commonest first."""
    counts: Counter[str] = Counter()
    for task in tasks:
        counts.update({w.lower() for w in _WORD.findall(task)} - _STOPWORDS)
    enough = max(1, (len(tasks) + 1) // 2)
    common = [w for w, n in counts.most_common() if n >= enough]
    return sorted(common[:MAX_KEYWORDS], key=lambda w: (-counts[w], w))


@dataclass(frozen=True)
class TraceSeen:
    """What mining needs of one trace."""

    event_id: str
    task: str
    inputs: dict
    output: Any


def distinct_inputs(traces: Sequence[TraceSeen]) -> list[TraceSeen]:
    """One trace per distinct inputs (the first): the same run repeated is one piece
    of evidence, not many."""
    seen: dict[str, TraceSeen] = {}
    for trace in traces:
        seen.setdefault(_canonical(trace.inputs), trace)
    return list(seen.values())


def definition(shape: Shape, traces: Sequence[TraceSeen]) -> dict:
    """The candidate version's fields (skills.services.definitions.VersionInput)."""
    distinct = distinct_inputs(traces)
    cases = [{"params": t.inputs, "expected": t.output} for t in distinct]
    words = keywords([t.task for t in distinct]) or shape.tools
    task = Counter(t.task for t in distinct).most_common(1)[0][0]
    return {
        "purpose": f"Learned from {len(distinct)} verified traces: {task}"[:2000],
        "trigger": {"keywords": words, "min_keywords": min(2, len(words))},
        "parameter_schema": parameter_schema(shape, [t.inputs for t in distinct]),
        "procedure": procedure(shape),
        "validator": validator([t.output for t in distinct]),
        "required_tools": shape.tools,
        "examples": cases[:MAX_EXAMPLES],
        "holdout": cases[MAX_EXAMPLES : MAX_EXAMPLES + MAX_HOLDOUT],
    }
