"""Skills sandbox overhead and throughput (issue #5).

Targets: a trivial skill's run p50 ≤ 150 ms; ≥ 10 sandbox validations/s on 2 cores.

    .venv/bin/python bench/skills_sandbox_bench.py
    .venv/bin/python bench/skills_sandbox_bench.py --samples 300 --seconds 20

Each sample is one ``run_skill`` call — a fresh bubblewrap sandbox running a
trivial procedure, its validator and one declared tool call — timed from the
caller's side. For scale, the same interpreter started bare (no sandbox) is
timed too. Throughput runs 2 and 4 caller threads for ``--seconds`` each.
No database is used.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._harness import git_commit, load_average, machine, summary_ms_p95  # noqa: E402
from skills.sandbox import run_skill  # noqa: E402
from skills.sandbox.runtime import python_runtime  # noqa: E402

PROCEDURE = """
def run(params, tools):
    return {"sum": params["a"] + params["b"], "check": tools.checksum({"text": "abc"})}
"""
VALIDATOR = """
def validate(params, result, tools):
    return result["sum"] == params["a"] + params["b"]
"""
TOOLS = {"checksum": lambda args: sum(map(ord, args["text"])) % 997}


def one(i: int = 0) -> float:
    started = time.perf_counter()
    result = run_skill(
        procedure=PROCEDURE, params={"a": i, "b": 2}, validator=VALIDATOR, tools=TOOLS
    )
    elapsed = time.perf_counter() - started
    if result.outcome != "ok" or not result.validation["passed"]:
        raise RuntimeError(f"unexpected result: {result}")
    return elapsed


def bare_interpreter(samples: int) -> dict:
    _, _, interpreter = python_runtime()
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        subprocess.run([interpreter, "-I", "-S", "-B", "-c", "import json"], check=True)
        times.append(time.perf_counter() - started)
    return summary_ms_p95(times)


def throughput(threads: int, seconds: float) -> tuple[int, float]:
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def worker(slot: int) -> None:
        while time.monotonic() < stop:
            one(slot)
            counts[slot] += 1

    workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    started = time.monotonic()
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return sum(counts), time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()

    print(f"# {machine()}; {load_average()}; commit {git_commit()}")
    started = time.perf_counter()
    python_runtime()
    print(f"# interpreter mirror ready in {time.perf_counter() - started:.2f} s")
    for i in range(10):
        one(i)

    latency = summary_ms_p95([one(i) for i in range(args.samples)])
    bare = bare_interpreter(min(args.samples, 100))
    rows = [
        ("run_skill, procedure + validator + 1 tool call", latency),
        ("bare `python -I -S -B -c 'import json'` (no sandbox)", bare),
    ]
    print("\n| measure | n | p50 | p95 | p99 | mean |")
    print("|---|---|---|---|---|---|")
    for name, s in rows:
        print(
            f"| {name} | {s['n']} | **{s['p50_ms']} ms** | {s['p95_ms']} ms "
            f"| {s['p99_ms']} ms | {s['mean_ms']} ms |"
        )

    print("\n| caller threads | validations | seconds | **validations/s** |")
    print("|---|---|---|---|")
    for threads in (1, 2, 4):
        done, elapsed = throughput(threads, args.seconds)
        print(f"| {threads} | {done} | {elapsed:.1f} | **{done / elapsed:.1f}** |")
    print(f"\n# {load_average()}")


if __name__ == "__main__":
    main()
