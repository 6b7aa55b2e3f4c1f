"""Episode tasks: thin and idempotent when run eagerly; and a real worker embedding what a
commit queued, with the real model, as production does."""

import time
import uuid

import pytest
from django.core.cache import cache

from episodes import tasks, upkeep
from episodes.models import Episode, SourceChunk
from episodes.services import episode_correct, episode_retract, episodes_record
from episodes.tests.factories import (
    EpisodeFactory,
    HashEmbedder,
    SourceFactory,
    draft,
    episodes_batch,
)
from ledger.services import source_register
from piper import embeddings
from piper.celery import app as celery_app
from piper.tenancy.tests.factories import AgentFactory

DOC = "\n\n".join(
    " ".join(f"Paragraph {p} sentence {s} explains one step of the runbook." for s in range(12))
    for p in range(3)
)


@pytest.fixture
def hash_embedder(settings, monkeypatch) -> HashEmbedder:
    """This process's embedder is a HashEmbedder (the real model is for the slow tests)."""
    settings.PIPER_EMBEDDER = "episodes.tests.factories.HashEmbedder"
    monkeypatch.setattr(embeddings, "_singleton", None)
    return embeddings.get_embedder()


@pytest.fixture
def eager(monkeypatch):
    """.delay() runs the task in this process, so what a commit queues happens in the test."""
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)


def unembedded() -> int:
    return Episode.objects.filter(embedding__isnull=True).count()


# ------------------------------------------------------------------ eager, in-process


