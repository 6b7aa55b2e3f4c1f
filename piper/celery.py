"""The Celery app: configured from Django settings (CELERY_* names), tasks autodiscovered."""

import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "piper.settings.local")

app = Celery("piper")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
# piper/tasks.py is not an installed app's tasks module: name it explicitly.
app.autodiscover_tasks(["piper"])


@worker_ready.connect
def _start_heartbeat(sender=None, **kwargs):
    from piper.heartbeat import start_worker_heartbeat

    start_worker_heartbeat(sender.hostname)
