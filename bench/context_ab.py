"""The context call of two commits on the same world, alternating call by call.

    .venv/bin/python bench/context_ab.py --base COMMIT [--samples 300]

Checks COMMIT out into a git worktree (piper-context-ab/<sha> in the temporary
directory, outside the repository so no test run or linter walks into it; its
var/ linked to this tree's, so both use the same embedded server, model files
and bench world) and starts one process per tree. Each answers POST
/api/v1/context for the bench's task i through Django's full stack in process,
as bench/context_bench.py measures it, with the tree's own code and bench
helpers. Task i goes to the base first and this tree second, task i + 1 the
other way round, so both see the same host at the same moment.

Reports p50/p95/p99 of each side and per task kind (named person, episode-like
text, skill task), the ratio of the medians and of the p95s (this tree ÷ base),
the paired median difference, and how many calls gave both sides the same
block (the ids of its items). The world must exist:
`bench/context_bench.py --only world` (PIPER_DB_NAME, default
piper_bench_context).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
KINDS = ("named person", "episode-like", "skill task")


def serve(tree: Path, samples: int) -> None:
    """One side: the tree's code answers task numbers read from stdin with
    'milliseconds block-hash' lines."""
    os.chdir(tree)
    sys.path.insert(0, str(tree / "bench"))
    os.environ.setdefault("PIPER_DB_NAME", "piper_bench_context")
    from _harness import setup_django

    setup_django()
    import context_bench
    from rest_framework.test import APIClient

    from intentions.models import Thread
    from piper.tenancy.models import MAX_RATE_PER_MINUTE
    from piper.tenancy.services import api_key_create

    thread = Thread.objects.get(key=context_bench.THREAD_KEY)
    _, raw = api_key_create(
        agent=thread.agent, name="context-ab", scopes=["read"], rate_per_minute=MAX_RATE_PER_MINUTE
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    def context(task: str) -> dict:
        response = client.post(
            "/api/v1/context",
            {
                "task": task,
                "thread_id": str(thread.pk),
                "session_id": "bench-session",
                "budget": {"tokens": 2000},
            },
            format="json",
        )
        assert response.status_code == 201, response.content[:300]
        return response.json()

    for task in context_bench.tasks(20):  # warm: the embedder, the tokenizer, the caches
        context(task)
    tasks = context_bench.tasks(samples)
    print("ready", flush=True)
    for line in sys.stdin:
        started = time.perf_counter()
        body = context(tasks[int(line)])
        ms = (time.perf_counter() - started) * 1000
        ids = [item["id"] for section in body["sections"] for item in section["items"]]
        print(f"{ms:.3f} {hashlib.sha1(repr(ids).encode()).hexdigest()}", flush=True)


def worktree(commit: str) -> Path:
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{commit}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / "piper-context-ab" / sha[:12]
    if not path.exists():
        subprocess.run(
            ["git", "worktree", "add", "--detach", "-q", str(path), sha], cwd=ROOT, check=True
        )
        (path / "var").symlink_to(ROOT / "var")
    return path


def pct(values: list[float], p: float) -> float:
    # Imported here: a --serve side must import its own tree's _harness first.
    from _harness import percentile

    return percentile(values, p)


def summary(values: list[float]) -> str:
    return " / ".join(f"{pct(values, p):.1f}" for p in (50, 95, 99))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", help="the commit to compare this tree with")
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # a side's tree (internal)
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve), args.samples)
        return 0
    if not args.base:
        parser.error("--base COMMIT is required")
    sides = {"base": worktree(args.base), "this": ROOT}
    procs = {
        name: subprocess.Popen(
            [sys.executable, __file__, "--serve", str(tree), "--samples", str(args.samples)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for name, tree in sides.items()
    }
    for name, proc in procs.items():
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"the {name} side did not start (run it with --serve to see why)")
    print(f"base {args.base} ({sides['base']}); load {os.getloadavg()[0]:.2f}")
    times: dict[str, list[float]] = {"base": [], "this": []}
    same = 0
    for i in range(args.samples):
        blocks = {}
        for name in ("base", "this") if i % 2 == 0 else ("this", "base"):
            procs[name].stdin.write(f"{i}\n")
            procs[name].stdin.flush()
            ms, blocks[name] = procs[name].stdout.readline().split()
            times[name].append(float(ms))
        same += blocks["base"] == blocks["this"]
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    for name in ("base", "this"):
        print(f"{name}: p50 / p95 / p99 {summary(times[name])} ms")
        for k, kind in enumerate(KINDS):
            print(f"  {kind:13s} {summary(times[name][k::3])} ms")
    paired = [b - a for a, b in zip(times["base"], times["this"], strict=True)]
    base_p50, this_p50 = statistics.median(times["base"]), statistics.median(times["this"])
    print(
        f"this ÷ base: medians ×{this_p50 / base_p50:.3f}, p95 "
        f"×{pct(times['this'], 95) / pct(times['base'], 95):.3f}; paired median "
        f"{statistics.median(paired):+.1f} ms; the same block {same}/{args.samples}; "
        f"load {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
