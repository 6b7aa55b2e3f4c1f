"""PostgreSQL restarted under a write load: the API answers 503 with Retry-After
(never a 500) while the database is away, recovers by itself when it is back,
and every write is accepted exactly once with nothing half-written.

The run has a PostgreSQL and a Redis of its own (scripts/chaos/_stack.py:
private_services; the shared servers are never touched), the web server as
the Procfile runs it (gunicorn), a Celery worker and celery-beat. Client
processes write facts, episodes and checkpoints, each write under its own
Idempotency-Key and sent again with the same key after a 503 (its Retry-After)
or no answer, until accepted (scripts/chaos/_faults.py). Meanwhile the
database is stopped and started again, `--restarts` times, with the stop
modes of `--modes` in turn: `fast` (sessions cut, open transactions rolled
back) and `immediate` (a crash: recovery from the WAL at the next start), and
the outage lengths of `--down` in turn.

Checked: every write accepted; every failed attempt a 503 with a Retry-After
header and a database error code; no 500 (no 5xx other than 503) and no
connection error (gunicorn stays up); the web workers are the same processes
after the run (nothing restarted them); one Idempotency-Key record per write,
each naming its events; every event of the run belongs to exactly one
accepted write; the rows match (episodes, fact versions, working-state
versions 1..n per thread); the hash chain verifies; the worker runs tasks
again and beat still runs; the derived work (vectors of episodes, fact texts
and their vectors) is all done within `--settle` seconds.

    .venv/bin/python scripts/chaos/pg_restart.py     # 4 procs x 2 threads, 3 restarts
    .venv/bin/python scripts/chaos/pg_restart.py --restarts 6 --down 3,30 --seconds 240

Exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _faults  # noqa: E402
import _stack  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _faults.add_load_arguments(parser, port=8541)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--modes", default="fast,immediate", help="pg_ctl stop modes, in turn")
    parser.add_argument("--down", default="3,3,20", help="seconds the database stays down, in turn")
    parser.set_defaults(seconds=100, gap=15)
    args = parser.parse_args()
    modes = args.modes.split(",")
    downs = [float(d) for d in args.down.split(",")]

    def restarts(faults: list[dict], stack: dict) -> None:
        postgres = stack["postgres"]
        time.sleep(args.first_at)
        for n in range(args.restarts):
            mode, down = modes[n % len(modes)], downs[n % len(downs)]
            began = time.time()
            stop_s = postgres.stop(mode)
            time.sleep(down)
            start_s = postgres.start()
            back = time.time()
            faults.append({"name": f"pg_ctl stop -m {mode}", "began": began, "back": back})
            print(
                f"   restart {n + 1}: pg_ctl stop -m {mode} took {stop_s:.1f} s, down "
                f"{back - began:.1f} s, pg_ctl start took {start_s:.1f} s",
                flush=True,
            )
            time.sleep(args.gap)

    describe = (
        f"{args.restarts} restart(s) of PostgreSQL (stop modes {args.modes}, down {args.down} s "
        f"after the stop), the first {args.first_at:.0f} s in, {args.gap:.0f} s apart"
    )
    with _stack.private_services("pg-restart") as services:

        def epilogue() -> list[str]:
            log = services[0].log.read_text(errors="replace")
            return [
                "   PostgreSQL's log: "
                f"{log.count('automatic recovery in progress')} recovery from the WAL after a "
                f"crash, {log.count('database system is ready to accept connections')} starts"
            ]

        return _faults.drive(
            "pg-restart",
            "PostgreSQL restarted under load",
            args,
            services,
            restarts,
            describe,
            epilogue,
        )


if __name__ == "__main__":
    sys.exit(main())
