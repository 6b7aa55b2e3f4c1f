"""`make run`: bring the whole service up on this machine and keep it in the foreground.

Steps: embedded PostgreSQL/Redis (when DATABASE_URL / REDIS_URL are unset) →
migrate → collectstatic → setup_periodic_tasks → calibrate_abstention when the
embedder in use has no calibration yet → a demo agent and a fresh key
→ a staff superuser for the admin → web + worker + beat under honcho → wait
for /healthz → the Memory Battery once → print where everything is → stream
the processes' logs until Ctrl-C, then stop them all.

Run with the virtualenv's Python (the Makefile does). PORT picks the web
port (default 8000).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
LOG_DIR = BASE_DIR / "var" / "log"
LOG_FILE = LOG_DIR / "run.log"
BATTERY_REPORT = Path("var") / "battery" / "latest"
HEALTH_TIMEOUT = float(os.environ.get("PIPER_RUN_HEALTH_TIMEOUT", 120))
STOP_TIMEOUT = 20

BOLD, RED, YELLOW, GREEN, RESET = (
    ("\033[1m", "\033[31m", "\033[33m", "\033[32m", "\033[0m") if sys.stdout.isatty() else ("",) * 5
)

SUPERUSER_SNIPPET = """
import os, secrets
from django.contrib.auth import get_user_model
User = get_user_model()
existing = User.objects.filter(is_superuser=True, is_active=True).order_by("pk").first()
if existing:
    print("existing", existing.get_username(), sep="\\t")
else:
    username = os.environ.get("DJANGO_SUPERUSER_USERNAME", "admin")
    password = os.environ.get("DJANGO_SUPERUSER_PASSWORD") or secrets.token_urlsafe(12)
    email = os.environ.get("DJANGO_SUPERUSER_EMAIL", "admin@localhost")
    User.objects.create_superuser(username=username, email=email, password=password)
    print("created", username, password, sep="\\t")
