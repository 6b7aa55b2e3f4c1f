"""The periodic task schedule: which task celery-beat runs when, for every app.

Wiring, like ``piper.celery`` and ``piper.tasks``: it names the tasks of the
apps below it. An installed app so that ``manage.py setup_periodic_tasks``
is found; it has no models.
"""
