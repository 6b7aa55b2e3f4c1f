"""What the SDK adds around each call, against the real service: Idempotency-Key
on writes and its replay, retries that honour Retry-After, lazy cursor pages,
typed errors, timeouts, and no request before the first call."""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from django.conf import settings
from django_redis import get_redis_connection
from piper_client import (
    APIConnectionError,
    AuthenticationError,
    Memory,
    NotFound,
    PermissionDenied,
    RateLimited,
    ValidationError,
)
from piper_client._http import Call

from intentions.models import Intention

from .sdk_support import in_process, make_keys, sent

pytestmark = pytest.mark.django_db(transaction=True)


def fast(memory: Memory, *, max_wait: float = 0.3) -> Memory:
    """Waits short enough for a test (Retry-After capped at max_wait)."""
    memory._options = memory._options.with_(backoff=0.01, max_wait=max_wait)
    return memory


def test_a_write_sent_twice_with_one_key_is_written_once(memory, keys):
    first = memory.intentions.create(
        "Send the report", trigger_type="manual", idempotency_key="r-1"
    )
    again = memory.intentions.create(
        "Send the report", trigger_type="manual", idempotency_key="r-1"
    )
    assert again.id == first.id and again.model_dump() == first.model_dump()
    assert again.raw_response.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.raw_response.headers
    assert Intention.objects.filter(agent=keys.agent).count() == 1


def test_every_write_gets_its_own_key_and_reads_none(memory):
    requests = sent(memory)
    memory.intentions.create("One", trigger_type="manual")
    memory.intentions.create("Two", trigger_type="manual")
    list(memory.intentions.list())
    one, two, listing = (r.headers.get("Idempotency-Key") for r in requests)
    assert uuid.UUID(one).version == 4 and one != two and listing is None


def test_a_429_is_retried_after_retry_after_with_the_same_key(keys):
    with fast(in_process(keys.key(rate_per_minute=1)), max_wait=0.3) as memory:
        requests = sent(memory)

        def window_passes(response):
            # What the end of the minute does: the key's throttle counter starts again.
            if response.status_code == 429:
                redis = get_redis_connection("default")
                prefix = settings.CACHES["default"]["KEY_PREFIX"]
                redis.delete(*redis.keys(f"{prefix}:throttle:*"))

        memory.intentions.create("First", trigger_type="manual")  # the minute's one request
        memory._http.event_hooks["response"].append(window_passes)
        started = time.perf_counter()
        second = memory.intentions.create("Second", trigger_type="manual")
        waited = time.perf_counter() - started
    assert second.raw_response.status_code == 201
    assert 0.3 <= waited < 2  # the server's Retry-After (up to 60 s), capped at max_wait
    posts = [r.headers["Idempotency-Key"] for r in requests]
    assert len(posts) == 3 and posts[1] == posts[2] != posts[0]
    assert Intention.objects.filter(agent=keys.agent, description="Second").count() == 1


def test_retries_run_out_into_rate_limited(keys):
    with fast(in_process(keys.key(rate_per_minute=1), max_retries=2), max_wait=0.05) as memory:
        memory.agent()
        requests = sent(memory)
        with pytest.raises(RateLimited) as limited:
            memory.intentions.create("Later", trigger_type="manual")
    error = limited.value
    assert (error.status, error.code, len(requests)) == (429, "rate_limited", 3)
    assert 0 < error.retry_after <= 60 and error.details["retry_after_seconds"] >= 1
    assert error.message.startswith("too many requests for this API key")
    assert len({r.headers["Idempotency-Key"] for r in requests}) == 1


def test_a_refused_connection_is_retried_then_raised():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with fast(Memory(f"http://127.0.0.1:{port}", "pm_x", max_retries=2)) as memory:
        requests = sent(memory)
        with pytest.raises(APIConnectionError) as refused:
            memory.intentions.create("x", trigger_type="manual")
    assert len(requests) == 3 and refused.value.status is None
    assert len({r.headers["Idempotency-Key"] for r in requests}) == 1


def test_pages_are_fetched_lazily_as_the_items_run_out(memory):
    made = [memory.intentions.create(f"Task {n}", trigger_type="manual").id for n in range(5)]
    requests = sent(memory)
    pages = memory.intentions.list(limit=2, trigger_type="manual")
    assert requests == []  # nothing is asked before the first item
    assert next(pages).id in made and len(requests) == 1
    assert len(list(pages)) == 4 and len(requests) == 3
    assert all(r.url.params["trigger_type"] == "manual" for r in requests)
    assert "cursor" in requests[1].url.params and requests[1].url.path == "/api/v1/intentions"
    assert sorted(i.id for i in memory.intentions.list(limit=2)) == sorted(made)


def test_each_refusal_is_its_typed_error_with_the_apis_code_and_message(memory, keys):
    with in_process("pm_not-a-key") as stranger, pytest.raises(AuthenticationError) as unknown:
        stranger.agent()
    assert (unknown.value.status, unknown.value.code) == (401, "not_authenticated")
    assert unknown.value.message == "the API key is unknown or has been revoked"

    with in_process(keys.read) as reader, pytest.raises(PermissionDenied) as denied:
        reader.intentions.create("x", trigger_type="manual")
    assert denied.value.status == 403 and "lacks the 'write' scope" in denied.value.message

    mine = memory.intentions.create("Mine", trigger_type="manual")
    with in_process(make_keys().write) as theirs, pytest.raises(NotFound) as missing:
        theirs.intentions.complete(mine.id)
    assert (missing.value.status, missing.value.code) == (404, "not_found")

    with pytest.raises(ValidationError) as bad:
        memory.intentions.create("", trigger_type="time")
    error = bad.value
    assert (error.status, error.code) == (400, "invalid")
    assert error.message == error.response.json()["error"]["message"]
    assert error.message.startswith("description: ") and "description" in error.details
    assert str(error) == f"400 invalid: {error.message}"
    with pytest.raises(ValidationError) as bad_cursor:  # a cursor the API never issued
        memory._run(Call("GET", "/intentions", params={"cursor": "nope"}), None)
    assert bad_cursor.value.code == "invalid_cursor"


def test_a_call_can_have_its_own_timeout():
    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        with Memory(f"http://127.0.0.1:{silent.getsockname()[1]}", "pm_x", max_retries=0) as memory:
            started = time.perf_counter()
            with pytest.raises(APIConnectionError) as timed_out:
                memory.agent(timeout=0.2)
            assert time.perf_counter() - started < 2 and "Timeout" in str(timed_out.value)
            hurried = memory.with_options(timeout=0.2)
            with pytest.raises(APIConnectionError):
                hurried.intentions.get("x")
            assert (memory._options.timeout, hurried._options.timeout) == (10.0, 0.2)


def test_the_constructor_makes_no_request():
    class Refuse:  # a transport that fails the test on any request
        def handle_request(self, request):
            raise AssertionError(f"the constructor sent {request.method} {request.url}")

        def close(self):
            pass

    import httpx

    class RefuseTransport(Refuse, httpx.BaseTransport):
        pass

    with Memory("http://nowhere.invalid", "pm_x", transport=RefuseTransport()) as memory:
        assert memory.base_url == "http://nowhere.invalid"
        assert memory.facts is not None and memory.with_options(timeout=1).facts is not None