"""

# Is there an abstention calibration for the embedder and evidence metric in use?
CALIBRATION_SNIPPET = """
from episodes.models import AbstentionCalibration
from episodes.retrieval import EVIDENCE_METRIC
from piper.embeddings import get_embedder
name = get_embedder().name
found = AbstentionCalibration.objects.filter(embedding_model=name, metric=EVIDENCE_METRIC)
print("present" if found.exists() else "missing", name, sep="\\t")
"""


def say(message: str, colour: str = "") -> None:
    print(f"{colour}{message}{RESET if colour else ''}", flush=True)


def step(message: str) -> None:
    say(f"==> {message}", BOLD)


class RunError(Exception):
    pass


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("DJANGO_SETTINGS_MODULE", "piper.settings.local")
    env.setdefault("PORT", "8000")
    env["PYTHONUNBUFFERED"] = "1"
    # The Procfile's commands (gunicorn, celery) live beside this Python.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def manage(env: dict, *args: str, capture: bool = False) -> str:
    command = [sys.executable, "manage.py", *args]
    result = subprocess.run(
        command,
        cwd=BASE_DIR,
        env=env,
        text=True,
        stdout=subprocess.PIPE if capture else None,
    )
    if result.returncode != 0:
        raise RunError(f"`python manage.py {' '.join(args)}` failed (exit {result.returncode})")
    return result.stdout or ""


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def healthz(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:  # 503 still carries the JSON body
        try:
            return json.loads(exc.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


def wait_until_healthy(port: int, processes: subprocess.Popen, started: float) -> dict:
    """Wait for database, Redis and a worker of *this* run (its heartbeat is newer than our start)."""
    deadline = time.monotonic() + HEALTH_TIMEOUT
    body = None
    while time.monotonic() < deadline:
        if processes.poll() is not None:
            raise RunError(f"the processes exited (code {processes.returncode}); see {LOG_FILE}")
        body = healthz(port)
        if body and body["database"]["ok"] and body["redis"]["ok"]:
            since_start = time.time() - started
            workers = body["worker"]["workers"]
            if any(age <= since_start + 1 for age in workers.values()):
                return body
        time.sleep(1)
    raise RunError(
        f"/healthz did not report database, redis and a worker ok within {HEALTH_TIMEOUT:.0f} s; "
        f"last answer: {json.dumps(body)}; see {LOG_FILE}"
    )


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), so none is left behind at shutdown."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop(processes: subprocess.Popen, follower: LogFollower) -> None:
    if processes.poll() is not None:
        return
    step("stopping web, worker and beat")
    tree = descendants(processes.pid)
    # honcho passes SIGTERM on to each process: gunicorn and celery shut down warm.
    processes.send_signal(signal.SIGTERM)
    try:
        processes.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        processes.kill()
        processes.wait()
    # honcho's own helpers exit just after it; give everything a moment.
    deadline = time.monotonic() + 5
    while (leftovers := [pid for pid in tree if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    follower.copy_new()  # honcho's account of the shutdown
    say("stopped." + (f" ({len(leftovers)} stragglers killed)" if leftovers else ""))


class LogFollower:
    """Copies what the processes log to our stdout, from where the summary ends."""

    def __init__(self, path: Path):
        self.path, self.offset, self.active = path, 0, False

    def start_at_end(self) -> None:
        self.offset, self.active = self.path.stat().st_size, True

    def copy_new(self) -> bool:
        if not self.active:
            return False
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
            self.offset = handle.tell()
        if chunk:
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        return bool(chunk)

    def until_exit(self, processes: subprocess.Popen) -> None:
        while processes.poll() is None:
            if not self.copy_new():
                time.sleep(0.3)
        self.copy_new()


def run_demo_agent(env: dict, base_url: str, key: str) -> None:
    """The demo agent works a task and a successor resumes it (examples/agent_loop.py),
    through the SDK: real use, so suite H has a succession to measure."""
    step("the demo agent works a task, hands it over, and its successor resumes it")
    for phase in ("work", "resume"):
        result = subprocess.run(
            [
                sys.executable,
                "examples/agent_loop.py",
                phase,
                "--base-url",
                base_url,
                "--api-key",
                key,
            ],
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            say(f"WARNING: the demo agent's {phase} step failed:\n{result.stderr[-2000:]}", YELLOW)
            return


def run_battery(env: dict, base_url: str) -> str:
    probe = subprocess.run(
        [sys.executable, "manage.py", "help", "battery"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        say("WARNING: `manage.py battery` does not exist yet; skipping the battery run.", YELLOW)
        return "skipped (no battery command)"
    step(f"running the Memory Battery against {base_url}")
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "battery",
            "run",
            "--base-url",
            base_url,
            "--report",
            str(BATTERY_REPORT),
        ],
        cwd=BASE_DIR,
        env=env,
    )
    if result.returncode == 0:
        say("battery: all gates passed", GREEN)
        return "passed"
    if result.returncode == 2:
        say(
            "battery INCOMPLETE (exit 2): a designed suite did not run (see missing suites "
            "in the report; suite H needs live use). The service keeps running.",
            YELLOW,
        )
        return "incomplete (exit 2)"
    say(
        f"BATTERY FAILED (exit {result.returncode}): a gate failed or the run broke; "
        "see the table above and the report. The service keeps running.",
        RED,
    )
    return f"FAILED (exit {result.returncode})"


def _interrupt(signum, frame):
    # SIGTERM / SIGHUP stop the service the same way Ctrl-C does.
    raise KeyboardInterrupt


def main() -> int:
    # Explicit, because a shell that started us in the background may have set
    # SIGINT to "ignore", and Ctrl-C must always stop the service cleanly.
    signal.signal(signal.SIGINT, _interrupt)
    env = environment()
    port = int(env["PORT"])
    os.chdir(BASE_DIR)
    LOG_DIR.mkdir(parents=True, exist_ok=True)

    if not port_free(port):
        raise RunError(
            f"port {port} on 127.0.0.1 is in use; choose another, e.g. make run PORT={port + 1}"
        )

    if not env.get("DATABASE_URL") or not env.get("REDIS_URL"):
        step("starting embedded PostgreSQL / Redis (DATABASE_URL / REDIS_URL unset)")
        subprocess.run([sys.executable, "-m", "piper.embedded", "start"], env=env, check=True)

    step("migrating the database")
    manage(env, "migrate", "--noinput")
    step("collecting static files")
    manage(env, "collectstatic", "--noinput", "-v", "0")
    step("creating the periodic tasks")
    manage(env, "setup_periodic_tasks")
    step("checking the abstention calibration for the embedder")
    calibration = manage(env, "shell", "-c", CALIBRATION_SNIPPET, capture=True)
    state, model = calibration.strip().splitlines()[-1].split("\t")
    if state == "missing":  # otherwise episode search abstains at an uncalibrated default
        step(f"calibrating abstention for {model}")
        manage(env, "calibrate_abstention")
    else:
        say(f"calibrated for {model}")
    step("creating the demo agent and a fresh key")
    demo = manage(
        env, "create_agent", "demo", "--existing-ok", "--key-name", "make run", capture=True
    )
    print(demo, end="")
    step("checking for an admin user")
    admin = manage(env, "shell", "-c", SUPERUSER_SNIPPET, capture=True).strip().splitlines()[-1]
    admin_state, admin_user, *admin_password = admin.split("\t")

    step(f"starting web + worker + beat on port {port} (logs: {LOG_FILE})")
    started = time.time()
    with open(LOG_FILE, "wb") as log:  # the child keeps its own descriptor
        processes = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "honcho",
                "start",
                "-f",
                "Procfile",
                "-p",
                str(port),
                "--no-colour",
            ],
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            # Our own process group: Ctrl-C reaches only this script, which then
            # stops honcho once, so celery is not hit by two signals.
            start_new_session=True,
        )
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    follower = LogFollower(LOG_FILE)
    try:
        step("waiting for /healthz to report database, redis and a worker")
        health = wait_until_healthy(port, processes, started)
        say(
            f"healthy: database (pgvector {health['database'].get('vector')}), redis, "
            f"workers {sorted(health['worker']['workers'])}",
            GREEN,
        )
        base_url = f"http://127.0.0.1:{port}"
        demo_key = next(
            (line.split()[-1] for line in demo.splitlines() if line.startswith("key:")), ""
        )
        if demo_key:
            run_demo_agent(env, base_url, demo_key)
        battery = run_battery(env, base_url)

        report = BASE_DIR / BATTERY_REPORT
        html = sorted(report.glob("*.html")) if report.exists() else []
        say("")
        say("Piper Memory is running.", BOLD)
        say(f"  API          {base_url}/api/v1/")
        say(f"  API docs     {base_url}/api/docs/")
        say(f"  schema       {base_url}/api/schema/")
        say(f"  health       {base_url}/healthz")
        say(f"  admin        {base_url}/admin/")
        if admin_state == "created":
            say(f"               user {admin_user}, password {admin_password[0]} (shown once)")
        else:
            say(
                f"               user {admin_user} (existing; reset the password with "
                f"`.venv/bin/python manage.py changepassword {admin_user}`)"
            )
        for line in demo.splitlines():
            if line.startswith(("agent:", "key:")):
                say(f"  demo {line}")
        say(f"  battery      {battery}; report: {html[0] if html else report}")
        say(f"  logs         {LOG_FILE}")
        say(
            "Ctrl-C stops web, worker and beat (the embedded PostgreSQL/Redis keep running: `make stop`)."
        )
        say("")
        follower.start_at_end()
        follower.until_exit(processes)
        raise RunError(f"the processes exited (code {processes.returncode}); see {LOG_FILE}")
    except KeyboardInterrupt:
        say("")
        return 0
    finally:
        signal.signal(
            signal.SIGINT, signal.SIG_IGN
        )  # a second Ctrl-C must not cut the shutdown short
        stop(processes, follower)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RunError as exc:
        say(f"make run: {exc}", RED)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
