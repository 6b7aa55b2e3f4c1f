"""pytest: real PostgreSQL + pgvector and real Redis, as everywhere else."""

import os

from .base import *  # noqa: F403

SECRET_KEY = "test-only-not-secret"
ALLOWED_HOSTS = ["*"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# A separate cache namespace so tests never read a developer's throttle counters.
CACHES["default"]["KEY_PREFIX"] = f"piper-test-{os.getpid()}"  # noqa: F405
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405
