"""The host side: start one sandbox per call, serve its tool calls, enforce the limits, name the outcome."""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from skills.sandbox.runtime import SandboxUnavailable, command

BOOTSTRAP = (Path(__file__).with_name("child.py")).read_text()
ERROR_CHARS = 8_000  # tracebacks keep their tail: that is where the error is
OUTCOMES = (
    "ok",
    "error",
    "invalid_result",
    "timeout",
    "cpu_limit",
    "memory_limit",
    "output_limit",
    "process_limit",
    "crashed",
)


@dataclass(frozen=True)
class Limits:
    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_mb: int = 256
    processes: int = 16
    file_size_mb: int = 8
    output_bytes: int = 256_000  # cap on stdout+stderr and on the JSON result


@dataclass(frozen=True)
class SandboxResult:
    outcome: str
    result: object
    validation: dict | None
    error: str
    stdout: str
    stderr: str
    duration_ms: float
    tool_calls: list = field(default_factory=list)


def _truncate(text: str, limit: int = ERROR_CHARS) -> str:
    return text if len(text) <= limit else "…(truncated)\n" + text[-limit:]


class _Session:
    """One sandbox's pipes and bookkeeping while it runs."""

    def __init__(self, tools: Mapping[str, Callable[[dict], object]], limits: Limits):
        self.tools = tools
        self.limits = limits
        self.out = bytearray()
        self.err = bytearray()
        self.channel = bytearray()
        self.pending = bytearray()  # host → child, written as the pipe accepts
        self.hello = False
        self.done: dict | None = None
        self.result: object = None
        self.has_result = False
        self.validation: dict | None = None
        self.notes: set[str] = set()
        self.tool_calls: list[dict] = []
        self.killed_for: str | None = None
        self.info = bytearray()
        self.child_pid: int | None = None  # the skill's process, as the host sees it

    def read_info(self) -> None:
        try:
            pid = json.loads(self.info.decode())["child-pid"]
        except (ValueError, KeyError, TypeError):
            return
        self.child_pid = pid if isinstance(pid, int) and pid > 1 else None

    def output_room(self) -> int:
        return self.limits.output_bytes - len(self.out) - len(self.err)

    def handle(self, message: dict) -> None:
        op = message.get("op")
        if op == "hello":
            self.hello = True
        elif op == "call":
            self.call(message)
        elif op == "note":
            self.notes.add(str(message.get("event")))
        elif op == "result" and not self.has_result and self.done is None:
            self.result, self.has_result = message.get("result"), True
        elif op == "validation" and self.validation is None and self.done is None:
            self.validation = message.get("validation")
        elif op == "done" and self.done is None:
            self.done = message

    def call(self, message: dict) -> None:
        name, args = message.get("tool"), message.get("args")
        ok = False
        if not isinstance(name, str) or name not in self.tools or not isinstance(args, dict):
            # The child refuses undeclared tools itself; this is for a child that forges
            # a call on the channel. Recorded, never called.
            reply = json.dumps({"ok": False, "error": f"tool {name!r} is not declared"})
        else:
            try:
                value = self.tools[name](args)
                reply = json.dumps({"ok": True, "result": value}, allow_nan=False)
                ok = True
            except Exception as exc:  # noqa: BLE001 - a tool's failure is the skill's ToolError
                reply = json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})
        self.tool_calls.append({"tool": name, "args": args, "ok": ok})
        self.pending += reply.encode() + b"\n"


def _spawn(argv: list[str], pass_fds: tuple[int, ...]) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=pass_fds,
        close_fds=True,
        start_new_session=True,  # the host kills the whole group
    )


