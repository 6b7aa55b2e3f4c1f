"""Consolidation throughput on one worker, against ingest (issue #21: "consolidation
keeps up with ingest at 1,000 episodes/s on one worker").

    .venv/bin/python bench/consolidation_bench.py [--episodes 100000] [--stating 0.2]
        [--batch-sizes 200,1000] [--kinds facts,duplicates] [--traces 2000 --runs 5]

Runs in a database of its own on the embedded server (PIPER_DB_NAME, default
piper_bench_consolidation). For each batch size, a fresh agent gets `episodes`
realistic agent episodes (bench/episode_texts.py: operations and support work,
25 to a session) of which a share `stating` also state a fact in a documented
sentence shape ("<Person>'s desk extension is 4411."), some repeated by
another session; they are recorded through episodes_record in batches of
1,000 (the ingest rate), and then `consolidate()` — what the Celery task runs
— reads them all in this one process, one kind at a time: episodes read per
second, candidates proposed and asserted, steps. Episodes have no vectors
here (the facts kind reads none; the duplicates kind falls back to words).

With `--kinds skills --traces N`, the agent also records N skill traces
(skills.services.traces.trace_record, one call each): procedures of 2-3 tool
calls, `--runs` (5) with different inputs to a procedure (every procedure has a
signing key of its own), one in ten unverified; the skills kind then groups
them by shape and proposes a candidate skill version per procedure (its
intent embedded, its examples queued for a sandbox worker nobody runs here).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("PIPER_DB_NAME", "piper_bench_consolidation")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import episode_texts  # noqa: E402
from _harness import git_commit, load_average, machine, migrate, setup_django  # noqa: E402

INGEST_BATCH = 1000
START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
ATTRIBUTES = ("desk extension", "parking bay", "cost centre", "pager alias")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def drafts(n: int, stating: float, seed: int = 11) -> list:
    from episodes.services import EpisodeDraft

    rng = random.Random(seed)
    out = []
    for i, g in enumerate(episode_texts.episodes(n, seed=seed)):
        summary = g.summary
        if rng.random() < stating:
            person = f"Person {rng.randrange(n // 10 or 1):06d} Okonkwo"
            attribute = rng.choice(ATTRIBUTES)
            summary = f"{summary} {person}'s {attribute} is {rng.randrange(1000, 9999)}."
        out.append(
            EpisodeDraft(
                occurred_at=START + timedelta(seconds=30 * i),
                summary=summary,
                action=g.action,
                observation=g.observation,
                outcome=g.outcome,
                actor=g.actor,
                environment=g.environment,
                session_id=f"s{i // 25}",
                entities=g.entities,
            )
        )
    return out


def record_traces(agent, n: int, runs: int = 5, seed: int = 13) -> float:
    """n traces of n // runs procedures; returns traces recorded per second."""
    import base64
    import hashlib
    import hmac

    from skills.services.traces import TraceInput, trace_record

    rng = random.Random(seed)
    started = time.perf_counter()
    for i in range(n):
        key = f"key-{i // runs:05d}"
        text = f"INV-{rng.randrange(10**6):06d} {rng.choice(ATTRIBUTES)} run {i}"
        digest = hashlib.sha256(text.encode()).hexdigest()
        signed = hmac.new(key.encode(), digest.encode(), hashlib.sha256).hexdigest()
        steps = [
            {"tool": "sha256", "args": {"text": text}, "result": digest},
            {"tool": "hmac_sha256", "args": {"key": key, "text": digest}, "result": signed},
        ]
        output = signed
        if (i // runs) % 2:
            output = base64.b64encode(signed.encode()).decode()
            steps.append({"tool": "base64_encode", "args": {"text": signed}, "result": output})
        verified = i % 10 != 9
        trace_record(
            agent=agent,
            data=TraceInput(
                task=f"Seal the {rng.choice(ATTRIBUTES)} record for the archive",
                inputs={"record": text},
                steps=steps,
                output=output,
                succeeded=True,
                verified=verified,
                verification={"by": "bench"} if verified else None,
                session_id=f"t{i // 25}",
            ),
        )
    return n / (time.perf_counter() - started)


def ingest(agent, batch: list) -> float:
    from episodes.services import episodes_record

    started = time.perf_counter()
    for begin in range(0, len(batch), INGEST_BATCH):
        episodes_record(agent=agent, drafts=batch[begin : begin + INGEST_BATCH])
    return len(batch) / (time.perf_counter() - started)


def measure(args, batch_size: int, world: list) -> dict:
    from consolidation.services import consolidate
    from piper.tenancy.services import agent_create

    agent = agent_create(name=f"bench-consolidation-{batch_size}-{int(time.time() * 1000)}")
    log(f"batch {batch_size}: recording {len(world)} episodes")
    ingest_rate = ingest(agent, world)
    result = {"batch_size": batch_size, "ingest_per_s": round(ingest_rate)}
    if "skills" in args.kinds:
        log(f"batch {batch_size}: recording {args.traces} traces")
        result["traces_per_s"] = round(record_traces(agent, args.traces, args.runs))
    for kind in args.kinds:
        log(f"batch {batch_size}: consolidating ({kind})")
        started = time.perf_counter()
        run = consolidate(agent=agent, kind=kind, batch_size=batch_size)
        seconds = time.perf_counter() - started
        result[kind] = {
            "episodes_read": run.episodes_read,
            "episodes_excluded": run.episodes_excluded,
            "candidates_proposed": run.candidates_proposed,
            "candidates_asserted": run.candidates_asserted,
            "collapsed": run.details.get("collapsed"),
            "steps": run.steps,
            "seconds": round(seconds, 1),
            "episodes_per_s": round(run.episodes_read / seconds),
            "vs_ingest": round(
                run.episodes_read / seconds / result.get("traces_per_s", ingest_rate)
                if kind == "skills"
                else run.episodes_read / seconds / ingest_rate,
                2,
            ),
        }
        log(f"  {kind}: {result[kind]}")
    result["load"] = load_average()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--stating", type=float, default=0.2)
    parser.add_argument("--batch-sizes", default="200,1000")
    parser.add_argument("--kinds", default="facts,duplicates")
    parser.add_argument("--traces", type=int, default=2000, help="for the skills kind")
    parser.add_argument("--runs", type=int, default=5, help="traces to a procedure")
    args = parser.parse_args()
    args.kinds = [k for k in args.kinds.split(",") if k]
    setup_django()
    migrate()
    world = drafts(args.episodes, args.stating)
    results = [measure(args, int(b), world) for b in args.batch_sizes.split(",") if b]
    print(
        json.dumps(
            {
                "commit": git_commit(),
                "machine": machine(),
                "episodes": args.episodes,
                "stating": args.stating,
                "results": results,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