@pytest.mark.django_db
class TestEager:
    def test_embed_episodes_once_and_a_redelivery_is_a_no_op(self, hash_embedder):
        episodes = episodes_batch(AgentFactory(), [{"summary": "one"}, {"summary": "two"}])
        ids = [str(e.pk) for e in episodes]
        assert tasks.embed_episodes(ids) == 2
        stamps = dict(Episode.objects.values_list("id", "embedded_at"))
        assert tasks.embed_episodes(ids) == 0
        assert dict(Episode.objects.values_list("id", "embedded_at")) == stamps
        assert len(hash_embedder.calls) == 1
        assert tasks.embed_episodes([str(uuid.uuid4())]) == 0

    def test_embed_chunks_once(self, hash_embedder):
        source = SourceFactory(agent=AgentFactory(), content=DOC)
        ids = [
            str(c) for c in SourceChunk.objects.filter(source=source).values_list("id", flat=True)
        ]
        assert tasks.embed_chunks(ids) == 3
        assert tasks.embed_chunks(ids) == 0
        assert SourceChunk.objects.filter(embedding_model="test/hash-embedder").count() == 3

    def test_chunk_source_once_and_a_missing_source_is_ignored(self):
        source, _ = source_register(agent=AgentFactory(), title="Doc", content=DOC)
        assert tasks.chunk_source(str(source.pk)) == 3
        assert tasks.chunk_source(str(source.pk)) == 0
        assert SourceChunk.objects.filter(source=source).count() == 3
        assert tasks.chunk_source(str(uuid.uuid4())) == 0

    def test_a_commit_queues_embedding_in_batches(
        self, hash_embedder, eager, django_capture_on_commit_callbacks
    ):
        agent = AgentFactory()
        with django_capture_on_commit_callbacks(execute=True):
            episodes_record(agent=agent, drafts=[draft(summary=f"e {i}") for i in range(300)])
        assert sorted(len(texts) for texts in hash_embedder.calls) == [44, 128, 128]
        assert unembedded() == 0

    def test_a_correction_embeds_the_corrected_text_and_withdrawn_rows_never(
        self, hash_embedder, eager, django_capture_on_commit_callbacks
    ):
        agent = AgentFactory()
        with django_capture_on_commit_callbacks(execute=True):
            old, other = episodes_record(
                agent=agent,
                drafts=[draft(summary="The export failed on db-7"), draft(summary="Not so")],
            )
        with django_capture_on_commit_callbacks(execute=True):
            new = episode_correct(
                agent=agent, episode_id=old.pk, changes={"summary": "The export failed on db-2"}
            )
            episode_retract(agent=agent, episode_id=other.pk, reason="never happened")
        assert hash_embedder.calls[-1] == ["The export failed on db-2"]
        assert dict(Episode.objects.values_list("id", "embedding_model")) == {
            old.pk: "",
            other.pk: "",
            new.pk: "test/hash-embedder",
        }
        assert tasks.embed_backlog(grace_seconds=0)["episodes"] == 0

    def test_a_source_registered_through_the_ledger_api_is_chunked_and_embedded(
        self, client_a, hash_embedder, eager, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            response = client_a.post(
                "/api/v1/sources", {"title": "Runbook", "content": DOC}, format="json"
            )
        assert response.status_code == 201
        chunks = SourceChunk.objects.filter(source_id=response.json()["id"])
        assert chunks.count() == 3
        assert set(chunks.values_list("embedding_model", flat=True)) == {"test/hash-embedder"}
        listed = client_a.get(f"/api/v1/sources/{response.json()['id']}/chunks").json()
        assert [c["embedded"] for c in listed["results"]] == [True, True, True]

    def test_the_backlog_sweep(self, hash_embedder):
        agent = AgentFactory()
        episodes_batch(agent, [{"summary": f"missed {i}"} for i in range(3)])
        source_register(agent=agent, title="missed", content=DOC)
        # Young rows are the after-commit tasks' business.
        assert tasks.embed_backlog() == {"episodes": 0, "chunks": 0, "sources": 0}
        assert tasks.embed_backlog(grace_seconds=0) == {"episodes": 3, "chunks": 3, "sources": 1}
        assert unembedded() == 0
        assert SourceChunk.objects.filter(embedding__isnull=True).count() == 0
        assert tasks.embed_backlog(grace_seconds=0) == {"episodes": 0, "chunks": 0, "sources": 0}

    def test_the_sweep_for_one_agent(self, hash_embedder):
        mine, theirs = AgentFactory(), AgentFactory()
        EpisodeFactory(agent=mine)
        EpisodeFactory(agent=theirs)
        done = tasks.embed_backlog(agent_id=str(mine.pk), grace_seconds=0)
        assert done == {"episodes": 1, "chunks": 0, "sources": 0}
        assert list(
            Episode.objects.filter(embedding__isnull=True).values_list("agent", flat=True)
        ) == [theirs.pk]

    def test_one_sweep_at_a_time_and_within_its_budget(self, hash_embedder):
        EpisodeFactory(agent=AgentFactory())
        assert cache.add(upkeep.SWEEP_LOCK_KEY, "1", timeout=60)
        try:
            assert tasks.embed_backlog(grace_seconds=0) == {
                "episodes": 0,
                "chunks": 0,
                "sources": 0,
            }
        finally:
            cache.delete(upkeep.SWEEP_LOCK_KEY)
        assert tasks.embed_backlog(grace_seconds=0, time_budget_seconds=0) == {
            "episodes": 0,
            "chunks": 0,
            "sources": 0,
        }
        assert unembedded() == 1
        assert tasks.embed_backlog(grace_seconds=0)["episodes"] == 1
        assert cache.get(upkeep.SWEEP_LOCK_KEY) is None  # released


# ------------------------------------------------------------------ a real worker


def wait_for(condition, timeout: float = 180, worker=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker is not None:
            worker.assert_alive()
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(
        "timed out" + (f"; the worker's log:\n{worker.log()}" if worker is not None else "")
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_embeds_an_episode_after_commit_and_a_redelivery_is_a_no_op(
    celery_worker_process,
):
    from conftest import make_client

    client = make_client("tasks-worker")
    response = client.post(
        "/api/v1/episodes",
        {
            "occurred_at": "2026-03-02T09:00:00Z",
            "summary": "The nightly batch job ran out of memory halfway through",
            "actor": "ci",
        },
        format="json",
    )
    assert response.status_code == 201
    assert response.json()["embedded"] is False  # found by full text until the worker is done
    episode_id = response.json()["id"]
    wait_for(
        lambda: client.get(f"/api/v1/episodes/{episode_id}").json()["embedded"],
        worker=celery_worker_process,
    )
    episode = Episode.objects.get(pk=episode_id)
    embedder = embeddings.get_embedder()
    assert episode.embedding_model == embedder.name
    assert episode.embedded_at is not None
    expected = embedder.embed_one(episode.embedding_text())
    assert max(abs(x - y) for x, y in zip(episode.embedding, expected, strict=True)) < 1e-5
    # The same task delivered again (acks_late): nothing written.
    assert tasks.embed_episodes.delay([episode_id]).get(timeout=120) == 0
    assert Episode.objects.get(pk=episode_id).embedded_at == episode.embedded_at


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_chunks_and_embeds_a_source_posted_to_the_ledger(celery_worker_process):
    from conftest import make_client

    client = make_client("tasks-worker-sources")
    response = client.post("/api/v1/sources", {"title": "Runbook", "content": DOC}, format="json")
    assert response.status_code == 201
    source_id = response.json()["id"]

    def all_embedded():
        chunks = client.get(f"/api/v1/sources/{source_id}/chunks").json()["results"]
        return len(chunks) == 3 and all(c["embedded"] for c in chunks)

    wait_for(all_embedded, worker=celery_worker_process)
    # A second delivery of the chunking task finds the chunks and writes nothing.
    assert tasks.chunk_source.delay(source_id).get(timeout=120) == 0
    assert SourceChunk.objects.filter(source_id=source_id).count() == 3
