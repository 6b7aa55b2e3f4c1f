"""Embedder load time, batch throughput, single-text latency and agreement, on CPU.

    .venv/bin/python bench/embedder_throughput.py [--texts episodes|short] [--sentences 2048]
        [--batch 64] [--rounds 5] [--threads N] [--agreement 3000]

Uses the embedder named by PIPER_EMBEDDER (default: the settings' default,
piper.embeddings.MiniLMOnnxEmbedder) through get_embedder(), exactly as the
service does, with the minimum of Django settings it needs (no database or
Redis is started). Reports:

* import: importing the runtime (torch + sentence_transformers, or onnxruntime
  + tokenizers; paid once per process);
* first embed: checksum of model.safetensors + model load + the first call
  (for the ONNX embedder, plus building its cached model if it is missing);
* throughput: texts/s in batches of --batch, one embed() call per batch; median
  and best of --rounds passes. --texts episodes (the default) embeds generated
  agent episodes of one to three sentences (bench/episode_texts.py, mean ~22
  words / ~36 word pieces); --texts short the 6-14-word sentences of the first
  measurements;
  also texts per CPU-second of the process (user + system time of all its
  threads), which a busy machine distorts less than the wall clock;
* single-text latency: embed_one() p50/p95 over 200 calls (query-time cost);
* --agreement N: for an embedder other than the torch one, the cosine between
  its vectors and torch MiniLMEmbedder's for N distinct episode texts (mean,
  1st percentile, min), and retrieval agreement: for 200 of them as queries,
  the share of torch's top 10 among the other texts that the embedder's top 10
  also holds.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUBJECTS = [
    "the batch job",
    "the deploy",
    "Alice",
    "the nightly export",
    "the agent",
    "the ECS task",
    "the billing service",
    "the user",
    "the scheduler",
    "the cache",
]
VERBS = [
    "failed",
    "finished",
    "asked about",
    "timed out on",
    "retried",
    "skipped",
    "prefers",
    "reported",
    "updated",
    "rolled back",
]
OBJECTS = [
    "the invoice run",
    "memory limits",
    "tea over coffee",
    "the staging database",
    "a flaky test",
    "the quarterly newsletter",
    "the router password",
    "disk quotas",
    "the OAuth token",
    "the Friday release",
]
TAILS = [
    "",
    "again",
    "after the last change",
    "halfway through",
    "on Tuesday",
    "without an error",
    "twice in a row",
    "according to the logs",
]


def sentences(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(
            part
            for part in (
                rng.choice(SUBJECTS),
                rng.choice(VERBS),
                rng.choice(OBJECTS),
                rng.choice(TAILS),
            )
            if part
        )
        for _ in range(n)
    ]


def texts_for(kind: str, n: int) -> list[str]:
    if kind == "short":
        return sentences(n)
    import episode_texts

    return [e.embedding_text() for e in episode_texts.episodes(n, seed=7)]


def agreement(embedder, n: int) -> str:
    import episode_texts
    import numpy as np

    from piper.embeddings import MiniLMEmbedder

    texts = [e.embedding_text() for e in episode_texts.distinct_texts(n, seed=11)]
    ours = np.asarray(embedder.embed(texts), dtype=np.float32)
    reference = np.asarray(MiniLMEmbedder().embed(texts), dtype=np.float32)
    cosine = (ours * reference).sum(axis=1)
    queries, docs = slice(0, 200), slice(200, None)
    want = np.argsort(-(reference[queries] @ reference[docs].T), axis=1)[:, :10]
    got = np.argsort(-(ours[queries] @ ours[docs].T), axis=1)[:, :10]
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(want, got, strict=True)])
    alone = np.asarray([embedder.embed_one(t) for t in texts[:200]], dtype=np.float32)
    batch_vs_alone = float(np.abs(alone - ours[:200]).max())
    return (
        f"agreement with torch MiniLMEmbedder over {n} distinct episode texts: cosine mean "
        f"{cosine.mean():.4f}, p1 {np.percentile(cosine, 1):.4f}, min {cosine.min():.4f}; "
        f"top-10 overlap {overlap:.3f} (200 queries); max |alone - in batch| {batch_vs_alone:.2e}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", choices=["episodes", "short"], default="episodes")
    parser.add_argument("--sentences", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads, or the ONNX embedder's threads (default: all cores)",
    )
    parser.add_argument("--agreement", type=int, default=0, metavar="N")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "bench"))

    from django.conf import settings

    dotted = os.environ.get("PIPER_EMBEDDER", "piper.embeddings.MiniLMOnnxEmbedder")
    settings.configure(PIPER_EMBEDDER=dotted, PIPER_EMBEDDING_DIM=384)
    import django

    django.setup()
    from piper import embeddings
    from piper.embeddings import get_embedder

    onnx = dotted.endswith("OnnxEmbedder")
    started = time.perf_counter()
    for module in ("onnxruntime", "tokenizers") if onnx else ("torch", "sentence_transformers"):
        importlib.import_module(module)
    import_s = time.perf_counter() - started

    if onnx:
        embedder = embeddings.MiniLMOnnxEmbedder(threads=args.threads)
        runtime = f"onnxruntime {sys.modules['onnxruntime'].__version__}"
    else:
        import torch

        if args.threads:
            torch.set_num_threads(args.threads)
        embedder = get_embedder()
        runtime = f"torch {torch.__version__}"
    started = time.perf_counter()
    embedder.embed_one("warm-up")
    first_s = time.perf_counter() - started
    if onnx:
        runtime += f" ({embedder._loaded.workers} threads)"
    else:
        runtime += f" ({embedder._threads} threads for batches)"

    texts = texts_for(args.texts, args.sentences)
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    rates, cpu_rates, loads = [], [], []
    for _ in range(args.rounds):
        started, cpu_started = time.perf_counter(), time.process_time()
        for batch in batches:
            embedder.embed(batch)
        rates.append(len(texts) / (time.perf_counter() - started))
        cpu_rates.append(len(texts) / (time.process_time() - cpu_started))
        loads.append(os.getloadavg()[0])

    latencies = []
    for text in texts[:200]:
        started = time.perf_counter()
        embedder.embed_one(text)
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()

    words = statistics.mean(len(t.split()) for t in texts)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{runtime}"
    )
    print(f"embedder: {embedder.name} ({embedder.dimension} dims)")
    print(f"import runtime: {import_s:.2f} s")
    print(f"first embed (checksum + load + first call): {first_s:.2f} s")
    print(
        f"throughput, {len(texts)} {args.texts} texts (mean {words:.1f} words) in batches of "
        f"{args.batch}: median {statistics.median(rates):.0f}/s, best {max(rates):.0f}/s over "
        f"{args.rounds} rounds (1-min load average during the rounds "
        f"{min(loads):.1f}-{max(loads):.1f})"
    )
    print(
        f"per CPU-second of this process (all its threads): median "
        f"{statistics.median(cpu_rates):.0f}, best {max(cpu_rates):.0f} texts"
    )
    print(
        f"embed_one latency: p50 {latencies[len(latencies) // 2]:.1f} ms, "
        f"p95 {latencies[int(len(latencies) * 0.95)]:.1f} ms"
    )
    if args.agreement and onnx:
        print(agreement(embedder, args.agreement))
    return 0


if __name__ == "__main__":
    sys.exit(main())
