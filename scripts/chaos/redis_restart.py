"""Redis restarted — and flushed — under a write load: nothing is lost, because
PostgreSQL is the truth, and the work whose task was lost is derived again.

The same stack and load as pg_restart.py (a private PostgreSQL and Redis, the
gunicorn web server, a Celery worker and celery-beat; client processes
writing facts, episodes and checkpoints, each under its own Idempotency-Key,
sent again after a 503 or no answer). Every write queues derived work through
Redis: an episode's vector (episodes.embed_episodes), a fact's text and its
vector (facts.index_fact_texts, facts.embed_fact_texts). Meanwhile Redis is
flushed (FLUSHALL: the queued tasks, the unacknowledged ones, the results, the
rate-limit counters and the heartbeats are gone) and killed, stays down
`--down` seconds, and starts again empty — `--restarts` times. While it is
down, the writes' commits cannot queue their tasks at all.

Checked: every write accepted, no 5xx and no connection error (Redis is not
needed to accept a write); the web workers are the same processes; exactly
once and nothing half-written in PostgreSQL (as pg_restart.py); the worker
and beat carry on with the new Redis; and the derived work is all done in
the end (`--settle` seconds): every episode has its vector, every fact pair
its text, current and with its vector — the reconcilers
(episodes.embed_backlog, facts.fact_texts_backlog) re-derive what the lost
tasks would have done.

    .venv/bin/python scripts/chaos/redis_restart.py    # 4 procs x 2 threads, 2 restarts
    .venv/bin/python scripts/chaos/redis_restart.py --restarts 4 --down 10 --seconds 150
    .venv/bin/python scripts/chaos/redis_restart.py --without-reconcilers --settle 90  # fails

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


def held(redis) -> dict[str, int]:
    """What the flush is about to lose: tasks queued for the worker, tasks it
    has taken but not acknowledged (acks_late), and keys in all."""
    client = redis.client()
    queue = _stack.env()["PIPER_CHAOS_QUEUE"]
    queued = sum(client.llen(k) for k in client.scan_iter(f"{queue}*") if client.type(k) == b"list")
    return {"queued": queued, "unacked": client.hlen("unacked"), "keys": client.dbsize()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _faults.add_load_arguments(parser, port=8542)
    parser.add_argument("--restarts", type=int, default=2)
    parser.add_argument("--down", type=float, default=5, help="seconds Redis stays down")
    parser.add_argument(
        "--without-reconcilers",
        dest="reconcilers",
        action="store_false",
        help="beat without episodes.embed_backlog and facts.fact_texts_backlog: shows what "
        "the lost tasks leave undone",
    )
    args = parser.parse_args()
    lost: list[dict] = []

    def restarts(faults: list[dict], stack: dict) -> None:
        redis = stack["redis"]
        time.sleep(args.first_at)
        for n in range(args.restarts):
            before = held(redis)
            began = time.time()
            redis.stop(flush=True)
            time.sleep(args.down)
            redis.start()
            back = time.time()
            lost.append(before)
            faults.append({"name": "FLUSHALL + kill", "began": began, "back": back})
            print(
                f"   restart {n + 1}: FLUSHALL with {before['queued']} task(s) queued, "
                f"{before['unacked']} taken and not acknowledged, {before['keys']} keys; "
                f"killed; down {back - began:.1f} s",
                flush=True,
            )
            time.sleep(args.gap)

    describe = (
        f"{args.restarts} flush + restart(s) of Redis, {args.down:.0f} s down, the first "
        f"{args.first_at:.0f} s in, {args.gap:.0f} s apart"
    )

    def epilogue() -> list[str]:
        return [
            f"   tasks lost in the flushes: {sum(x['queued'] + x['unacked'] for x in lost)} "
            "(queued or unacknowledged), besides every task the commits could not queue "
            "while Redis was down"
        ]

    with _stack.private_services("redis-restart") as services:
        return _faults.drive(
            "redis-restart",
            "Redis flushed and restarted under load",
            args,
            services,
            restarts,
            describe,
            epilogue,
        )


if __name__ == "__main__":
    sys.exit(main())
