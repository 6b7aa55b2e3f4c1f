"""Core periodic tasks. Thin: they call services and are safe to run twice."""

from celery import shared_task

from piper.heartbeat import beat_tick


@shared_task(name="piper.beat_heartbeat", ignore_result=True)
def beat_heartbeat() -> None:
    beat_tick()


@shared_task(name="piper.ping")
def ping(value: str) -> dict:
    """Round trip through the broker and the database, for health checks and tests."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        database = cursor.fetchone()[0]
    return {"echo": value, "database": database}
