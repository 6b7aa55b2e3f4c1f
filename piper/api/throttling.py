"""Per-key rate limit: a fixed one-minute window counted in Redis (one INCR per request)."""

import time

from django.conf import settings
from django_redis import get_redis_connection
from rest_framework.throttling import BaseThrottle

from piper.tenancy.models import ApiKey

WINDOW_SECONDS = 60


class ApiKeyRateThrottle(BaseThrottle):
    def allow_request(self, request, view) -> bool:
        api_key = request.auth
        if not isinstance(api_key, ApiKey):
            return True  # authentication answers first
        limit = api_key.rate_per_minute or settings.PIPER_DEFAULT_RATE_PER_MINUTE
        now = time.time()
        window = int(now // WINDOW_SECONDS)
        counter = f"{settings.CACHES['default']['KEY_PREFIX']}:throttle:{api_key.pk}:{window}"
        redis = get_redis_connection("default")
        pipe = redis.pipeline()
        pipe.incr(counter)
        pipe.expire(counter, WINDOW_SECONDS * 2)
        count, _ = pipe.execute()
        self._wait = WINDOW_SECONDS - (now % WINDOW_SECONDS)
        return count <= limit

    def wait(self) -> float:
        return getattr(self, "_wait", WINDOW_SECONDS)
