"""A stand-in for skills.sandbox in tests of *rules* (lifecycle, promotion,
counting), where what matters is the outcome a run reports, not containment.

It runs the code in this process with the same contract as
skills.sandbox.run_skill. Tests of running for real use the real sandbox
(test_runs.py, test_tasks.py); the sandbox's own tests prove containment.
"""

from __future__ import annotations

import time
import types
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class FakeResult:
    outcome: str
    result: Any = None
    validation: dict | None = None
    error: str = ""
    stdout: str = ""
    stderr: str = ""
    duration_ms: int = 1
    tool_calls: list = field(default_factory=list)


@dataclass(frozen=True)
class FakeLimits:
    cpu_seconds: float = 5.0


class _Tools:
    """The sandbox's tool object: tools.<name>(args) or tools.call(name, args)."""

    def __init__(self, functions):
        self._functions = functions
        for name, fn in functions.items():
            setattr(self, name, fn)

    def call(self, name, args=None):
        return self._functions[name](args or {})


def run_in_process(*, procedure, params, entry="run", validator=None, tools=None, limits=None):
    started = time.monotonic()
    calls = []

    def traced(name, fn):
        def call(args):
            calls.append({"tool": name, "args": args})
            return fn(args)

        return call

    offered = _Tools({name: traced(name, fn) for name, fn in (tools or {}).items()})
    try:
        scope: dict = {}
        exec(compile(procedure, "<procedure>", "exec"), scope)
        result = scope[entry](params, offered)
    except Exception as exc:
        return FakeResult("error", error=f"{type(exc).__name__}: {exc}", tool_calls=calls)
    verdict = None
    if validator:
        try:
            scope = {}
            exec(compile(validator, "<validator>", "exec"), scope)
            passed = scope["validate"](params, result, offered)
            verdict = {"passed": bool(passed), "detail": None, "error": ""}
        except Exception as exc:
            verdict = {"passed": False, "detail": None, "error": f"{type(exc).__name__}: {exc}"}
    duration = int((time.monotonic() - started) * 1000)
    return FakeResult(
        "ok",
        result=result,
        validation=verdict,
        duration_ms=duration,
        tool_calls=calls,
    )


@pytest.fixture
def in_process_sandbox(monkeypatch):
    """Route skills.services.runs through run_in_process."""
    from skills.services import runs

    fake = types.SimpleNamespace(run_skill=run_in_process, Limits=FakeLimits)
    monkeypatch.setattr(runs, "_sandbox", lambda: fake)
    return fake
