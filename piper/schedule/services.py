"""Write the schedule in ``periodic.py`` into django-celery-beat's tables."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from django.db import transaction
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from .periodic import PERIODIC_TASKS, PREFIX, Cron, Every, Periodic


def _schedule_fields(schedule: Every | Cron) -> dict:
    if isinstance(schedule, Every):
        # IntervalSchedule has no unique constraint: reuse the oldest match.
        interval = (
            IntervalSchedule.objects.filter(every=schedule.seconds, period=IntervalSchedule.SECONDS)
            .order_by("pk")
            .first()
        ) or IntervalSchedule.objects.create(
            every=schedule.seconds, period=IntervalSchedule.SECONDS
        )
        return {"interval": interval, "crontab": None}
    lookup = {
        "minute": schedule.minute,
        "hour": schedule.hour,
        "day_of_week": schedule.day_of_week,
        "day_of_month": schedule.day_of_month,
        "month_of_year": schedule.month_of_year,
        "timezone": ZoneInfo("UTC"),
    }
    crontab = CrontabSchedule.objects.filter(**lookup).order_by("pk").first()
    return {"interval": None, "crontab": crontab or CrontabSchedule.objects.create(**lookup)}


def periodic_tasks_sync(definitions: tuple[Periodic, ...] = PERIODIC_TASKS) -> dict[str, list[str]]:
    """Make the PeriodicTask rows match ``definitions``.

    Returns the names created, updated, unchanged and disabled. Rows are only
    saved when a field differs, so a second run changes nothing at all (not
    even ``date_changed``) and celery-beat does not reload its schedule.
    """
    result: dict[str, list[str]] = {"created": [], "updated": [], "unchanged": [], "disabled": []}
    with transaction.atomic():
        for spec in definitions:
            wanted = {
                "task": spec.task,
                **_schedule_fields(spec.schedule),
                "solar": None,
                "clocked": None,
                "args": "[]",
                "kwargs": "{}",
                "queue": None,
                "expires": None,
                "expire_seconds": spec.expire_seconds,
                "one_off": False,
                "enabled": True,
                "description": spec.description,
            }
            task = PeriodicTask.objects.select_for_update().filter(name=spec.name).first()
            if task is None:
                PeriodicTask.objects.create(name=spec.name, **wanted)
                result["created"].append(spec.name)
                continue
            changed = [f for f, value in wanted.items() if getattr(task, f) != value]
            if changed:
                for f in changed:
                    setattr(task, f, wanted[f])
                task.save()
                result["updated"].append(spec.name)
            else:
                result["unchanged"].append(spec.name)
        stale = (
            PeriodicTask.objects.select_for_update()
            .filter(name__startswith=PREFIX, enabled=True)
            .exclude(name__in=[spec.name for spec in definitions])
        )
        for task in stale:
            task.enabled = False
            task.save()  # save(), not update(): beat is told the schedule changed
            result["disabled"].append(task.name)
    return result
