"""pytest: real PostgreSQL + pgvector and real Redis, as everywhere else."""

import os

from .base import *  # noqa: F403

SECRET_KEY = "test-only-not-secret"
ALLOWED_HOSTS = ["*"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405

# Two test runs on one machine (or CI beside a developer) must not share a
# database, throttle counters or a Celery queue. The values go into the
# environment so a worker process started by the tests inherits them.
RUN_ID = os.environ.setdefault("PIPER_TEST_RUN_ID", str(os.getpid()))
# Under pytest-xdist every worker inherits the controller's id: each adds its
# own name (gw0, gw1…), as pytest-django adds it to the test database's. The
# Celery processes a worker starts inherit both, hence the endswith.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if XDIST_WORKER and not RUN_ID.endswith(f"-{XDIST_WORKER}"):
    RUN_ID = os.environ["PIPER_TEST_RUN_ID"] = f"{RUN_ID}-{XDIST_WORKER}"
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("PIPER_TEST_DB", "test_piper")}  # noqa: F405
CACHES["default"]["KEY_PREFIX"] = f"piper-test-{RUN_ID}"  # noqa: F405
# Nobody consumes this queue: the celery_worker_process fixture points the
# default queue at its worker's own queue only while a test that asks for it
# runs (testsupport/plugin.py), so no other test's tasks run behind its back.
CELERY_TASK_DEFAULT_QUEUE = f"piper-test-{RUN_ID}"
# No routes: sandbox tasks follow the default queue wherever the fixture points
# it (a fixed route would be read once, when Celery builds its router).
CELERY_TASK_ROUTES = {}
# Tests hold their rows in an uncommitted transaction that another connection
# cannot see: the context's searches run in the test's thread (one test turns
# the worker threads on, with committed rows).
PIPER_CONTEXT_PARALLEL = False
# Test databases come and go: their chains' anchors are no one's to keep (a test
# that checks them gives a file of its own).
PIPER_LEDGER_ANCHORS = ""
