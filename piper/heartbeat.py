"""Liveness of the background processes, kept in Redis for /healthz.

Each worker process refreshes `piper:heartbeat:worker:<hostname>` (30 s TTL)
from a daemon thread; celery-beat's `piper.beat_heartbeat` task, run by a
worker, stamps `piper:heartbeat:beat`. /healthz only reads keys: it never
waits on a broadcast to the workers.
"""

from __future__ import annotations

import contextlib
import threading
import time

from django_redis import get_redis_connection

WORKER_PREFIX = "piper:heartbeat:worker:"
BEAT_KEY = "piper:heartbeat:beat"
WORKER_TTL = 30
WORKER_INTERVAL = 10


def worker_beat(hostname: str) -> None:
    get_redis_connection("default").set(WORKER_PREFIX + hostname, str(time.time()), ex=WORKER_TTL)


def start_worker_heartbeat(hostname: str) -> threading.Thread:
    def loop() -> None:
        while True:
            with contextlib.suppress(Exception):  # Redis down: /healthz will say so
                worker_beat(hostname)
            time.sleep(WORKER_INTERVAL)

    thread = threading.Thread(target=loop, name="piper-heartbeat", daemon=True)
    thread.start()
    return thread


def beat_tick() -> None:
    get_redis_connection("default").set(BEAT_KEY, str(time.time()), ex=3600)


def liveness() -> dict:
    redis = get_redis_connection("default")
    now = time.time()
    workers = {}
    for key in redis.scan_iter(match=WORKER_PREFIX + "*", count=100):
        key = key.decode() if isinstance(key, bytes) else key
        stamp = redis.get(key)
        if stamp is not None:
            workers[key.removeprefix(WORKER_PREFIX)] = round(now - float(stamp), 1)
    beat_stamp = redis.get(BEAT_KEY)
    beat_age = round(now - float(beat_stamp), 1) if beat_stamp is not None else None
    return {"workers": workers, "beat_age_seconds": beat_age}
