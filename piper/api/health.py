"""/healthz: database, Redis, workers and beat, each with what was measured."""

import time

from django.conf import settings
from django.db import OperationalError, connection, transaction
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
    """Connect and read, the probe bounded by its own statement timeout so that
    /healthz answers even when the database does not. Slow — the probe over its
    threshold or cut off (a lock on the chain heads, an overloaded server), or
    sessions waiting on a lock for long — is reported, not failed: the web
    process still serves what it can, a load balancer must keep it."""
    timeout_ms = settings.PIPER_HEALTH_DB_TIMEOUT_MS
    started = time.perf_counter()
    detail = {"slow": False}
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('statement_timeout'), "
                "set_config('statement_timeout', %s, true)",
                [str(timeout_ms)],
            )
            bound = cursor.fetchone()[0]
            cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            row = cursor.fetchone()
            detail["vector"] = row[0] if row else None
            # The table every write locks a row of: readable unless a migration,
            # a VACUUM FULL or an operator holds it whole.
            cursor.execute("SELECT 1 FROM ledger_chainhead LIMIT 1")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND state = 'active' "
                "AND now() - query_start > make_interval(secs => %s)",
                [settings.PIPER_HEALTH_LOCK_WAIT_MS / 1000],
            )
            detail["waiting_on_locks"] = cursor.fetchone()[0]
            # Inside a caller's transaction (tests) the bound would outlive the probe.
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [bound])
    except OperationalError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != "57014":  # not our timeout: down
            raise
        detail.update(slow=True, error=f"the probe did not finish within {timeout_ms} ms")
    probe_ms = (time.perf_counter() - started) * 1000
    if probe_ms > settings.PIPER_HEALTH_DB_SLOW_MS:
        detail["slow"] = True
    if detail.get("waiting_on_locks"):
        detail["slow"] = True
    return detail


def _redis():
    get_redis_connection("default").ping()


def healthz(request):
    """200 when the database answers (the web process can serve); 503 otherwise.
    A slow database, Redis down, or missing workers or beat make it 'degraded', not down: the
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
    healthy = serving and not database.get("slow") and redis["ok"] and workers["ok"] and beat["ok"]
    state = "ok" if healthy else ("degraded" if serving else "down")
    body = {"status": state, "database": database, "redis": redis, "worker": workers, "beat": beat}
    return JsonResponse(body, status=200 if serving else 503)
