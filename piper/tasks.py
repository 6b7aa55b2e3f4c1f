"""Core tasks. Thin: they call services and are safe to run twice."""

from celery import shared_task

from piper.heartbeat import beat_tick


@shared_task(name="piper.beat_heartbeat", ignore_result=True, soft_time_limit=20, time_limit=30)
def beat_heartbeat() -> None:
    """Stamp celery-beat's liveness for /healthz (scheduled every 30 s)."""
    beat_tick()


@shared_task(name="piper.ping", soft_time_limit=20, time_limit=30)
def ping(value: str) -> dict:
    """Round trip through the broker and the database, for health checks and tests."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        database = cursor.fetchone()[0]
    return {"echo": value, "database": database}
