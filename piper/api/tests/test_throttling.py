"""Per-key rate limit: a fixed one-minute window counted in Redis."""

import pytest

from conftest import make_client
from ledger.tests.helpers import error, ledger_state
from piper.api import throttling

pytestmark = pytest.mark.django_db

# 45 s before the end of a minute window.
WINDOW_START = 1_800_000_000 - 1_800_000_000 % 60
NOW = WINDOW_START + 15


class FrozenClock:
    def __init__(self, now: float):
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    frozen = FrozenClock(NOW)
    monkeypatch.setattr(throttling, "time", frozen)
    return frozen


def test_fourth_request_in_a_minute_is_429(clock):
    client = make_client("throttled", rate_per_minute=3)
    for _ in range(3):
        assert client.get("/api/v1/events").status_code == 200
    before = ledger_state()
    response = client.post("/api/v1/events", {"event_type": "a.b"}, format="json")
    assert response.status_code == 429
    assert response["Retry-After"] == "45"
    assert response.json() == error(
        "rate_limited",
        "too many requests for this API key; retry in 45 s",
        {"retry_after_seconds": 45},
    )
    assert ledger_state() == before


def test_the_next_window_starts_afresh(clock):
    client = make_client("throttled", rate_per_minute=1)
    assert client.get("/api/v1/events").status_code == 200
    assert client.get("/api/v1/events").status_code == 429
    clock.now = WINDOW_START + 60
    assert client.get("/api/v1/events").status_code == 200


def test_limits_are_per_key(clock):
    limited = make_client("throttled", rate_per_minute=1)
    other = make_client("unthrottled")
    assert limited.get("/api/v1/events").status_code == 200
    assert limited.get("/api/v1/events").status_code == 429
    assert other.get("/api/v1/events").status_code == 200


def test_default_rate_applies_without_a_per_key_rate(clock, settings):
    settings.PIPER_DEFAULT_RATE_PER_MINUTE = 2
    client = make_client("default-rate")
    assert [client.get("/api/v1/agent").status_code for _ in range(3)] == [200, 200, 429]


def test_unauthenticated_requests_are_refused_before_counting(clock, anonymous_client):
    assert anonymous_client.get("/api/v1/events").status_code == 401


class Unreachable:
    """A Redis that refuses every connection."""

    def pipeline(self):
        return self

    def incr(self, *args):
        pass

    def expire(self, *args):
        pass

    def execute(self):
        import redis

        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


def test_without_redis_requests_are_let_through_uncounted(clock, monkeypatch, caplog):
    client = make_client("throttled", rate_per_minute=1)
    assert client.get("/api/v1/events").status_code == 200
    reachable = throttling.get_redis_connection
    monkeypatch.setattr(throttling, "get_redis_connection", lambda alias: Unreachable())
    monkeypatch.setattr(throttling, "_last_warning", 0.0)
    clock.monotonic = lambda: 1_000.0
    # Over its limit, and a write too: Redis is not the truth of what is written.
    assert client.get("/api/v1/events").status_code == 200
    written = client.post("/api/v1/events", {"event_type": "a.b"}, format="json")
    assert written.status_code == 201
    warnings = [r for r in caplog.records if r.name == "piper.api.throttling"]
    assert len(warnings) == 1  # once a minute, not once a request
    assert "Redis does not answer" in warnings[0].getMessage()
    monkeypatch.setattr(throttling, "get_redis_connection", reachable)
    assert client.get("/api/v1/events").status_code == 429  # counted again
