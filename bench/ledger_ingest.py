"""Ledger ingest through the batch API, hash chain on.

    .venv/bin/python bench/ledger_ingest.py [--events 200000] [--batch 1000] [--clients 1]

Starts gunicorn on a benchmark database, creates one agent per client, and
POSTs batches of realistic events (nested payloads, sessions, actors,
provenance) to /api/v1/events over HTTP. Reports events/s over the whole run
(wall clock from the first request to the last answer) and per-batch latency,
then verifies each agent's hash chain end to end.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from datetime import UTC, datetime, timedelta

import httpx
from _harness import bench_client_key, gunicorn, machine, migrate, setup_django, summary_ms

EVENT_TYPES = [
    "user.said",
    "agent.said",
    "tool.called",
    "tool.returned",
    "observation.recorded",
    "plan.updated",
]
SOURCES = ["user_statement", "tool_result", "observation", "agent_inference"]


def make_event(rng: random.Random, n: int, base: datetime) -> dict:
    return {
        "event_type": rng.choice(EVENT_TYPES),
        "occurred_at": (base + timedelta(milliseconds=n * 37)).isoformat(),
        "session_id": f"session-{n // 500}",
        "actor": rng.choice(["user", "agent", "deploy-tool", "search-tool"]),
        "source_type": rng.choice(SOURCES),
        "source_ref": f"call-{n}",
        "confidence": round(rng.uniform(0.5, 1.0), 3),
        "payload": {
            "text": " ".join(
                rng.choice(
                    [
                        "deploy",
                        "failed",
                        "memory",
                        "batch",
                        "retry",
                        "ok",
                        "timeout",
                        "user",
                        "asked",
                        "for",
                        "the",
                        "report",
                    ]
                )
                for _ in range(rng.randint(8, 30))
            ),
            "tool": {
                "name": "shell",
                "args": {"cmd": f"run job {n}", "timeout_s": rng.randint(1, 600)},
            },
            "tags": rng.sample(["prod", "staging", "oom", "billing", "infra", "ui"], k=2),
            "n": n,
        },
    }


def client_run(
    base_url: str,
    key: str,
    events: int,
    batch: int,
    seed: int,
    latencies: list[float],
    errors: list[str],
):
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    bodies = []
    for first in range(0, events, batch):
        bodies.append(
            json.dumps(
                {
                    "events": [
                        make_event(rng, n, start) for n in range(first, min(events, first + batch))
                    ]
                }
            )
        )
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=120) as http:
        for body in bodies:
            t0 = time.perf_counter()
            response = http.post("/api/v1/events", content=body)
            latencies.append(time.perf_counter() - t0)
            if response.status_code != 201:
                errors.append(f"{response.status_code}: {response.text[:300]}")
                return


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000, help="events per client")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=1, help="concurrent clients, one agent each")
    parser.add_argument("--port", type=int, default=8311)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    migrate()
    setup_django()
    from ledger.models import Event
    from ledger.selectors import chain_verify
    from piper.tenancy.models import Agent
    from piper.tenancy.selectors import api_key_for_secret

    keys = [bench_client_key("bench-ingest") for _ in range(args.clients)]
    ledger_rows_before = Event.objects.count()
    latencies: list[float] = []
    errors: list[str] = []
    with gunicorn(args.port, workers=args.workers) as base_url:
        # one warm-up batch per gunicorn worker, not counted
        warm = bench_client_key("bench-warmup")
        for _ in range(args.workers * 2):
            client_run(base_url, warm, args.batch, args.batch, 0, [], errors)
        threads = [
            threading.Thread(
                target=client_run,
                args=(base_url, key, args.events, args.batch, i, latencies, errors),
            )
            for i, key in enumerate(keys)
        ]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"ingest failed: {errors[0]}")
    total = args.events * args.clients
    print(f"machine: {machine()}")
    print(f"ledger rows before: {ledger_rows_before:,}; after: {Event.objects.count():,}")
    print(
        f"ingested {total:,} events in {elapsed:.2f} s with {args.clients} client(s), batch {args.batch}, "
        f"gunicorn workers {args.workers}"
    )
    print(f"throughput: {total / elapsed:,.0f} events/s")
    print(f"per-batch latency: {summary_ms(latencies)}")
    for key in keys:
        agent = Agent.objects.get(pk=api_key_for_secret(key).agent_id)
        t0 = time.perf_counter()
        report = chain_verify(agent=agent)
        print(
            f"chain {agent.name}: {report.events_checked:,} events, ok={report.ok}, "
            f"verified in {time.perf_counter() - t0:.1f} s"
        )
        assert report.ok and report.events_checked == args.events


if __name__ == "__main__":
    main()
