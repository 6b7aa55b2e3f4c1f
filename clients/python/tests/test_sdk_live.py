"""Memory and AsyncMemory on a real socket (pytest-django's live_server), and
AsyncMemory in process through a blocking WSGI transport run in a thread."""

from __future__ import annotations

import uuid

import anyio
import pytest
from piper_client import AsyncMemory, Memory, NotFound, ValidationError

from .sdk_support import NOW, in_process_async

pytestmark = pytest.mark.django_db(transaction=True)


def test_memory_over_a_live_server(keys, live_server):
    with Memory(live_server.url, keys.write) as memory:
        made = memory.intentions.create("Water the plants", trigger_type="manual")
        assert made.raw_response.status_code == 201
        assert memory.intentions.get(made.id).description == "Water the plants"
        memory.facts.assert_("plants", "watered", False)
        assert memory.facts.current("plants").values == [False]
        with pytest.raises(NotFound):
            memory.intentions.get(str(uuid.uuid4()))


def test_async_memory_over_a_live_server(keys, live_server):
    async def main():
        async with AsyncMemory(live_server.url, keys.write) as memory:
            made = [
                await memory.intentions.create(f"Task {n}", trigger_type="manual") for n in range(3)
            ]
            listed = [i.id async for i in memory.intentions.list(limit=2)]
            replay = await memory.events.append("a.b", {}, idempotency_key="once")
            again = await memory.events.append("a.b", {}, idempotency_key="once")
            with pytest.raises(ValidationError) as bad:
                await memory.episodes.record(occurred_at="yesterday", summary="x")
            return made, listed, replay, again, bad.value

    made, listed, replay, again, bad = anyio.run(main)
    assert sorted(listed) == sorted(i.id for i in made)
    assert again.id == replay.id and again.raw_response.headers["Idempotent-Replayed"] == "true"
    assert bad.code == "invalid" and "occurred_at" in bad.details


def test_async_memory_in_process_over_a_blocking_transport(keys):
    async def main():
        async with in_process_async(keys.write) as memory:
            episode = await memory.episodes.record(occurred_at=NOW, summary="Rotated the logs")
            got = await memory.episodes.get(episode.id, timeout=5)
            block = await memory.context(task="rotate the logs", sections=["episodes"])
            return episode, got, block

    episode, got, block = anyio.run(main)
    assert got.summary == "Rotated the logs" and got.id == episode.id
    assert block.budget.unit == "tokens"