def run_skill(
    *,
    procedure: str,
    params: dict,
    entry: str = "run",
    validator: str | None = None,
    tools: Mapping[str, Callable[[dict], object]] | None = None,
    limits: Limits = Limits(),  # noqa: B008 - frozen, so a shared default is safe
) -> SandboxResult:
    """Run ``entry(params, tools)`` from ``procedure`` in a fresh sandbox, then ``validate``.

    Never raises for anything the skill does: every way the code can fail or
    misbehave comes back as an outcome. Raises ``SandboxUnavailable`` when no
    sandbox can be made (bubblewrap missing or refused), and ``TypeError`` /
    ``ValueError`` when ``params`` is not JSON.
    """
    tools = dict(tools or {})
    job = json.dumps(
        {
            "procedure": procedure,
            "entry": entry,
            "validator": validator,
            "params": params,
            "tools": sorted(tools),
        },
        allow_nan=False,
    ).encode()
    started = time.monotonic()
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    info_r, info_w = os.pipe()
    limits_argv = [
        str(max(1, math.ceil(limits.cpu_seconds))),
        str(limits.memory_mb * 1024 * 1024),
        str(limits.processes),
        str(limits.file_size_mb * 1024 * 1024),
        str(limits.output_bytes),
    ]
    try:
        argv = command(
            read_fd=to_child_r,
            write_fd=from_child_w,
            info_fd=info_w,
            limits_argv=limits_argv,
            tmpfs_bytes=max(16, 4 * limits.file_size_mb) * 1024 * 1024,
            bootstrap=BOOTSTRAP,
        )
        proc = _spawn(argv, (to_child_r, from_child_w, info_w))
    except BaseException:
        for fd in (to_child_r, to_child_w, from_child_r, from_child_w, info_r, info_w):
            os.close(fd)
        raise
    for fd in (to_child_r, from_child_w, info_w):
        os.close(fd)
    session = _Session(tools, limits)
    session.pending += job + b"\n"
    try:
        _serve(proc, session, to_child_w, from_child_r, info_r, started)
    except BaseException:
        session.killed_for = session.killed_for or "host"
        raise
    finally:
        for fd in (to_child_w, from_child_r, info_r):
            os.close(fd)
        status, cpu = _stop(proc, session)
    duration_ms = (time.monotonic() - started) * 1000

    stderr_text = session.err.decode("utf-8", "replace")
    if (
        not session.hello
        and session.killed_for is None
        and stderr_text.startswith(("bwrap:", "setpriv:"))
    ):
        raise SandboxUnavailable(
            f"bubblewrap could not start the sandbox (exit status {status}): {stderr_text.strip()[:2000]}"
        )
    outcome, error = _outcome(session, status, cpu)
    validation = session.validation
    if validator is not None and session.has_result and validation is None:
        validation = {
            "passed": False,
            "detail": None,
            "error": f"the validator did not finish: {outcome}",
        }
    return SandboxResult(
        outcome=outcome,
        result=session.result if session.has_result else None,
        validation=validation,
        error=_truncate(error),
        stdout=session.out.decode("utf-8", "replace"),
        stderr=stderr_text,
        duration_ms=round(duration_ms, 3),
        tool_calls=session.tool_calls,
    )


def _serve(
    proc: subprocess.Popen,
    session: _Session,
    to_child: int,
    from_child: int,
    info: int,
    started: float,
) -> None:
    limits = session.limits
    deadline = started + limits.wall_seconds
    channel_cap = limits.output_bytes + 64 * 1024  # one line: a result or a tool call
    os.set_blocking(to_child, False)
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout.fileno(), selectors.EVENT_READ, "out")
    selector.register(proc.stderr.fileno(), selectors.EVENT_READ, "err")
    selector.register(from_child, selectors.EVENT_READ, "channel")
    selector.register(info, selectors.EVENT_READ, "info")
    writing = False
    open_streams = 4
    try:
        while open_streams:
            if session.pending and not writing:
                selector.register(to_child, selectors.EVENT_WRITE, "write")
                writing = True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                session.killed_for = "timeout"
                return
            for key, _ in selector.select(remaining):
                if key.data == "write":
                    try:
                        written = os.write(to_child, session.pending)
                    except BlockingIOError:
                        continue
                    except OSError:  # the child closed its end: it is gone or exiting
                        written = len(session.pending)
                    del session.pending[:written]
                    if not session.pending:
                        selector.unregister(to_child)
                        writing = False
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    open_streams -= 1
                    if key.data == "info":
                        session.read_info()
                    continue
                if key.data == "info":
                    session.info += chunk
                    continue
                if key.data == "channel":
                    session.channel += chunk
                    while (end := session.channel.find(b"\n")) >= 0:
                        line = bytes(session.channel[:end])
                        del session.channel[: end + 1]
                        try:
                            message = json.loads(line)
                        except ValueError:
                            continue  # the skill wrote to the channel fd itself
                        if isinstance(message, dict):
                            session.handle(message)
                    if len(session.channel) > channel_cap:
                        session.killed_for = "output_limit"
                        return
                    continue
                room = session.output_room()
                target = session.out if key.data == "out" else session.err
                target += chunk[: max(room, 0)]
                if len(chunk) > room:
                    session.killed_for = "output_limit"
                    return
    finally:
        selector.close()


