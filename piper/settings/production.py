"""Production: everything from the environment, no secret defaults."""

import os

from django.core.exceptions import ImproperlyConfigured

from .base import *  # noqa: F403
from .base import env_bool, env_int

if not SECRET_KEY:  # noqa: F405
    raise ImproperlyConfigured("DJANGO_SECRET_KEY must be set in production")
if not ALLOWED_HOSTS:  # noqa: F405
    raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set in production")
if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
    raise ImproperlyConfigured("DATABASE_URL and REDIS_URL must be set in production")

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Served over HTTPS (behind a proxy that sets X-Forwarded-Proto), the default:
# secure cookies, plain HTTP redirected, and browsers told to stay on HTTPS
# (HSTS, an hour unless DJANGO_HSTS_SECONDS says longer). False only for the
# admin over plain http://localhost. /healthz is never redirected: the
# container's health check calls it over HTTP from inside.
HTTPS = env_bool("DJANGO_SECURE_COOKIES", True)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_SSL_REDIRECT = HTTPS
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 3600) if HTTPS else 0
# includeSubDomains and preload bind every subdomain of the operator's domain, for
# months: theirs to decide, off unless set (so check --deploy is not asked to nag).
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [
    *([] if SECURE_HSTS_INCLUDE_SUBDOMAINS else ["security.W005"]),
    *([] if SECURE_HSTS_PRELOAD else ["security.W021"]),
]
CSRF_TRUSTED_ORIGINS = [
    o for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o
]
