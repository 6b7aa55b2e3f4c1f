"""The sandbox that runs skill code: behaviour, tools, and containment, with real processes.

Every test starts real bubblewrap sandboxes; nothing is mocked. The service's
database and Redis are not needed (and must not be reachable from inside).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

from skills.sandbox import Limits, SandboxResult, SandboxUnavailable, run_skill, runtime
from skills.sandbox.runtime import SANDBOX_UID

ROOT = Path(__file__).resolve().parents[2]
FAST = Limits(cpu_seconds=1, wall_seconds=4)


def code(source: str) -> str:
    return textwrap.dedent(source).lstrip()


def run(source: str, params: dict | None = None, **kwargs) -> SandboxResult:
    return run_skill(procedure=code(source), params=params or {}, **kwargs)


def sandbox_processes() -> set[str]:
    """Sandbox-uid processes that are this test process's children or orphans (zombies included).

    Other sandboxes running on the machine at the same time (other test runs)
    are neither, unless they leak too.
    """
    out = subprocess.run(
        ["ps", "-o", "pid=,ppid=,stat=,args=", "-u", str(SANDBOX_UID)],
        capture_output=True,
        text=True,
    )
    rows = (line.split(None, 3) for line in out.stdout.splitlines() if line.strip())
    return {" ".join(row) for row in rows if int(row[1]) in (1, os.getpid())}


@pytest.fixture(autouse=True)
def still_works_afterwards():
    """Whatever a test did to its sandbox, nothing of it is left, and the next run is normal."""
    before = sandbox_processes()
    yield
    assert sandbox_processes() - before == set()
    after = run("def run(params, tools):\n    return params['n'] + 1\n", {"n": 41})
    assert (after.outcome, after.result, after.error) == ("ok", 42, "")


# --- running code -------------------------------------------------------------------------


def test_returns_the_entry_points_result_with_output_and_validation():
    result = run(
        """
        import json

        def run(params, tools):
            print("working on", params["word"])
            return {"upper": params["word"].upper(), "n": len(params["word"])}
        """,
        {"word": "piper"},
        validator=code(
            """
            def validate(params, result, tools):
                return result["upper"] == params["word"].upper()
            """
        ),
    )
    assert result.outcome == "ok"
    assert result.result == {"upper": "PIPER", "n": 5}
    assert result.validation == {"passed": True, "detail": None, "error": None}
    assert (result.error, result.stdout, result.stderr, result.tool_calls) == (
        "",
        "working on piper\n",
        "",
        [],
    )
    assert 0 < result.duration_ms < 5000


def test_other_entry_point_and_no_validator():
    result = run("def apply(params, tools):\n    return [1, 'a', None]\n", entry="apply")
    assert (result.outcome, result.result, result.validation) == ("ok", [1, "a", None], None)


def test_validator_verdicts_falsy_dict_and_raising():
    procedure = "def run(params, tools):\n    return 7\n"
    falsy = run(procedure, validator="def validate(params, result, tools):\n    return 0\n")
    assert (falsy.outcome, falsy.result) == ("ok", 7)
    assert falsy.validation == {"passed": False, "detail": None, "error": None}

    detailed = run(
        procedure,
        validator="def validate(p, r, t):\n    return {'passed': r == 7, 'detail': {'got': r}}\n",
    )
    assert detailed.validation == {"passed": True, "detail": {"got": 7}, "error": None}

    raising = run(procedure, validator="def validate(p, r, t):\n    assert r == 8, 'want 8'\n")
    assert raising.outcome == "ok"
    assert raising.validation["passed"] is False
    assert raising.validation["detail"] is None
    assert 'File "<validator>", line 2, in validate' in raising.validation["error"]
    assert raising.validation["error"].endswith("AssertionError: want 8\n")


def test_validator_does_not_run_when_the_procedure_raises():
    result = run(
        "def run(params, tools):\n    raise ValueError('bad input')\n",
        validator="def validate(p, r, t):\n    return True\n",
    )
    assert (result.outcome, result.result, result.validation) == ("error", None, None)


def test_exception_is_an_error_with_the_traceback_line():
    result = run(
        """
        def helper(x):
            return x["missing"]

        def run(params, tools):
            return helper(params)
        """
    )
    assert result.outcome == "error"
    assert result.result is None
    assert result.error == (
        "Traceback (most recent call last):\n"
        '  File "<procedure>", line 5, in run\n'
        "    return helper(params)\n"
        "           ^^^^^^^^^^^^^^\n"
        '  File "<procedure>", line 2, in helper\n'
        '    return x["missing"]\n'
        "           ~^^^^^^^^^^^\n"
        "KeyError: 'missing'\n"
    )


def test_syntax_error_names_the_line():
    result = run("def run(params, tools):\n    return (1 +\n\nx = 2\n")
    assert result.outcome == "error"
    assert 'File "<procedure>", line 2' in result.error
    assert "SyntaxError: '(' was never closed" in result.error


def test_missing_entry_point_and_sys_exit_are_errors():
    missing = run("def other(params, tools):\n    return 1\n")
    assert missing.outcome == "error"
    assert "NameError: <procedure> defines no function 'run'" in missing.error

    exiting = run("import sys\n\ndef run(params, tools):\n    sys.exit(0)\n")
    assert exiting.outcome == "error"
    assert "SystemExit: 0" in exiting.error


def test_results_that_are_not_json_are_invalid():
    not_json = run(
        "def run(params, tools):\n    return {1, 2}\n",
        validator="def validate(p, r, t):\n    return True\n",
    )
    assert (not_json.outcome, not_json.result, not_json.validation) == (
        "invalid_result",
        None,
        None,
    )
    assert "Object of type set is not JSON serializable" in not_json.error

    nan = run("def run(params, tools):\n    return float('nan')\n")
    assert nan.outcome == "invalid_result"

    too_big = run("def run(params, tools):\n    return 'x' * 300_000\n")
    assert too_big.outcome == "invalid_result"
    assert "over the 256000-byte limit" in too_big.error


def test_os_exit_without_a_result_is_crashed():
    result = run("import os\n\ndef run(params, tools):\n    os._exit(0)\n")
    assert result.outcome == "crashed"
    assert result.error == "the sandbox exited (status 0) before the skill finished"


def test_segfault_is_crashed():
    result = run("import ctypes\n\ndef run(params, tools):\n    ctypes.string_at(0)\n")
    assert result.outcome == "crashed"
    assert result.error == "the skill's process was killed by SIGSEGV"


# --- tools --------------------------------------------------------------------------------


def test_declared_tools_are_called_on_the_host_in_order():
    seen = []

    def checksum(args):
        seen.append(args)
        return {"sum": sum(map(ord, args["text"])) % 997}

    result = run(
        """
        def run(params, tools):
            first = tools.checksum({"text": "abc"})
            second = tools.call("checksum", {"text": "xyz"})
            return [first["sum"], second["sum"], sorted(dir(tools))]
        """,
        tools={"checksum": checksum, "lookup": lambda args: None},
    )
    assert result.outcome == "ok"
    assert result.result == [294, 363, ["checksum", "lookup"]]
    assert seen == [{"text": "abc"}, {"text": "xyz"}]
    assert result.tool_calls == [
        {"tool": "checksum", "args": {"text": "abc"}, "ok": True},
        {"tool": "checksum", "args": {"text": "xyz"}, "ok": True},
    ]


def test_validator_gets_the_tools_too():
    result = run(
        "def run(params, tools):\n    return 3\n",
        validator="def validate(p, r, tools):\n    return tools.double({'n': r}) == 6\n",
        tools={"double": lambda args: args["n"] * 2},
    )
    assert result.validation == {"passed": True, "detail": None, "error": None}
    assert result.tool_calls == [{"tool": "double", "args": {"n": 3}, "ok": True}]


def test_undeclared_tools_are_refused_in_the_sandbox():
    called = []
    result = run(
        """
        def run(params, tools):
            errors = []
            try:
                tools.delete_everything({})
            except AttributeError as exc:
                errors.append(str(exc))
            try:
                tools.call("delete_everything", {})
            except ToolError as exc:
                errors.append(str(exc))
            return errors
        """,
        tools={"checksum": lambda args: called.append(args)},
    )
    assert result.outcome == "ok"
    assert result.result == [
        "no tool named 'delete_everything' is declared (declared: ['checksum'])",
        "tool 'delete_everything' is not declared (declared: ['checksum'])",
    ]
    assert (called, result.tool_calls) == ([], [])


def test_a_forged_call_to_an_undeclared_tool_never_reaches_a_callable():
    # Skill code that writes to the channel itself still only reaches declared tools.
    result = run(
        """
        import json, os, sys

        def run(params, tools):
            fd = int(sys.argv[2])
            os.write(fd, json.dumps({"op": "call", "tool": "secret", "args": {}}).encode() + b"\\n")
            reply = os.read(int(sys.argv[1]), 1000)
            return json.loads(reply)
        """,
        tools={"checksum": lambda args: 1},
    )
    assert result.result == {"ok": False, "error": "tool 'secret' is not declared"}
    assert result.tool_calls == [{"tool": "secret", "args": {}, "ok": False}]


def test_tool_failures_raise_tool_error_in_the_sandbox():
    def failing(args):
        raise LookupError(f"no record {args['id']}")

    result = run(
        """
        def run(params, tools):
            out = []
            for call in (lambda: tools.fetch({"id": 9}), lambda: tools.weird({}),
                         lambda: tools.fetch({"bad": {1, 2}}), lambda: tools.fetch([1])):
                try:
                    call()
                except ToolError as exc:
                    out.append(str(exc))
            return out
        """,
        tools={"fetch": failing, "weird": lambda args: object()},
    )
    assert result.outcome == "ok"
    assert result.result == [
        "LookupError: no record 9",
        "TypeError: Object of type object is not JSON serializable",
        "tool arguments are not JSON-serialisable: Object of type set is not JSON serializable",
        "tool arguments must be a dict, not list",
    ]
    assert result.tool_calls == [
        {"tool": "fetch", "args": {"id": 9}, "ok": False},
        {"tool": "weird", "args": {}, "ok": False},
    ]


def test_an_uncaught_tool_error_is_an_error_outcome():
    result = run(
        "def run(params, tools):\n    return tools.fetch({})\n",
        tools={"fetch": lambda args: 1 / 0},
    )
    assert result.outcome == "error"
    assert result.error.endswith("ToolError: ZeroDivisionError: division by zero\n")


# --- containment --------------------------------------------------------------------------


def test_no_network_not_even_to_a_listener_on_the_hosts_loopback():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        result = run(
            """
            import socket

            def run(params, tools):
                out = {}
                for host, port in [("127.0.0.1", params["port"]), ("127.0.0.1", 5432),
                                   ("1.1.1.1", 53), ("8.8.8.8", 443)]:
                    s = socket.socket()
                    s.settimeout(2)
                    try:
                        s.connect((host, port))
                        out[f"{host}:{port}"] = "connected"
                    except OSError as exc:
                        out[f"{host}:{port}"] = exc.errno
                    finally:
                        s.close()
                try:
                    socket.getaddrinfo("example.com", 80)
                    out["dns"] = "resolved"
                except OSError as exc:
                    out["dns"] = type(exc).__name__
                out["interfaces"] = [name for _, name in socket.if_nameindex()]
                return out
            """,
            {"port": port},
        )
    finally:
        listener.close()
    assert result.outcome == "ok", result.error
    # The sandbox's loopback is its own (ECONNREFUSED, 111, though the host listens on
    # that port); nothing else is routable (ENETUNREACH, 101).
    assert result.result == {
        f"127.0.0.1:{port}": 111,
        "127.0.0.1:5432": 111,
        "1.1.1.1:53": 101,
        "8.8.8.8:443": 101,
        "dns": "gaierror",
        "interfaces": ["lo"],
    }


def test_none_of_the_services_environment(monkeypatch):
    monkeypatch.setenv("PIPER_SECRET_PROBE", "s3cr3t-value")
    assert os.environ["DJANGO_SETTINGS_MODULE"]
    result = run(
        """
        import os

        def run(params, tools):
            found = [open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
                     for pid in os.listdir("/proc") if pid.isdigit()]
            return {"environ": dict(os.environ), "proc": found}
        """
    )
    assert result.outcome == "ok", result.error
    assert result.result["environ"] == {
        "PATH": "/usr/bin:/bin",
        "HOME": "/skill",
        "TMPDIR": "/skill",
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "MALLOC_ARENA_MAX": "2",
        "PWD": "/skill",
    }
    assert not any("s3cr3t-value" in env or "DJANGO" in env for env in result.result["proc"])


def test_project_tree_settings_and_sockets_are_invisible():
    from django.conf import settings

    settings_file = ROOT / "piper" / "settings" / "base.py"
    assert settings_file.exists()
    paths = [
        str(ROOT),
        str(settings_file),
        str(ROOT / "var" / "postgres"),
        str(ROOT / "var" / "redis"),
        str(ROOT / ".venv"),
        str(Path(settings.BASE_DIR)),
        "/work",
        "/var/cache/piper-sandbox",
        "/etc/passwd",
        "/home",
        "/run",
        "/sys",
    ]
    result = run(
        """
        import glob, os, stat, sys

        def run(params, tools):
            seen = {path: os.path.exists(path) for path in params["paths"]}
            seen["sockets"] = []
            for top in os.listdir("/"):
                if top == "proc":
                    continue
                for directory, _, files in os.walk("/" + top):
                    for name in files:
                        path = os.path.join(directory, name)
                        if stat.S_ISSOCK(os.lstat(path).st_mode):
                            seen["sockets"].append(path)
            seen["site-packages"] = glob.glob(sys.base_prefix + "/lib/python3*/site-packages")
            seen["root"] = sorted(os.listdir("/"))
            seen["fds"] = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
            seen["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
            seen["uid"] = os.getuid()
            return seen
        """,
        {"paths": paths},
        # Walking every visible file takes seconds of CPU on a slow or busy
        # machine; this test is about what is visible, not about the limits.
        limits=Limits(cpu_seconds=30, wall_seconds=60),
    )
    assert result.outcome == "ok", result.error
    seen = result.result
    assert {path: seen[path] for path in paths} == {path: False for path in paths}
    assert (seen["sockets"], seen["site-packages"]) == ([], [])
    assert seen["root"] == [
        "bin",
        "dev",
        "etc",
        "lib",
        "lib64",
        "proc",
        "root",
        "sbin",
        "skill",
        "usr",
    ]
    # stdin/out/err, the two channel fds, and listdir's own: no host fd leaks in.
    assert len(seen["fds"]) == 6
    assert seen["pids"] == [1]  # its own pid namespace, where the skill is the first process
    assert seen["uid"] == SANDBOX_UID


def test_a_socket_path_bound_on_the_host_cannot_be_reached(tmp_path):
    # Unix sockets are files: the sandbox has no view of the host's (like PostgreSQL's).
    path = tmp_path / "db.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    try:
        result = run(
            """
            import socket

            def run(params, tools):
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(params["path"])
                    return "connected"
                except OSError as exc:
                    return exc.errno
            """,
            {"path": str(path)},
        )
    finally:
        server.close()
    assert result.result == 2  # ENOENT


def test_writes_outside_the_working_directory_fail_and_it_is_thrown_away():
    result = run(
        """
        import os, sys

        def run(params, tools):
            out = {}
            for path in ["/tmp/x", "/usr/x", "/etc/x", "/x", "/dev/shm/x", "/proc/x",
                         sys.base_prefix + "/x", "/skill/../x"]:
                try:
                    with open(path, "w") as f:
                        f.write("x")
                    out[path] = "written"
                except OSError as exc:
                    out[path] = exc.errno
            with open("here.txt", "w") as f:
                f.write("kept for this run only")
            out["cwd"] = os.getcwd()
            out["listing"] = os.listdir(".")
            return out
        """
    )
    assert result.outcome == "ok", result.error
    assert result.result.pop("cwd") == "/skill"
    assert result.result.pop("listing") == ["here.txt"]
    assert all(value in (2, 13, 30) for value in result.result.values()), result.result

    again = run("import os\n\ndef run(params, tools):\n    return os.listdir('.')\n")
    assert again.result == []


def test_file_size_limit():
    result = run(
        """
        def run(params, tools):
            with open("big", "wb") as f:
                f.write(b"x" * (2 * 1024 * 1024))
        """,
        limits=Limits(file_size_mb=1),
    )
    assert result.outcome == "error"
    assert "OSError: [Errno 27] File too large" in result.error


def test_no_new_user_namespaces_inside():
    result = run(
        """
        import ctypes, os

        def run(params, tools):
            libc = ctypes.CDLL(None, use_errno=True)
            return [libc.unshare(0x10000000), ctypes.get_errno()]  # CLONE_NEWUSER
        """
    )
    assert result.outcome == "ok", result.error
    assert result.result[0] == -1
    assert result.result[1] in (1, 28)  # EPERM, or ENOSPC: the namespace limit is 0


# --- limits -------------------------------------------------------------------------------


def test_fork_bomb_is_a_process_limit():
    result = run(
        """
        import os

        def run(params, tools):
            while True:
                os.fork()
        """,
        limits=FAST,
    )
    assert result.outcome == "process_limit"
    assert result.error.startswith("process limit of 16 reached\n")
    assert "BlockingIOError: [Errno 11] Resource temporarily unavailable" in result.error


def test_fork_bomb_that_swallows_the_error_is_still_a_process_limit():
    result = run(
        """
        import os

        def run(params, tools):
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
        """,
        limits=Limits(cpu_seconds=1, wall_seconds=2),
    )
    assert result.outcome == "process_limit"
    assert result.error.startswith("process limit of 16 reached")


def test_one_sandboxs_fork_bomb_does_not_take_the_others_processes():
    bomb: list[SandboxResult] = []
    thread = threading.Thread(
        target=lambda: bomb.append(
            run(
                "import os, time\n\ndef run(p, t):\n    while True:\n        try:\n"
                "            os.fork()\n        except OSError:\n            time.sleep(0.01)\n",
                limits=Limits(cpu_seconds=2, wall_seconds=3),
            )
        )
    )
    thread.start()
    time.sleep(1)
    neighbour = run(
        """
        import subprocess

        def run(params, tools):
            return [subprocess.run(["/bin/true"]).returncode for _ in range(5)]
        """
    )
    thread.join()
    assert bomb[0].outcome == "process_limit"
    assert (neighbour.outcome, neighbour.result) == ("ok", [0, 0, 0, 0, 0])


def test_threads_within_the_limit_work():
    result = run(
        """
        import threading

        def run(params, tools):
            out = []
            threads = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return sorted(out)
        """
    )
    assert (result.outcome, result.result) == ("ok", list(range(8)))


def test_infinite_loop_is_a_cpu_limit():
    started = time.monotonic()
    result = run("def run(params, tools):\n    while True:\n        pass\n", limits=FAST)
    assert result.outcome == "cpu_limit"
    assert result.error == "CPU time limit of 1 s reached"
    assert time.monotonic() - started < 2.5


def test_a_loop_that_ignores_sigxcpu_is_still_a_cpu_limit():
    result = run(
        """
        import signal

        def run(params, tools):
            signal.signal(signal.SIGXCPU, signal.SIG_IGN)
            while True:
                pass
        """,
        limits=FAST,
    )
    assert result.outcome == "cpu_limit"
    # Killed by the hard limit, a second of CPU after the ignored SIGXCPU.
    match = re.fullmatch(r"CPU time limit of 1 s reached \((\d\.\d\d) s used\)", result.error)
    assert match and 1.5 <= float(match[1]) <= 3, result.error


def test_sleeping_forever_is_a_timeout():
    started = time.monotonic()
    result = run(
        "import time\n\ndef run(params, tools):\n    print('before')\n    time.sleep(60)\n",
        limits=Limits(wall_seconds=1),
    )
    assert result.outcome == "timeout"
    assert result.error == "wall-clock limit of 1 s reached; the sandbox was killed"
    assert 1000 <= result.duration_ms < 2500
    assert time.monotonic() - started < 2.5


def test_a_timeout_during_validation_keeps_the_result():
    result = run(
        "def run(params, tools):\n    return 1\n",
        validator="import time\n\ndef validate(p, r, t):\n    time.sleep(60)\n",
        limits=Limits(wall_seconds=1),
    )
    assert (result.outcome, result.result) == ("timeout", 1)
    assert result.validation == {
        "passed": False,
        "detail": None,
        "error": "the validator did not finish: timeout",
    }


@pytest.mark.parametrize(
    "body",
    [
        "return len(bytearray(2 * 1024 * 1024 * 1024))",
        "hog = []\n    while True:\n        hog.append(bytearray(1024 * 1024))",
        "hog = []\n    while True:\n        hog.append('x' * 100)",
    ],
    ids=["one-block", "megabytes", "small-objects"],
)
def test_memory_hog_is_a_memory_limit(body):
    result = run(f"def run(params, tools):\n    {body}\n", limits=Limits(memory_mb=128))
    assert result.outcome == "memory_limit", (result.error, result.stderr)
    assert result.error.startswith("memory limit of 128 MB reached\n")
    assert "MemoryError" in result.error


def test_huge_output_is_an_output_limit():
    result = run(
        "def run(params, tools):\n    while True:\n        print('y' * 1000)\n",
        limits=Limits(output_bytes=100_000),
    )
    assert result.outcome == "output_limit"
    assert result.error == "output over the limit of 100000 bytes; the sandbox was stopped"
    assert len(result.stdout) + len(result.stderr) == 100_000


def test_output_on_stderr_counts_too():
    result = run(
        "import sys\n\ndef run(params, tools):\n    sys.stderr.write('e' * 200_000)\n",
        limits=Limits(output_bytes=50_000),
    )
    assert result.outcome == "output_limit"
    assert result.stderr == "e" * 50_000


# --- the host -----------------------------------------------------------------------------


def test_missing_bubblewrap_is_sandbox_unavailable(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    runtime._tools.cache_clear()
    try:
        with pytest.raises(SandboxUnavailable, match="apt-get install -y bubblewrap"):
            run("def run(params, tools):\n    return 1\n")
    finally:
        monkeypatch.undo()
        runtime._tools.cache_clear()


def test_too_little_memory_to_start_is_a_memory_limit_not_unavailable():
    # The interpreter dies before the bootstrap says hello: still the skill's limit.
    result = run("def run(params, tools):\n    return 1\n", limits=Limits(memory_mb=4))
    assert (result.outcome, result.result) == ("memory_limit", None)
    assert result.error.startswith("memory limit of 4 MB reached")


def test_params_must_be_json():
    with pytest.raises(TypeError):
        run("def run(params, tools):\n    return 1\n", {"x": {1}})


def test_runs_concurrently_from_threads():
    results: list[SandboxResult] = []
    threads = [
        threading.Thread(
            target=lambda i=i: results.append(
                run("def run(params, tools):\n    return params['i'] * 2\n", {"i": i})
            )
        )
        for i in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.result for r in results) == [0, 2, 4, 6, 8, 10]
    assert json.dumps([r.outcome for r in results]) == json.dumps(["ok"] * 6)
