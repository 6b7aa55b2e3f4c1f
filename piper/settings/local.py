"""A developer's machine: `make run`."""

from .base import *  # noqa: F403
from .base import env_bool

DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = SECRET_KEY or "local-development-only-not-secret"  # noqa: F405
ALLOWED_HOSTS = ALLOWED_HOSTS or ["localhost", "127.0.0.1", "[::1]", "testserver"]  # noqa: F405