def _wait(proc: subprocess.Popen, timeout: float) -> tuple[int, float] | None:
    """Reap bubblewrap within ``timeout``: (exit status, CPU seconds of the sandbox), or None.

    os.wait4 rather than Popen.wait: its resource usage includes the skill's
    process, which bubblewrap reaped, and tells a CPU-limit SIGKILL apart.
    """
    deadline = time.monotonic() + timeout
    pause = 0.0005
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(pause * 2, 0.01)


def _stop(proc: subprocess.Popen, session: _Session) -> tuple[int, float]:
    """Make sure the sandbox is gone and reaped; (exit status, CPU seconds).

    The skill's process is the first of its pid namespace: killing it kills
    every process in the sandbox, and bubblewrap, which waits for it, reaps it
    and exits. Killing bubblewrap first would leave the skill's process a
    zombie of the host's init. Bubblewrap's process group is the fallback.
    """
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    if session.killed_for is None and (reaped := _wait(proc, 2.0)) is not None:
        return reaped
    # Not reaped yet, so bubblewrap has not reaped child_pid either: the pid is still the skill's.
    if session.child_pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(session.child_pid, signal.SIGKILL)
        if (reaped := _wait(proc, 2.0)) is not None:
            return reaped
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    reaped = _wait(proc, 10.0)
    return reaped if reaped is not None else (-signal.SIGKILL, 0.0)


def _outcome(session: _Session, status: int, cpu: float) -> tuple[str, str]:
    limits = session.limits
    if session.killed_for == "output_limit":
        return (
            "output_limit",
            f"output over the limit of {limits.output_bytes} bytes; the sandbox was stopped",
        )
    done = session.done
    if done is not None and done.get("outcome") in OUTCOMES:
        outcome, error = done["outcome"], str(done.get("error") or "")
        if outcome == "cpu_limit":
            error = f"CPU time limit of {limits.cpu_seconds} s reached"
        elif outcome == "memory_limit":
            error = f"memory limit of {limits.memory_mb} MB reached\n{error}"
        elif outcome == "process_limit":
            error = f"process limit of {limits.processes} reached\n{error}"
        return outcome, error
    if "process_limit" in session.notes:
        how = (
            "stopped at the wall-clock limit"
            if session.killed_for == "timeout"
            else f"exit status {status}"
        )
        return "process_limit", f"process limit of {limits.processes} reached ({how})"
    if session.killed_for == "timeout":
        return (
            "timeout",
            f"wall-clock limit of {limits.wall_seconds} s reached; the sandbox was killed",
        )
    # bubblewrap exits with 128 + the signal when the skill's process is killed.
    signum = status - 128 if status > 128 else (-status if status < 0 else 0)
    if signum == signal.SIGXCPU or (
        signum == signal.SIGKILL and cpu >= math.ceil(limits.cpu_seconds)
    ):
        return "cpu_limit", f"CPU time limit of {limits.cpu_seconds} s reached ({cpu:.2f} s used)"
    stderr_tail = session.err[-2000:].decode("utf-8", "replace")
    if "MemoryError" in stderr_tail or "Cannot allocate memory" in stderr_tail:
        return (
            "memory_limit",
            f"memory limit of {limits.memory_mb} MB reached (exit status {status})",
        )
    if signum:
        name = signal.Signals(signum).name if signum in signal.valid_signals() else str(signum)
        return "crashed", f"the skill's process was killed by {name}"
    return "crashed", f"the sandbox exited (status {status}) before the skill finished"
