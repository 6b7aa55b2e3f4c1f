"""Forgetting at one million facts and one million episodes (issue #21).

    .venv/bin/python bench/forgetting_bench.py [--episodes 1000000] [--subjects 100000]
        [--versions 10] [--probes 300] [--erasures 30] [--sweep 50000] [--reload]
        [--only world,erase,sweep]

Runs in a database of its own on the embedded server (PIPER_DB_NAME, default
piper_bench_forgetting).

world   One agent holding `episodes` episodes (1M) — bench/episodes_bench.py's
        world: realistic texts, vectors, the HNSW and GIN indexes, their
        ledger events — and `subjects` x `versions` fact versions (1M) asserted
        through the real write path (facts.services.facts_assert, batches of
        1,000: every round supersedes the previous one's value), their fact
        texts, and, for the first `probes` subjects, five episodes each that
        name them (episodes_record). Kept between runs (the agent's
        description holds the shape); `--reload` builds a new one.
erase   `forgetting.services.erasure.erasure_run` of one subject at a time
        (its 10 fact versions and the 5 episodes naming it, among the 1M and
        1M), receipt and residue check included: p50/p95 over `erasures`
        subjects; and, on the same erasures, the residue check alone run again
        (its share of the total).
sweep   The retention sweep over a fresh agent with `sweep` expired episodes
        (episodes_record, one policy on 'episode.*'): events erased per second,
        projections and receipts included, chunks of FORGETTING_SWEEP_CHUNK;
        beside it, the anchor measured in the same run: the rate at which the
        same episodes were recorded (episodes_record, batches of 1,000).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from argparse import Namespace
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("PIPER_DB_NAME", "piper_bench_forgetting")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import episodes_bench  # noqa: E402
from _harness import (  # noqa: E402
    git_commit,
    load_average,
    machine,
    migrate,
    setup_django,
    summary_ms_p95,
)

BATCH = 1000
BASE = datetime(2023, 1, 2, 8, 0, tzinfo=UTC)
TITLES = [f"grade {n}" for n in range(1, 21)]
log = episodes_bench.log


def subject_name(i: int) -> str:
    return f"Person {i:06d} Lindqvist"


def build_world(args):
    from episodes.services import EpisodeDraft, episodes_record
    from facts.services import ClaimInput, facts_assert

    shape = (
        f"forgetting: {args.episodes} episodes, {args.subjects}x{args.versions} facts, "
        f"{args.probes} probe subjects"
    )
    from piper.tenancy.models import Agent

    found = Agent.objects.filter(description=shape).order_by("-name").first()
    if found is not None and not args.reload:
        log(f"world found: {found.name} ({shape})")
        return found
    partial = Agent.objects.filter(description=f"partial {shape}").order_by("-name").first()
    if partial is not None and not args.reload:
        log(f"world found with its facts loaded: {partial.name}; rendering the fact texts")
        return _finish_world(partial, shape)
    [agent] = episodes_bench.build_world(
        Namespace(agents=1, per_agent=args.episodes, distinct=30_000, reload=True)
    )
    started = time.perf_counter()
    for version in range(args.versions):
        for begin in range(0, args.subjects, BATCH):
            facts_assert(
                agent=agent,
                claims=[
                    ClaimInput(
                        subject=subject_name(i),
                        predicate="pay_grade",
                        value=TITLES[(i + version) % len(TITLES)],
                        valid_from=BASE + timedelta(days=30 * version),
                    )
                    for i in range(begin, min(begin + BATCH, args.subjects))
                ],
            )
        log(
            f"facts round {version + 1}/{args.versions}: {args.subjects} claims, "
            f"{time.perf_counter() - started:.0f} s"
        )
    for begin in range(0, args.probes, 200):
        episodes_record(
            agent=agent,
            drafts=[
                EpisodeDraft(
                    occurred_at=BASE + timedelta(hours=i * 5 + k),
                    summary=f"{subject_name(i)} asked about pay grade review {k} in ticket "
                    f"HR-{i:05d}{k}",
                    actor="hr-assistant",
                    entities=[subject_name(i)],
                )
                for i in range(begin, min(begin + 200, args.probes))
                for k in range(5)
            ],
        )
    Agent.objects.filter(pk=agent.pk).update(description=f"partial {shape}")
    log(f"facts loaded in {time.perf_counter() - started:.0f} s after the episodes")
    return _finish_world(agent, shape)


def _finish_world(agent, shape: str):
    from django.db import connection

    from facts.fact_texts import all_pairs, fact_texts_refresh
    from piper.tenancy.models import Agent

    started = time.perf_counter()
    pairs = all_pairs(agent.pk)
    # One transaction per slice: a refresh locks each pair it renders.
    for begin in range(0, len(pairs), 2000):
        fact_texts_refresh(agent_id=agent.pk, pairs=pairs[begin : begin + 2000], embed="never")
    log(f"fact texts of {len(pairs)} pairs in {time.perf_counter() - started:.0f} s")
    with connection.cursor() as cursor:
        for table in ("facts_fact", "facts_factevidence", "facts_facttext", "ledger_event"):
            cursor.execute(f"ANALYZE {table}")
    Agent.objects.filter(pk=agent.pk).update(description=shape)
    return agent


def measure_erase(agent, args) -> dict:
    from facts.models import Entity
    from forgetting.services.erasure import Selector, erasure_run, residue_check

    names = list(
        Entity.objects.filter(agent=agent, name__in=[subject_name(i) for i in range(args.probes)])
        .order_by("name")
        .values_list("name", flat=True)[: args.erasures]
    )
    if len(names) < args.erasures:
        log(f"only {len(names)} probe subjects left: rebuild the world with --reload")
    totals, residues, events, found = [], [], [], 0
    for name in names:
        started = time.perf_counter()
        result = erasure_run(
            agent=agent, selector=Selector(subject=name), reason="bench", requested_by="bench"
        )
        totals.append(time.perf_counter() - started)
        started = time.perf_counter()
        residue_check(result.scope)
        residues.append(time.perf_counter() - started)
        events.append(result.receipt.events)
        found += result.receipt.residue_found
    return {
        "erase_subject": summary_ms_p95(totals),
        "residue_check_alone": summary_ms_p95(residues),
        "events_per_erasure": sorted(set(events)),
        "residue_found": found,
    }


def measure_sweep(args) -> dict:
    from episodes.services import EpisodeDraft, episodes_record
    from forgetting.services.retention import retention_policy_set, retention_sweep
    from piper.tenancy.services import agent_create

    agent = agent_create(name=f"bench-sweep-{int(time.time())}")
    ingest_started = time.perf_counter()
    for begin in range(0, args.sweep, BATCH):
        episodes_record(
            agent=agent,
            drafts=[
                EpisodeDraft(
                    occurred_at=BASE + timedelta(minutes=i),
                    summary=f"routine health check {i} of the payments cluster passed",
                    actor="monitor",
                )
                for i in range(begin, min(begin + BATCH, args.sweep))
            ],
        )
    ingest_seconds = time.perf_counter() - ingest_started
    retention_policy_set(agent=agent, name="episodes", event_type="episode.*", max_age_days=1)
    started = time.perf_counter()
    result = retention_sweep(
        agent=agent, budget_seconds=float("inf"), now=datetime.now(UTC) + timedelta(days=2)
    )
    elapsed = time.perf_counter() - started
    return {
        "events": result.erased,
        "receipts": len(result.receipts),
        "seconds": round(elapsed, 2),
        "events_per_second": round(result.erased / elapsed, 1),
        # The anchor, measured in the same run on the same host: writing them.
        "ingest_events_per_second": round(args.sweep / ingest_seconds, 1),
        "sweep_vs_ingest": round((result.erased / elapsed) / (args.sweep / ingest_seconds), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=1_000_000)
    parser.add_argument("--subjects", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--probes", type=int, default=300)
    parser.add_argument("--erasures", type=int, default=30)
    parser.add_argument("--sweep", type=int, default=50_000)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--only", default="world,erase,sweep", help="comma-separated")
    args = parser.parse_args()
    only = set(args.only.split(","))
    setup_django()
    migrate()
    print(f"machine: {machine()}; commit {git_commit()}; database {os.environ['PIPER_DB_NAME']}")
    print(load_average())
    results: dict = {}
    if only & {"world", "erase"}:
        agent = build_world(args)
        if "erase" in only:
            results["erase"] = measure_erase(agent, args)
            log(f"erase: {json.dumps(results['erase'])}")
    if "sweep" in only:
        results["sweep"] = measure_sweep(args)
        log(f"sweep: {json.dumps(results['sweep'])}")
    print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
