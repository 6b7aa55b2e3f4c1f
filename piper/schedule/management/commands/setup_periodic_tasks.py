"""Create or update every periodic task celery-beat runs. Idempotent; run on every deploy."""

from django.core.management.base import BaseCommand

from piper.schedule.periodic import PREFIX
from piper.schedule.services import periodic_tasks_sync


class Command(BaseCommand):
    help = (
        "Create or update the periodic tasks celery-beat runs (django-celery-beat's "
        f"database scheduler). Idempotent; disables '{PREFIX}*' tasks no longer defined."
    )

    def handle(self, *args, **options):
        result = periodic_tasks_sync()
        for state in ("created", "updated", "unchanged", "disabled"):
            for name in result[state]:
                self.stdout.write(f"{state:<10} {name}")
