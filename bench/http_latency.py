"""Single-event latency through HTTP (gunicorn): POST one event, GET one by id.

    .venv/bin/python bench/http_latency.py [--requests 2000] [--preload 200000]

Preloads the benchmark agent's ledger (default 200,000 events through the
service layer) so reads hit a realistically sized table, then measures
sequential requests from one keep-alive client: each POST appends to the hash
chain (lock, hash, insert, commit); each GET reads a random earlier event.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import httpx
from _harness import bench_client_key, gunicorn, machine, migrate, setup_django, summary_ms


def preload(key: str, count: int) -> None:
    from ledger.services import EventDraft, events_append
    from piper.tenancy.selectors import api_key_for_secret

    agent = api_key_for_secret(key).agent
    for first in range(0, count, 5000):
        drafts = [
            EventDraft(
                event_type="observation.recorded",
                session_id=f"s-{n // 500}",
                actor="preload",
                payload={"n": n, "text": f"preloaded event {n} with some words in it"},
            )
            for n in range(first, min(count, first + 5000))
        ]
        events_append(agent=agent, drafts=drafts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--preload", type=int, default=200_000)
    parser.add_argument("--port", type=int, default=8312)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--threads", type=int, default=4, help="gunicorn threads per worker, as in the Procfile"
    )
    args = parser.parse_args()

    migrate()
    setup_django()
    from ledger.models import Event

    key = bench_client_key("bench-latency")
    t0 = time.perf_counter()
    preload(key, args.preload)
    print(f"machine: {machine()}")
    print(
        f"preloaded {args.preload:,} events in {time.perf_counter() - t0:.1f} s; "
        f"ledger table now {Event.objects.count():,} rows"
    )

    rng = random.Random(7)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    posts: list[float] = []
    gets: list[float] = []
    ids: list[str] = []
    with (
        gunicorn(args.port, workers=args.workers, threads=args.threads) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=30) as http,
    ):
        for n in range(200):  # warm-up: connections, imports, plan caches
            r = http.post(
                "/api/v1/events", content=json.dumps({"event_type": "warm.up", "payload": {"n": n}})
            )
            ids.append(r.json()["id"])
            http.get(f"/api/v1/events/{ids[-1]}")
        for n in range(args.requests):
            body = json.dumps(
                {
                    "event_type": "tool.called",
                    "session_id": "latency",
                    "actor": "agent",
                    "source_type": "tool_result",
                    "payload": {"tool": "search", "query": f"q {n}", "n": n},
                }
            )
            t = time.perf_counter()
            r = http.post("/api/v1/events", content=body)
            posts.append(time.perf_counter() - t)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        for _ in range(args.requests):
            event_id = rng.choice(ids)
            t = time.perf_counter()
            r = http.get(f"/api/v1/events/{event_id}")
            gets.append(time.perf_counter() - t)
            assert r.status_code == 200, r.text
    print(f"POST /api/v1/events (one event): {summary_ms(posts)}")
    print(f"GET /api/v1/events/{{id}}:        {summary_ms(gets)}")


if __name__ == "__main__":
    main()
