"""Embedder load time, batch throughput and single-text latency, on CPU.

    .venv/bin/python bench/embedder_throughput.py [--sentences 2048] [--batch 64] [--rounds 5] [--threads N]

Uses the embedder named by PIPER_EMBEDDER (default: piper.embeddings.MiniLMEmbedder)
through get_embedder(), exactly as the service does, with the minimum of Django
settings it needs (no database or Redis is started). Reports:

* import: importing torch + sentence_transformers (paid once per process);
* first embed: checksum of model.safetensors + model load + the first call;
* throughput: sentences/s embedding short sentences (6-14 words) in batches of
  --batch, one embed() call per batch; median and best of --rounds passes;
* single-text latency: embed_one() p50/p95 over 200 calls (query-time cost).
"""

from __future__ import annotations

import argparse
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


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sentences", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's own)"
    )
    args = parser.parse_args()

    from django.conf import settings

    settings.configure(
        PIPER_EMBEDDER=os.environ.get("PIPER_EMBEDDER", "piper.embeddings.MiniLMEmbedder"),
        PIPER_EMBEDDING_DIM=384,
    )
    import django

    django.setup()
    from piper.embeddings import get_embedder

    started = time.perf_counter()
    import sentence_transformers  # noqa: F401
    import torch

    import_s = time.perf_counter() - started
    if args.threads:
        torch.set_num_threads(args.threads)

    embedder = get_embedder()
    started = time.perf_counter()
    embedder.embed_one("warm-up")
    first_s = time.perf_counter() - started

    texts = sentences(args.sentences)
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    rates = []
    for _ in range(args.rounds):
        started = time.perf_counter()
        for batch in batches:
            embedder.embed(batch)
        rates.append(len(texts) / (time.perf_counter() - started))

    latencies = []
    for text in texts[:200]:
        started = time.perf_counter()
        embedder.embed_one(text)
        latencies.append((time.perf_counter() - started) * 1000)
    latencies.sort()

    words = statistics.mean(len(t.split()) for t in texts)
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
    print(f"embedder: {embedder.name} ({embedder.dimension} dims)")
    print(f"import torch + sentence_transformers: {import_s:.2f} s")
    print(f"first embed (checksum + load + first call): {first_s:.2f} s")
    print(
        f"throughput, {len(texts)} sentences (mean {words:.1f} words) in batches of {args.batch}: "
        f"median {statistics.median(rates):.0f}/s, best {max(rates):.0f}/s over {args.rounds} rounds"
    )
    print(
        f"embed_one latency: p50 {latencies[len(latencies) // 2]:.1f} ms, "
        f"p95 {latencies[int(len(latencies) * 0.95)]:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
