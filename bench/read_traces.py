"""What tracing every direct read costs: GET /facts/current and GET /episodes/search
with PIPER_READ_TRACES on and off, alternating, in one process.

    .venv/bin/python bench/read_traces.py [--rounds 40] [--per-round 25] [--traces 100000]

In process (Django's test client through the whole middleware stack, no
socket), so the figure is the view's own cost. The trace table is preloaded
with --traces rows for the agent, so the insert lands in a realistically
sized table and its indexes. Rounds alternate off/on (the order flips each
round); the result is the ratio of medians and the paired median difference
of the rounds' medians, with the absolute figures beside them.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _harness import (
    bench_client_key,
    git_commit,
    load_average,
    machine,
    migrate,
    percentile,
    setup_django,
)


def preload(agent, *, facts: int, traces: int) -> list[str]:
    from facts.services import ClaimInput, facts_assert
    from recall.models import RetrievalTrace

    subjects = [f"service-{n}" for n in range(facts)]
    facts_assert(
        agent=agent,
        claims=[
            ClaimInput(subject=subject, predicate="status", value=f"state {n % 7}")
            for n, subject in enumerate(subjects)
        ],
    )
    rows = [
        RetrievalTrace(
            agent=agent,
            query=f"service-{n % facts} status",
            route="facts_lookup",
            explicit=True,
            decision={"chosen": "facts_lookup", "method": "explicit"},
            returned=[],
            abstained=True,
            latency_ms=1.0,
        )
        for n in range(traces)
    ]
    RetrievalTrace.objects.bulk_create(rows, batch_size=5000)
    return subjects


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--per-round", type=int, default=25)
    parser.add_argument("--facts", type=int, default=500)
    parser.add_argument("--traces", type=int, default=100_000)
    args = parser.parse_args()

    migrate()
    setup_django()
    from django.test import Client, override_settings

    from piper.tenancy.selectors import api_key_for_secret

    key = bench_client_key("bench-read-traces")
    agent = api_key_for_secret(key).agent
    subjects = preload(agent, facts=args.facts, traces=args.traces)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    reads = {
        "facts/current": lambda n: client.get(
            "/api/v1/facts/current",
            {"subject": subjects[n % len(subjects)], "predicate": "status"},
        ),
        "episodes/search": lambda n: client.get(
            "/api/v1/episodes/search", {"q": f"service {n % 50} status"}
        ),
    }
    print(f"machine: {machine()}; {load_average()}; commit {git_commit()}")
    print(
        f"{args.facts} facts, {args.traces:,} preloaded traces; {args.rounds} rounds x "
        f"{args.per_round} reads per arm, alternating"
    )
    for name, read in reads.items():
        for n in range(50):  # warm-up: plan caches, the embedder for search
            read(n)
        samples: dict[bool, list[float]] = {False: [], True: []}
        round_medians: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for traced in (False, True) if r % 2 == 0 else (True, False):
                timings = []
                with override_settings(PIPER_READ_TRACES=traced):
                    for n in range(args.per_round):
                        started = time.perf_counter()
                        response = read(r * args.per_round + n)
                        timings.append(time.perf_counter() - started)
                        assert response.status_code == 200, response.content
                        assert ("Piper-Trace-Id" in response) == traced
                samples[traced] += timings
                round_medians[traced].append(statistics.median(timings))
        off, on = samples[False], samples[True]
        paired = statistics.median(
            b - a for a, b in zip(round_medians[False], round_medians[True], strict=True)
        )
        ratio = statistics.median(on) / statistics.median(off)
        print(
            f"GET /api/v1/{name}: traced/untraced median ratio {ratio:.3f}; paired median "
            f"difference {paired * 1000:+.2f} ms; untraced p50 {percentile(off, 50) * 1000:.2f} "
            f"p95 {percentile(off, 95) * 1000:.2f} ms, traced p50 {percentile(on, 50) * 1000:.2f} "
            f"p95 {percentile(on, 95) * 1000:.2f} ms"
        )


if __name__ == "__main__":
    main()
