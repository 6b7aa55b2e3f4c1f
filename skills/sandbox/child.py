"""The bootstrap that runs inside the sandbox, before and around the skill's code.

It is passed to ``python -I -S -B -c`` as source (nothing from the project is
mounted in the sandbox), so it may import only the standard library and must
stay lean: its imports are the sandbox's start-up cost.

argv: read fd, write fd, RLIMIT_CPU soft, RLIMIT_AS bytes, RLIMIT_NPROC,
RLIMIT_FSIZE bytes, result byte cap. The limits are set before the channel is
read, so no skill code ever runs without them.

Channel (JSON lines): the host sends one job, then one reply per tool call; the
child sends ``hello``, ``call``, ``note``, ``result``, ``validation`` and
``done``. Only the first process writes ``result``/``validation``/``done``;
forked processes may send a ``note`` and nothing else.
"""

import _signal
import json
import os
import resource
import sys

READ_FD, WRITE_FD, CPU, MEMORY, NPROC, FSIZE, RESULT_CAP = map(int, sys.argv[1:8])
resource.setrlimit(resource.RLIMIT_CPU, (CPU, CPU + 1))
resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))
resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE, FSIZE))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

MAIN_PID = os.getpid()
_noted = set()
_channel_in = os.fdopen(READ_FD, "rb")


def _send(message):
    _write(json.dumps(message, allow_nan=False).encode() + b"\n")


def _write(data):
    view = memoryview(data)
    while view:
        view = view[os.write(WRITE_FD, view) :]


def _note(event):
    # Once per process: a fork bomb must not flood the channel.
    if event not in _noted:
        _noted.add(event)
        try:  # noqa: SIM105 - contextlib is an import the bootstrap does without
            _send({"op": "note", "event": event})
        except OSError:
            pass


_real_fork = os.fork


def _fork():
    try:
        return _real_fork()
    except BlockingIOError:
        _note("process_limit")
        raise


os.fork = _fork
os.register_at_fork(after_in_child=_noted.clear)


def _on_cpu_limit(signum, frame):
    # The skill runs as pid 1 of its namespace, where a signal left at its default
    # action is ignored: without this handler only the hard limit's SIGKILL, a
    # second later, would stop it. Code looping in C gets that SIGKILL.
    if os.getpid() == MAIN_PID:
        _flush()
        _send({"op": "done", "outcome": "cpu_limit", "error": ""})
    os._exit(128 + signum)


_signal.signal(_signal.SIGXCPU, _on_cpu_limit)


class ToolError(Exception):
    """A declared tool failed on the host, or a tool call was refused."""


class Tools:
    """The declared tools, as attributes, and ``call(name, args)``."""

    def __init__(self, names):
        object.__setattr__(self, "_names", tuple(names))
        for name in names:
            if name.isidentifier() and not hasattr(Tools, name):
                object.__setattr__(self, name, self._bound(name))

    def _bound(self, name):
        def tool(args=None, **kwargs):
            return self.call(name, args if args is not None else kwargs)

        tool.__name__ = name
        return tool

    def __setattr__(self, name, value):
        raise AttributeError("tools are read-only")

    def __getattr__(self, name):
        raise AttributeError(f"no tool named {name!r} is declared (declared: {list(self._names)})")

    def __dir__(self):
        return list(self._names)

    def call(self, name, args=None):
        if name not in self._names:
            raise ToolError(f"tool {name!r} is not declared (declared: {list(self._names)})")
        if os.getpid() != MAIN_PID:
            raise ToolError("tools can only be called from the skill's main process")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise ToolError(f"tool arguments must be a dict, not {type(args).__name__}")
        try:
            _send({"op": "call", "tool": name, "args": args})
        except (TypeError, ValueError) as exc:
            raise ToolError(f"tool arguments are not JSON-serialisable: {exc}") from None
        line = _channel_in.readline()
        if not line:
            raise ToolError("the host closed the tool channel")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ToolError(reply.get("error") or "tool failed")
        return reply.get("result")


def _release(exc):
    """Drop the locals of the skill's finished frames (after a MemoryError they hold the memory)."""
    tb = exc.__traceback__
    while tb is not None:
        try:  # noqa: SIM105
            tb.tb_frame.clear()
        except RuntimeError:  # a frame still executing: the bootstrap's own
            pass
        tb = tb.tb_next


def _format(exc, skip_frames=1):
    import linecache
    import traceback

    # Imported only now (tokenize comes with them): so tracebacks show the skill's lines.
    for filename, source in _sources.items():
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)

    tb = exc.__traceback__
    for _ in range(skip_frames):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _limit_hit(exc):
    """The outcome an exception stands for when it is a limit, else None."""
    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, MemoryError):
            return "memory_limit"
        if isinstance(exc, BlockingIOError) or (
            isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)
        ):
            return "process_limit"
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


_sources = {}


def _load(source, filename, name):
    _sources[filename] = source
    namespace = {"__name__": "skill", "__builtins__": __builtins__, "ToolError": ToolError}
    exec(compile(source, filename, "exec"), namespace)
    function = namespace.get(name)
    if not callable(function):
        raise NameError(f"{filename} defines no function {name!r}")
    return function


def _verdict(value):
    if isinstance(value, dict) and "passed" in value:
        detail = value.get("detail")
        try:
            json.dumps(detail, allow_nan=False)
        except (TypeError, ValueError):
            detail = repr(detail)[:2000]
        return {"passed": bool(value["passed"]), "detail": detail, "error": None}
    return {"passed": bool(value), "detail": None, "error": None}


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105
            stream.flush()
        except Exception:
            pass


def main():
    _send({"op": "hello"})
    job = json.loads(_channel_in.readline())
    tools = Tools(job["tools"])
    params = job["params"]

    outcome = None
    error = ""
    try:
        run = _load(job["procedure"], "<procedure>", job["entry"])
        result = run(params, tools)
    except BaseException as exc:  # noqa: BLE001 - everything the skill raises is reported
        if os.getpid() != MAIN_PID:
            raise
        outcome = _limit_hit(exc) or "error"
        if outcome == "memory_limit":
            _release(exc)
        try:
            error = _format(exc)
        except MemoryError:
            error = "MemoryError\n"
        del exc
    if os.getpid() != MAIN_PID:
        _flush()
        os._exit(0)
    if outcome is not None:
        _flush()
        _send({"op": "done", "outcome": outcome, "error": error})
        return

    try:
        encoded = json.dumps({"op": "result", "result": result}, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        _flush()
        message = f"the procedure's return value is not JSON-serialisable: {exc}\n"
        _send({"op": "done", "outcome": "invalid_result", "error": message})
        return
    if len(encoded) > RESULT_CAP:
        _flush()
        message = f"the procedure's result is {len(encoded)} bytes of JSON, over the {RESULT_CAP}-byte limit\n"
        _send({"op": "done", "outcome": "invalid_result", "error": message})
        return
    _write(encoded + b"\n")

    if job.get("validator") is not None:
        try:
            validate = _load(job["validator"], "<validator>", "validate")
            verdict = _verdict(validate(params, result, tools))
        except BaseException as exc:  # noqa: BLE001 - a raising validator is a failed validation
            if os.getpid() != MAIN_PID:
                raise
            try:
                verdict = {"passed": False, "detail": None, "error": _format(exc)[-4000:]}
            except MemoryError:
                verdict = {"passed": False, "detail": None, "error": "MemoryError"}
            del exc
        if os.getpid() != MAIN_PID:
            _flush()
            os._exit(0)
        _send({"op": "validation", "validation": verdict})
    _flush()
    _send({"op": "done", "outcome": "ok", "error": ""})


main()
