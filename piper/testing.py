"""pytest plugin: a real Celery worker process for tests of asynchronous behaviour.

Loaded by the root ``conftest.py`` (``pytest_plugins = ["piper.testing"]``).

``celery_worker_process`` (session scope) starts ``celery -A piper worker`` as
a child process that talks to the same Redis as the tests and to the *test*
database pytest-django created, and consumes only this run's queue
(``piper-test-<PIPER_TEST_RUN_ID>``, see ``piper/settings/test.py``), so test
runs side by side never take each other's tasks. Tests that use it must
commit what the worker should see::

    @pytest.mark.django_db(transaction=True)
    def test_something(celery_worker_process):
        result = some_task.delay(...).get(timeout=30)

Such tests are marked ``worker`` automatically (``pytest -m "not worker"``
skips them).
"""

from __future__ import annotations

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


def _wait_until_ready(worker: WorkerProcess, timeout: float) -> None:
    from celery.exceptions import TimeoutError as ResultTimeout

    from piper.tasks import ping

    deadline = time.monotonic() + timeout
    token = uuid.uuid4().hex
    # Sent once: the broker keeps it until the worker is up to take it.
    result = ping.apply_async(args=[token], queue=worker.queue)
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


def start_worker(*, settings_dict: dict, queue: str, concurrency: int = 1) -> WorkerProcess:
    """Start a worker for ``queue`` against the database in ``settings_dict`` and wait for it."""
    run_id = os.environ["PIPER_TEST_RUN_ID"]
    hostname = f"piper-test-{run_id}@{socket.gethostname()}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "piper.settings.test",
        "PIPER_TEST_RUN_ID": run_id,
        "DATABASE_URL": database_url(settings_dict),
        "PYTHONUNBUFFERED": "1",
    }
    log_dir = Path(tempfile.mkdtemp(prefix=f"piper-test-worker-{run_id}-"))
    log_path = log_dir / "worker.log"
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "piper",
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
    worker = WorkerProcess(process, hostname, queue, settings_dict["NAME"], log_path, env)
    try:
        _wait_until_ready(worker, WORKER_START_TIMEOUT)
    except BaseException:
        worker.stop()
        raise
    return worker


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup):
    """A real Celery worker, consuming this run's queue, on the test database and the same Redis."""
    from django.conf import settings
    from django.db import connection

    settings_dict = dict(connection.settings_dict)
    worker = start_worker(settings_dict=settings_dict, queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    try:
        yield worker
    finally:
        # Before pytest-django tears the test database down: a connected worker
        # would keep DROP DATABASE from succeeding.
        worker.stop()
        _forget(worker)
        shutil.rmtree(worker.log_path.parent, ignore_errors=True)


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


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "worker: starts a real Celery worker process against real Redis and PostgreSQL"
    )


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "celery_worker_process" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.worker)
