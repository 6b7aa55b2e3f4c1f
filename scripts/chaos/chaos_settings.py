"""Settings for the concurrency scripts (scripts/chaos/): the local settings, with
Celery tasks on a queue of their own, so a developer's worker never takes a
task about the chaos database and the chaos worker never takes theirs.

The database (PIPER_DB_NAME) and cache prefix (PIPER_CACHE_PREFIX) are set by
_stack.env(); this module only adds what has no environment knob.
"""

import os

from piper.settings.local import *  # noqa: F403

CELERY_TASK_DEFAULT_QUEUE = os.environ.get("PIPER_CHAOS_QUEUE", "piper-chaos")
# The sandbox's tasks on the chaos queue, or on a queue of their own beside it as
# the Procfile's worker has them (-Q celery,sandbox): worker_kill.py sets it.
SKILLS_SANDBOX_QUEUE = os.environ.get("PIPER_CHAOS_SANDBOX_QUEUE") or CELERY_TASK_DEFAULT_QUEUE
CELERY_TASK_ROUTES = {"skills.sandbox.*": {"queue": SKILLS_SANDBOX_QUEUE}}
