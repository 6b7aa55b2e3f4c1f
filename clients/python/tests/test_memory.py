"""The SDK against the real service: Django's WSGI app in process (httpx's WSGI
transport) and a live server on a real socket, with the project's real
PostgreSQL and Redis. The service answers from other threads or connections,
so these tests commit (transaction=True)."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import anyio
import httpx
import pytest
from piper_client import (
    APIConnectionError,
    AsyncMemory,
    AuthenticationError,
    Conflict,
    Memory,
    NotFound,
    PermissionDenied,
    RateLimited,
    ValidationError,
)

from conftest import make_client
from intentions.models import Intention, IntentionStatus
from piper.tenancy.models import Scope
from piper.tenancy.services import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)

NOW = datetime.now(UTC).replace(microsecond=0)


def in_process(raw_key: str, **options) -> Memory:
    from django.core.wsgi import get_wsgi_application

    transport = httpx.WSGITransport(app=get_wsgi_application())
    return Memory("http://testserver", raw_key, transport=transport, **options)


@pytest.fixture
def agent_key(db):
    client = make_client(f"sdk-{uuid.uuid4().hex[:8]}")
    return client


# ------------------------------------------------------------------ end to end


def test_every_memory_function_end_to_end(agent_key):
    with in_process(agent_key.raw_key) as memory:
        me = memory.agent()
        assert me.id == str(agent_key.agent.pk) and me.raw_response.status_code == 200

        event = memory.events.append("note.taken", {"text": "hello"}, occurred_at=NOW.isoformat())
        assert memory.events.get(event.id).payload == {"text": "hello"}
        assert [e.id for e in memory.events.iter(event_type="note.taken")] == [event.id]

        memory.facts.assert_("billing export", "deadline", "March 3")
        written = memory.facts.assert_("billing export", "deadline", "March 5")
        assert written.raw_response.status_code in (200, 201)
        assert memory.facts.current("billing export").values == ["March 5"]
        chain = memory.facts.chain("billing export", "deadline")
        assert "March 3" in chain.values and chain.values[-1] == "March 5"
        past = memory.facts.as_of("billing export", "deadline", NOW - timedelta(days=3650))
        assert past.values == []

        episode = memory.episodes.record(
            occurred_at=NOW.isoformat(),
            summary="The nightly billing export failed because the disk was full",
            session_id="night-1",
            outcome="failure",
        )
        assert memory.episodes.get(episode.id).summary.startswith("The nightly billing export")
        assert [e.id for e in memory.episodes.iter(session_id="night-1")] == [episode.id]
        found = memory.episodes.search("billing export disk full")
        assert episode.id in {h["episode"]["id"] for h in found.hits + found.near_misses}

        promise = memory.intentions.create(
            "Tell finance the export is fixed", trigger_type="manual"
        )
        assert memory.intentions.get(promise.id).status == "active"
        assert list(memory.intentions.due()) == []
        Intention.objects.filter(pk=promise.id).update(status=IntentionStatus.DUE)
        assert [i.id for i in memory.intentions.due()] == [promise.id]
        assert memory.intentions.complete(promise.id).status == "completed"
        other = memory.intentions.create("Call the bank", trigger_type="manual")
        assert memory.intentions.cancel(other.id, reason="not needed").status == "cancelled"

        thread = memory.working_state.thread("billing-fix")
        saved = memory.working_state.checkpoint(
            thread.id, {"goal": "Fix the export", "next_action": "Rerun it"}, based_on=0
        )
        assert memory.working_state.get(thread.id).state["next_action"] == "Rerun it"
        with pytest.raises(Conflict) as stale:
            memory.working_state.checkpoint(thread.id, {"goal": "x"}, based_on=0)
        assert stale.value.code == "stale_version"
        memory.working_state.handover(thread.id, to_session="day-2", note="rerun it")
        resumed = memory.working_state.resume(thread.id, session_id="day-2")
        assert resumed.checkpoint.version == saved.version
        memory.working_state.acknowledge(thread.id, session_id="day-2")

        block = memory.context(task="Rerun the billing export", thread_id=thread.id)
        assert [i.text for i in block.section("working_state")][0] == "next action: Rerun it"
        assert "March 5" in block.text and "March 3" not in block.text
        text = memory.context(task="Rerun the billing export", thread_id=thread.id, as_text=True)
        assert text == block.text

        from episodes.services import episodes_embed

        episodes_embed(episode_ids=[episode.id])  # what the embedding task does after commit
        answer = memory.recall("What happened to the nightly billing export?")
        assert answer.evidence and answer.evidence[0].id == episode.id
        feedback = memory.recall_feedback(answer.id, used=[episode.id], outcome="success")
        assert feedback.trace == answer.id

        match = memory.skills.match("rerun the billing export")
        assert match.no_applicable_skill is True


def test_erasure_needs_an_admin_key_and_previews_first(agent_key):
    _, admin = api_key_create(agent=agent_key.agent, name="ops", scopes=[Scope.ADMIN])
    with in_process(agent_key.raw_key) as memory, in_process(admin) as ops:
        memory.facts.assert_("Bob", "phone", "555-0101")
        with pytest.raises(PermissionDenied):
            memory.erasure.request(reason="asked", subject="Bob")
        preview = ops.erasure.request(reason="asked", subject="Bob")
        assert preview.dry_run is True and preview.events >= 1
        done = ops.erasure.request(reason="asked", subject="Bob", dry_run=False)
        assert ops.erasure.get(done.id).residue_found == 0
        with pytest.raises(NotFound):
            memory.facts.current("Bob")


# ---------------------------------------------------------------- the plumbing


def test_a_retried_write_with_its_key_is_written_once(agent_key):
    with in_process(agent_key.raw_key) as memory:
        body = {"trigger_type": "manual", "idempotency_key": "report-1"}
        first = memory.intentions.create("Send the report", **body)
        again = memory.intentions.create("Send the report", **body)
        assert again.id == first.id
        assert again.raw_response.headers.get("Idempotent-Replayed") == "true"
        assert Intention.objects.filter(agent=agent_key.agent).count() == 1


def test_every_write_carries_one_idempotency_key_kept_across_retries(agent_key):
    seen: list[tuple[str, str | None]] = []

    def record(request: httpx.Request) -> None:
        seen.append((request.method, request.headers.get("Idempotency-Key")))

    _, slow = api_key_create(agent=agent_key.agent, name="slow", rate_per_minute=1)
    with in_process(slow, max_retries=2) as memory:
        memory._http.event_hooks["request"].append(record)
        memory._options = memory._options.with_(max_wait=0.05, backoff=0.01)
        memory.intentions.create("First", trigger_type="manual")  # uses the one request
        started = time.perf_counter()
        with pytest.raises(RateLimited) as limited:
            memory.intentions.create("Second", trigger_type="manual")
        assert time.perf_counter() - started >= 0.1  # waited twice (capped Retry-After)
    assert limited.value.status == 429 and limited.value.retry_after > 0
    keys = [key for method, key in seen if method == "POST"]
    assert len(keys) == 4 and keys[1] == keys[2] == keys[3] != keys[0]
    assert Intention.objects.filter(agent=agent_key.agent, description="Second").count() == 0


def test_pages_are_followed_lazily(agent_key):
    with in_process(agent_key.raw_key) as memory:
        made = [memory.intentions.create(f"Task {n}", trigger_type="manual").id for n in range(5)]
        pages: list[str] = []
        memory._http.event_hooks["request"].append(lambda r: pages.append(str(r.url)))
        listed = memory.intentions.iter(limit=2)
        assert pages == []  # nothing asked until iterated
        assert sorted(i.id for i in listed) == sorted(made)
        assert len(pages) == 3


def test_the_apis_errors_are_typed_with_its_code_and_message(agent_key):
    with in_process("pm_not-a-key") as stranger:
        with pytest.raises(AuthenticationError) as unknown:
            stranger.agent()
        assert unknown.value.message == "the API key is unknown or has been revoked"
    _, read_only = api_key_create(agent=agent_key.agent, name="ro", scopes=[Scope.READ])
    with in_process(read_only) as reader:
        with pytest.raises(PermissionDenied) as denied:
            reader.intentions.create("x", trigger_type="manual")
        assert "lacks the 'write' scope" in denied.value.message
    other = make_client("sdk-other")
    with in_process(agent_key.raw_key) as mine, in_process(other.raw_key) as theirs:
        promise = mine.intentions.create("Mine", trigger_type="manual")
        with pytest.raises(NotFound) as missing:
            theirs.intentions.complete(promise.id)
        assert missing.value.status == 404 and missing.value.code == "not_found"
        with pytest.raises(ValidationError) as bad:
            mine.intentions.create("", trigger_type="time")
        assert bad.value.code == "invalid" and "description" in bad.value.details
        assert bad.value.response.status_code == 400


def test_the_constructor_makes_no_call_and_a_dead_service_is_a_connection_error():
    memory = Memory("http://127.0.0.1:9", "pm_whatever", max_retries=1)  # nothing listens
    memory._options = memory._options.with_(backoff=0.01)
    with pytest.raises(APIConnectionError):
        memory.agent()
    memory.close()


# ------------------------------------------------------------ a real socket


def test_memory_and_async_memory_over_a_live_server(agent_key, live_server):
    with Memory(live_server.url, agent_key.raw_key) as memory:
        made = memory.intentions.create("Water the plants", trigger_type="manual")
        assert made.raw_response.status_code == 201

    async def main():
        async with AsyncMemory(live_server.url, agent_key.raw_key) as memory:
            got = await memory.intentions.get(made.id)
            listed = [i.id async for i in memory.intentions.iter(limit=1)]
            block = await memory.context(task="water the plants", sections=["intentions"])
            with pytest.raises(NotFound):
                await memory.intentions.get(str(uuid.uuid4()))
            return got, listed, block

    got, listed, block = anyio.run(main)
    assert got.description == "Water the plants" and listed == [made.id]
    assert block.sections == [] and block.budget["unit"] == "tokens"


def test_a_per_call_timeout():
    import socket

    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with Memory(f"http://127.0.0.1:{port}", "pm_whatever") as memory:
            hurried = memory.with_options(timeout=0.2, max_retries=0)
            started = time.perf_counter()
            with pytest.raises(APIConnectionError) as timed_out:
                hurried.agent()
            assert time.perf_counter() - started < 2
            assert "Timeout" in str(timed_out.value)
            assert memory._options.timeout == 10.0  # the view's options, not the client's
