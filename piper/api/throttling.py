"""Per-key rate limit: a fixed one-minute window counted in Redis (one INCR per request).

Redis is not the truth of anything a request writes (PostgreSQL is): when it
does not answer — restarted, flushed, unreachable — requests are let through
uncounted rather than failed, and the lapse is logged (at most once a minute
per process). A flushed Redis starts every window's count again from zero.
"""

import logging
import time

from django.conf import settings
from django_redis import get_redis_connection
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

from piper.tenancy.models import ApiKey

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60
_last_warning = 0.0


def _uncounted(exc: Exception) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= WINDOW_SECONDS:
        _last_warning = now
        logger.warning("rate limits are not counted: Redis does not answer (%s)", exc)


class ApiKeyRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        api_key = request.auth
        if not isinstance(api_key, ApiKey):
            return True  # authentication answers first
        limit = api_key.rate_per_minute or settings.PIPER_DEFAULT_RATE_PER_MINUTE
        now = time.time()
        window = int(now // WINDOW_SECONDS)
        counter = f"{settings.CACHES['default']['KEY_PREFIX']}:throttle:{api_key.pk}:{window}"
        try:
            redis = get_redis_connection("default")
            pipe = redis.pipeline()
            pipe.incr(counter)
            pipe.expire(counter, WINDOW_SECONDS * 2)
            count, _ = pipe.execute()
        except RedisError as exc:
            _uncounted(exc)
            return True
        self._wait = WINDOW_SECONDS - (now % WINDOW_SECONDS)
        return count <= limit

    def wait(self) -> float:
        return getattr(self, "_wait", WINDOW_SECONDS)
