"""A locked, slow and full database under a write load (issue 18): writes cut
off by the statement timeout answer 503 with Retry-After (never a 500) and
write nothing, their retries are accepted once; /healthz says 'degraded'
while the database is slow and 'ok' again after; a disk that fills up is a 503
database_out_of_resources, and writes go on once space is back.

The run has a PostgreSQL and a Redis of its own (scripts/chaos/_stack.py:
private_services), the web server as the Procfile runs it (gunicorn) with a
statement timeout of `--statement-timeout-ms` (3 s; the web process's default
is 30 s, shorter here so that a lock of a few seconds cuts requests off) and
/healthz counting sessions stuck on a lock for 2/3 of it, a
Celery worker and celery-beat, and the write load of pg_restart.py
(scripts/chaos/_faults.py: facts, episodes and checkpoints, each under its
own Idempotency-Key, sent again after a 503's Retry-After until accepted).

The faults, `--hold` seconds each, `--gap` apart:

1. a table lock: another session holds `ledger_chainhead` in ACCESS EXCLUSIVE
   mode (as a migration or VACUUM FULL would): every write waits on it;
2. row locks: another session holds every chain head row FOR UPDATE (a stuck
   transaction): writes wait, sessions pile up waiting on the lock;
3. a full disk: `ledger_event` lives in a tablespace on a tmpfs of its own
   (`--disk-mb`), which a file is made to fill: PostgreSQL cannot extend the
   table (SQLSTATE 53100 disk_full). The file is removed after `--hold` s.
   (A tmpfs needs root; without it the run says so and skips this fault.)

Beside the load, /healthz is read every 0.25 s. Checked, besides every check
of _faults.py (every write accepted exactly once, every failed attempt a 503
with a database error code and Retry-After, nothing half-written, the hash
chain verifies): /healthz answered 200 throughout (the web process serves), was
'degraded' with `database.slow` during each lock, and its database was not
slow again within 5 s of each lock's end.

    .venv/bin/python scripts/chaos/db_slow.py       # 4 procs x 2 threads, ~90 s

Exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _faults  # noqa: E402
import _stack  # noqa: E402

HEALTH_EVERY = 0.25


class HealthProbe:
    """GET /healthz every HEALTH_EVERY s: (time, status code, status, database part)."""

    def __init__(self, url: str):
        self.url, self.samples, self._stop = url, [], threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import httpx

        with httpx.Client(base_url=self.url, timeout=10) as http:
            while not self._stop.is_set():
                try:
                    response = http.get("/healthz")
                    body = response.json()
                    self.samples.append(
                        (time.time(), response.status_code, body["status"], body["database"])
                    )
                except (httpx.HTTPError, ValueError) as exc:
                    self.samples.append((time.time(), 0, f"no answer: {exc}", {}))
                self._stop.wait(HEALTH_EVERY)

    def start(self) -> HealthProbe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)


@contextlib.contextmanager
def small_disk(root: Path, megabytes: int):
    """A tmpfs of `megabytes` at root/disk, for a tablespace; None without root."""
    mount = root / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        print(f"   no tmpfs ({done.stderr.strip()}): the disk-full fault is skipped")
        yield None
        return
    try:
        tablespace = mount / "tablespace"
        tablespace.mkdir()
        if _stack._pg_user():
            shutil.chown(tablespace, _stack._pg_user(), _stack._pg_user())
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> int:
    """Write `path` until the file system has no space left; returns its size.
    (Written, not fallocate'd to the free space measured: PostgreSQL writes too.)"""
    written = 0
    with open(path, "wb", buffering=0) as filler:
        for size in (1 << 20, 1 << 12):
            chunk = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    written += filler.write(chunk)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _faults.add_load_arguments(parser, port=8547)
    parser.add_argument("--hold", type=float, default=6, help="seconds each fault lasts")
    parser.add_argument("--statement-timeout-ms", type=int, default=3000)
    parser.add_argument("--disk-mb", type=int, default=64)
    parser.set_defaults(seconds=80, first_at=12, gap=14, settle=120)
    args = parser.parse_args()
    # The web process's bound only (piper/wsgi.py): the worker keeps none.
    os.environ["PIPER_WEB_STATEMENT_TIMEOUT_MS"] = str(args.statement_timeout_ms)
    os.environ["PIPER_HEALTH_DB_TIMEOUT_MS"] = "500"
    os.environ["PIPER_HEALTH_DB_SLOW_MS"] = "500"
    # Below the statement timeout, or no request waits long enough to be counted;
    # above the waits of the load's own writers queued on their agent's chain.
    lock_wait_ms = args.statement_timeout_ms * 2 // 3
    os.environ["PIPER_HEALTH_LOCK_WAIT_MS"] = str(lock_wait_ms)
    health = HealthProbe(f"http://127.0.0.1:{args.port}")

    with (
        _stack.private_services("db-slow") as services,
        small_disk(services[0].root, args.disk_mb) as disk,
    ):
        import psycopg

        postgres = services[0]

        def connect():
            return psycopg.connect(
                host=str(postgres.sockets), port=postgres.port, user="postgres",
                dbname=_stack.DB_NAME, autocommit=True,
            )  # fmt: skip

        if disk is not None:
            with connect() as db:
                db.execute(f"CREATE TABLESPACE small_disk LOCATION '{disk / 'tablespace'}'")
                db.execute("ALTER TABLE ledger_event SET TABLESPACE small_disk")

        def lock_fault(faults: list[dict], name: str, sql: str) -> None:
            with connect() as db:
                db.autocommit = False
                began = time.time()
                db.execute(sql)
                time.sleep(args.hold)
                db.rollback()
                faults.append({"name": name, "began": began, "back": time.time()})
            print(f"   {name}: held {args.hold:.0f} s", flush=True)

        def disk_fault(faults: list[dict]) -> None:
            filler = disk / "filler"
            began = time.time()
            filled = fill(filler)
            left = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            time.sleep(args.hold)
            filler.unlink()
            faults.append({"name": "disk full", "began": began, "back": time.time()})
            print(
                f"   disk full: {filled / 1e6:.1f} MB filled ({left} bytes left) for "
                f"{args.hold:.0f} s",
                flush=True,
            )

        def inject(faults: list[dict], stack: dict) -> None:
            health.start()
            time.sleep(args.first_at)
            lock_fault(
                faults,
                "table lock (ledger_chainhead, ACCESS EXCLUSIVE)",
                "LOCK TABLE ledger_chainhead IN ACCESS EXCLUSIVE MODE",
            )
            time.sleep(args.gap)
            lock_fault(
                faults,
                "row locks (every chain head FOR UPDATE)",
                "SELECT 1 FROM ledger_chainhead FOR UPDATE",
            )
            if disk is not None:
                time.sleep(args.gap)
                disk_fault(faults)
            time.sleep(8)
            health.stop()
            windows.extend(faults)

        windows: list[dict] = []

        def health_report() -> tuple[list[str], list[str]]:
            lines, violations = ["-- /healthz, read every 0.25 s"], []
            codes = Counter(s[1] for s in health.samples)
            lines.append(f"   {len(health.samples)} reads, HTTP statuses {dict(codes)}")
            if set(codes) != {200}:
                violations.append(f"/healthz answered other than 200: {dict(codes)}")
            for fault in windows:
                during = [s for s in health.samples if fault["began"] <= s[0] <= fault["back"]]
                after = [
                    s for s in health.samples if fault["back"] + 5 <= s[0] <= fault["back"] + 8
                ]
                seen = Counter(
                    f"{s[2]}{' (database slow)' if s[3].get('slow') else ''}" for s in during
                )
                waits = max((s[3].get("waiting_on_locks", 0) for s in during), default=0)
                errors = {s[3]["error"] for s in during if s[3].get("error")}
                lines.append(
                    f"   during {fault['name']}: {dict(seen)}; most sessions waiting on a lock "
                    f"over {lock_wait_ms} ms: {waits}" + (f"; {sorted(errors)}" if errors else "")
                )
                lines.append(
                    "   5-8 s after: "
                    + str(dict(Counter(f"{s[2]}, slow {s[3].get('slow')}" for s in after)))
                )
                if fault["name"] != "disk full":
                    if not any(s[3].get("slow") and s[2] == "degraded" for s in during):
                        violations.append(f"/healthz never said degraded during {fault['name']}")
                    if not after or any(s[3].get("slow") for s in after):
                        violations.append(f"/healthz still slow 5 s after {fault['name']}")
            return lines, violations

        def postgres_said() -> list[str]:
            log = postgres.log.read_text(errors="replace")
            return [
                "-- PostgreSQL's log: "
                f"{log.count('canceling statement due to statement timeout')} statements "
                f"cancelled by the statement timeout, {log.count('No space left on device')} "
                "'No space left on device' (could not extend a file: disk_full)"
            ]

        describe = (
            f"statement timeout {args.statement_timeout_ms} ms; faults {args.hold:.0f} s each, "
            f"the first {args.first_at:.0f} s in, {args.gap:.0f} s apart: a table lock, row "
            "locks" + (f", a full disk ({args.disk_mb} MB tmpfs tablespace)" if disk else "")
        )
        return _faults.drive(
            "db-slow",
            "A locked, slow and full database under load",
            args,
            services,
            inject,
            describe,
            epilogue=lambda: [*health_report()[0], *postgres_said()],
            checks=lambda: health_report()[1],
        )


if __name__ == "__main__":
    sys.exit(main())
