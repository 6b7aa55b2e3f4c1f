"""Traces: procedures the agent performed without a skill, recorded step by step.

A trace is what the agent did (each step a call of one of skills.tools, with
its arguments and result), what it started from (inputs), what came out
(output), whether it worked and whether something outside the agent's own
say-so checked that (verified, with its evidence). It is evidence, final once
written: consolidation mines verified successful traces into candidate skills
(consolidation.skill_mining), which still earn their way up through the
sandbox and the promotion rules.

Text that tries to act as an instruction anywhere in a trace (task, inputs,
arguments, results, output) flags it `instruction_like` at write time; it is
kept, and never mined.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ledger.services import event_append, json_storage_error
from piper import safety
from piper.errors import InvalidInput, Unprocessable
from piper.provenance import PrivacyClass, RetentionClass, SourceType
from piper.tenancy.models import Agent

from .. import tools
from ..events import TRACE_RECORDED
from ..models import SkillTrace

MAX_TASK = 4000
MAX_STEPS = 50
MAX_INPUTS = 50
MAX_NAME = 100
STEP_KEYS = frozenset({"tool", "args", "result"})


@dataclass(frozen=True)
class TraceInput:
    task: str
    inputs: dict
    steps: list
    succeeded: bool
    output: Any = None
    verified: bool = False
    verification: dict | None = None
    source_type: str = SourceType.AGENT_INFERENCE
    session_id: str = ""
    task_id: str = ""
    privacy_class: str = PrivacyClass.INTERNAL
    retention_class: str = RetentionClass.STANDARD


def _invalid(name: str, message: str) -> InvalidInput:
    return InvalidInput(f"{name}: {message}", details={name: [message]})


def _check(data: TraceInput) -> list[dict]:
    """Every refusal before anything is written; returns the steps, normalised."""
    if not isinstance(data.task, str) or not data.task.strip() or len(data.task) > MAX_TASK:
        raise _invalid("task", f"required: what the agent was doing, 1-{MAX_TASK} characters")
    if not isinstance(data.inputs, dict) or len(data.inputs) > MAX_INPUTS:
        raise _invalid("inputs", f"an object of at most {MAX_INPUTS} named values")
    for name in data.inputs:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise _invalid("inputs", f"names of 1-{MAX_NAME} characters")
    if not isinstance(data.steps, list) or not 0 < len(data.steps) <= MAX_STEPS:
        raise _invalid("steps", f"a list of 1-{MAX_STEPS} steps {{tool, args, result}}")
    steps = []
    for i, step in enumerate(data.steps):
        where = f"steps[{i}]"
        if not isinstance(step, dict) or "tool" not in step or set(step) - STEP_KEYS:
            raise _invalid(where, "an object {tool, args, result?}")
        if not isinstance(step["tool"], str) or step["tool"] not in tools.TOOLS:
            raise Unprocessable(
                f"{where}.tool: no tool named {step['tool']!r}; known: "
                f"{', '.join(sorted(tools.TOOLS))}",
                code="unknown_tool",
                details={where: {"tool": step["tool"]}},
            )
        args = step.get("args", {})
        if not isinstance(args, dict):
            raise _invalid(f"{where}.args", "an object of the tool's arguments")
        steps.append({"tool": step["tool"], "args": args, "result": step.get("result")})
    if data.verified and not (isinstance(data.verification, dict) and data.verification):
        raise _invalid(
            "verification",
            "a verified trace needs {by, evidence}: what checked the outcome and what it saw",
        )
    if data.verification is not None and not isinstance(data.verification, dict):
        raise _invalid("verification", "an object {by, evidence}")
    for name, choices in (
        ("source_type", SourceType.values),
        ("privacy_class", PrivacyClass.values),
        ("retention_class", RetentionClass.values),
    ):
        if getattr(data, name) not in choices:
            raise _invalid(name, f"one of {choices}")
    for name, limit in (("session_id", 200), ("task_id", 200)):
        value = getattr(data, name)
        if not isinstance(value, str) or len(value) > limit:
            raise _invalid(name, f"text of at most {limit} characters")
    for name, value in (
        ("task", data.task),
        ("inputs", data.inputs),
        ("steps", steps),
        ("output", data.output),
        ("verification", data.verification),
    ):
        if problem := json_storage_error(value, path=name, depth=1):
            raise _invalid(name, problem)
    return steps


def screen(task: str, inputs: dict, steps: list[dict], output: Any) -> safety.Verdict:
    """The detector's verdict on every text of a trace, the strongest deciding."""
    verdicts = [safety.screen(task), safety.screen_value(inputs), safety.screen_value(output)]
    for step in steps:
        verdicts += [safety.screen_value(step["args"]), safety.screen_value(step["result"])]
    best = max(verdicts, key=lambda v: v.score)
    signals = tuple(sorted({s for v in verdicts for s in v.signals}))
    return safety.Verdict(best.instruction_like, best.score, signals)


def trace_record(*, agent: Agent, data: TraceInput, actor: str = "") -> SkillTrace:
    """Record one trace and its ledger event. InvalidInput / Unprocessable
    (unknown_tool) before anything is written."""
    steps = _check(data)
    verdict = screen(data.task, data.inputs, steps, data.output)
    with transaction.atomic():
        trace = SkillTrace(
            agent=agent,
            task=data.task.strip(),
            inputs=data.inputs,
            steps=steps,
            output=data.output,
            succeeded=data.succeeded,
            verified=data.verified,
            verification=data.verification,
            source_type=data.source_type,
            instruction_like=verdict.instruction_like,
            session_id=data.session_id,
            task_id=data.task_id,
        )
        trace.source_event = event_append(
            agent=agent,
            event_type=TRACE_RECORDED,
            payload={
                "trace_id": str(trace.pk),
                "task": trace.task,
                "inputs": trace.inputs,
                "steps": steps,
                "output": trace.output,
                "succeeded": trace.succeeded,
                "verified": trace.verified,
                "verification": trace.verification,
                "task_id": trace.task_id,
                "screen": verdict.as_dict()
                if verdict.signals or verdict.instruction_like
                else None,
            },
            actor=actor,
            session_id=data.session_id,
            source_type=data.source_type,
            privacy_class=data.privacy_class,
            retention_class=data.retention_class,
        )
        trace.created_at = trace.source_event.recorded_at
        trace.save(force_insert=True)
    return trace
