"""/healthz: database, Redis, workers and beat, each with what was measured."""

import time

from django.db import connection
from django.http import JsonResponse
from django_redis import get_redis_connection

from piper.heartbeat import WORKER_TTL, liveness

BEAT_STALE_SECONDS = 120


def _timed(check):
    started = time.perf_counter()
    try:
        detail = check() or {}
        return {
            "ok": True,
            "latency_ms": round((time.perf_counter() - started) * 1000, 2),
            **detail,
        }
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def _database():
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    return {"vector": row[0] if row else None}


def _redis():
    get_redis_connection("default").ping()


def healthz(request):
    """200 when the database answers (the web process can serve); 503 otherwise.
    Redis down, or missing workers or beat, make it 'degraded', not down: the
    API serves without Redis (rate limits fail open; background work is
    re-derived by the reconcilers once it is back), so a load balancer must not
    take the web processes out for it."""
    database = _timed(_database)
    redis = _timed(_redis)
    workers = {"ok": False, "workers": {}}
    beat = {"ok": False, "age_seconds": None}
    if redis["ok"]:
        alive = liveness()
        workers = {
            "ok": bool(alive["workers"]),
            "workers": alive["workers"],
            "ttl_seconds": WORKER_TTL,
        }
        age = alive["beat_age_seconds"]
        beat = {"ok": age is not None and age < BEAT_STALE_SECONDS, "age_seconds": age}
    serving = database["ok"]
    healthy = serving and redis["ok"] and workers["ok"] and beat["ok"]
    state = "ok" if healthy else ("degraded" if serving else "down")
    body = {"status": state, "database": database, "redis": redis, "worker": workers, "beat": beat}
    return JsonResponse(body, status=200 if serving else 503)
