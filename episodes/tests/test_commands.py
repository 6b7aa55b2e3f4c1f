"""embed_backfill: every row without a vector gets one, agent by agent, with a progress bar."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from episodes.models import Episode, SourceChunk
from episodes.services import episodes_embed
from episodes.tests.factories import EpisodeFactory, HashEmbedder, SourceFactory, episodes_batch
from piper import embeddings
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def hash_embedder(settings, monkeypatch) -> HashEmbedder:
    """The process's embedder is a HashEmbedder for this test (the real model is slow)."""
    settings.PIPER_EMBEDDER = "episodes.tests.factories.HashEmbedder"
    monkeypatch.setattr(embeddings, "_singleton", None)
    return embeddings.get_embedder()


@pytest.fixture
def rows():
    a, b = AgentFactory(name="backfill-a"), AgentFactory(name="backfill-b")
    return {
        "a": a,
        "b": b,
        "a_episodes": episodes_batch(a, [{"summary": f"a {i}"} for i in range(3)]),
        "b_episodes": [EpisodeFactory(agent=b, summary="b 0")],
        "a_source": SourceFactory(agent=a, content="One sentence. Another sentence."),
    }


def backfill(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("embed_backfill", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def missing(model) -> int:
    return model.objects.filter(embedding__isnull=True).count()


def test_embeds_every_row_without_a_vector(hash_embedder, rows):
    out, err = backfill()
    lines = out.splitlines()
    assert lines[:2] == [
        "episodes: 4 embedded with test/hash-embedder",
        "chunks: 1 embedded with test/hash-embedder",
    ]
    assert lines[2].startswith("done in ")
    assert "episodes: 100%" in err and "4/4" in err
    assert "chunks: 100%" in err and "1/1" in err
    assert (missing(Episode), missing(SourceChunk)) == (0, 0)
    for episode in Episode.objects.all():
        assert list(episode.embedding) == hash_embedder.vector(episode.embedding_text())
        assert episode.embedding_model == "test/hash-embedder"
    # Nothing left: a second run embeds nothing and calls the model not once more.
    calls = len(hash_embedder.calls)
    out, _ = backfill("--no-progress")
    assert out.splitlines()[:2] == [
        "episodes: 0 embedded with test/hash-embedder",
        "chunks: 0 embedded with test/hash-embedder",
    ]
    assert len(hash_embedder.calls) == calls


def test_one_agent_one_kind_in_small_batches(hash_embedder, rows):
    out, _ = backfill("--agent", "backfill-a", "--kind", "episodes", "--batch-size", "2")
    assert out.splitlines()[0] == "episodes: 3 embedded with test/hash-embedder"
    assert [len(texts) for texts in hash_embedder.calls] == [2, 1]
    assert Episode.objects.filter(agent=rows["b"], embedding__isnull=True).count() == 1
    assert missing(SourceChunk) == 1
    out, _ = backfill("--agent", str(rows["b"].pk), "--kind", "chunks")
    assert out.splitlines()[0] == "chunks: 0 embedded with test/hash-embedder"


def test_reembed_stale_replaces_another_models_vectors(hash_embedder, rows):
    old = HashEmbedder("old-model")
    episodes_embed(episode_ids=[e.pk for e in rows["a_episodes"]], embedder=old)
    out, _ = backfill("--agent", "backfill-a", "--kind", "episodes")
    assert out.splitlines()[0] == "episodes: 0 embedded with test/hash-embedder"
    assert set(
        Episode.objects.filter(agent=rows["a"]).values_list("embedding_model", flat=True)
    ) == {"old-model"}
    out, _ = backfill("--agent", "backfill-a", "--kind", "episodes", "--reembed-stale")
    assert out.splitlines()[0] == "episodes: 3 embedded with test/hash-embedder"
    for episode in Episode.objects.filter(agent=rows["a"]):
        assert episode.embedding_model == "test/hash-embedder"
        assert list(episode.embedding) == hash_embedder.vector(episode.embedding_text())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "nobody"], "no agent 'nobody'"),
        (["--batch-size", "0"], "--batch-size must be at least 1"),
    ],
)
def test_bad_arguments(hash_embedder, rows, args, message):
    with pytest.raises(CommandError, match=message):
        backfill(*args)
    assert missing(Episode) == 4


@pytest.mark.slow
def test_with_the_real_model(rows):
    backfill("--agent", "backfill-b", "--no-progress")
    [episode] = Episode.objects.filter(agent=rows["b"])
    embedder = embeddings.get_embedder()
    assert episode.embedding_model == embedder.name
    expected = embedder.embed_one(episode.embedding_text())
    assert max(abs(x - y) for x, y in zip(episode.embedding, expected, strict=True)) < 1e-6
