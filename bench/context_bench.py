"""Context assembly at 100,000 episodes and 1,000,000 facts (issue #23: p95 ≤ 60 ms).

    .venv/bin/python bench/context_bench.py [--episodes 100000] [--subjects 100000]
        [--versions 10] [--samples 300] [--budget 2000] [--reload] [--only world,context]

Runs in a database of its own on the embedded server (PIPER_DB_NAME, default
piper_bench_context).

world    bench/forgetting_bench.py's world at this size, in this database: one
         agent with `episodes` episodes (realistic texts, vectors, HNSW and
         GIN indexes, ledger events) and `subjects` x `versions` fact versions
         asserted through facts_assert (1M), their fact texts, and 300 probe
         subjects named by five episodes each; the fact texts' vectors (the
         embedding task's work). Then what a working agent also
         has, through the services: a thread whose checkpoint names two
         artifacts (one stale), 300 time intentions (20 overdue, 20 due within
         the hour, the rest later) and 20 validated skills. Kept between runs.
context  `samples` calls of POST /api/v1/context through Django's full stack
         in-process (APIClient: authentication, throttling, idempotency,
         serialization) with the thread, a session and a task — a third name a
         probe subject and its ticket, a third are episode-like texts, a third
         ask for a skill's task — each alternated with POST /api/v1/recall of
         the same task (the anchor: one memory asked, where the context asks
         five). Reports p50/p95/p99 of each, the ratio of the medians and the
         paired median difference; the block's sections and cost on the side.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from argparse import Namespace
from datetime import UTC, datetime, timedelta
from pathlib import Path

os.environ.setdefault("PIPER_DB_NAME", "piper_bench_context")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import episode_texts  # noqa: E402
import forgetting_bench  # noqa: E402
from _harness import (  # noqa: E402
    cpu_probe_ms,
    git_commit,
    load_average,
    machine,
    migrate,
    percentile,
    setup_django,
)

THREAD_KEY = "context-bench"
log = forgetting_bench.log
SKILL_DOMAINS = [
    ("rotate", "payments gateway credentials"),
    ("reindex", "search catalogue"),
    ("backfill", "billing ledger"),
    ("drain", "checkout queue"),
    ("renew", "storefront TLS certificate"),
    ("vacuum", "orders database"),
    ("resize", "image thumbnail cache"),
    ("replay", "webhook dead letters"),
    ("export", "quarterly tax report"),
    ("reconcile", "bank payouts"),
    ("archive", "support tickets"),
    ("restart", "recommendation workers"),
    ("snapshot", "analytics warehouse"),
    ("migrate", "session store"),
    ("purge", "CDN edge cache"),
    ("audit", "admin access keys"),
    ("compact", "event log topics"),
    ("scale", "notification senders"),
    ("verify", "backup restores"),
    ("throttle", "partner API clients"),
]
PROCEDURE = "def run(params, tools):\n    return {'done': params['target']}\n"
SCHEMA = {
    "type": "object",
    "properties": {"target": {"type": "string"}},
    "required": ["target"],
}


def build_world(args):
    agent = forgetting_bench.build_world(
        Namespace(
            episodes=args.episodes,
            subjects=args.subjects,
            versions=args.versions,
            probes=300,
            reload=args.reload,
        )
    )
    _embed_fact_texts(agent)
    return agent, _working_agent(agent)


def _embed_fact_texts(agent) -> None:
    """The fact texts' vectors, as the embedding task leaves them (the forgetting
    world renders the texts only): the context's fact candidates search them."""
    from facts.fact_texts import fact_texts_embed
    from facts.models import FactText

    pending = list(
        FactText.objects.filter(agent=agent, embedding__isnull=True).values_list("id", flat=True)
    )
    started = time.perf_counter()
    for at in range(0, len(pending), 5000):
        fact_texts_embed(ids=pending[at : at + 5000])
        log(f"fact texts embedded: {min(at + 5000, len(pending))}/{len(pending)}")
    if pending:
        log(f"{len(pending)} fact texts embedded in {time.perf_counter() - started:.0f} s")


def _working_agent(agent):
    """The thread, intentions and skills a working agent has beside its memories."""
    from django.db import transaction

    from intentions.models import Intention, Thread
    from intentions.services.lifecycle import IntentionInput, intention_create
    from intentions.services.state import thread_get_or_create, working_state_write
    from skills.models import SkillVersion
    from skills.services import lifecycle
    from skills.services.definitions import VersionInput, skill_create

    thread = Thread.objects.filter(agent=agent, key=THREAD_KEY).first()
    if thread is not None and thread.current_version:
        log("thread, intentions and skills found")
        return thread
    now = datetime.now(UTC)
    thread, _ = thread_get_or_create(agent=agent, key=THREAD_KEY)
    working_state_write(
        agent=agent,
        thread=thread,
        based_on=thread.current_version,
        state={
            "goal": "Close the quarterly pay grade review",
            "subgoal": "Confirm each person's grade against their ticket",
            "next_action": "Open the next HR ticket in the queue",
            "plan": ["list open tickets", "check each grade", "write the summary"],
            "blockers": ["the HR export is two days old"],
            "artifacts": [
                {
                    "name": "HR export",
                    "ref": "s3://hr/export.csv",
                    "checked_at": (now - timedelta(days=2)).isoformat(),
                    "freshness_seconds": 86400,
                },
                {
                    "name": "grade table",
                    "ref": "s3://hr/grades.json",
                    "checked_at": now.isoformat(),
                    "freshness_seconds": 10**9,
                },
            ],
        },
    )
    if not Intention.objects.filter(agent=agent).exists():
        for n in range(300):
            due = (
                now - timedelta(hours=1 + n)
                if n < 20
                else now + timedelta(minutes=n)
                if n < 40
                else now + timedelta(days=1 + n % 30)
            )
            intention_create(
                agent=agent,
                data=IntentionInput(
                    description=f"Follow up on pay grade ticket HR-{n:05d} with the manager",
                    trigger_type="time",
                    due_at=due,
                    priority=n % 3,
                ),
            )
    for verb, thing in SKILL_DOMAINS:
        _, version = skill_create(
            agent=agent,
            name=f"{verb}-{thing.replace(' ', '-')}",
            data=VersionInput(
                purpose=f"{verb.capitalize()} the {thing} safely",
                trigger={"keywords": [verb, thing.split()[-1]], "min_keywords": 2},
                parameter_schema=SCHEMA,
                procedure=PROCEDURE,
                examples=[{"params": {"target": "x"}}],
                contraindications=[{"keywords": ["production freeze"], "reason": "a freeze"}],
            ),
        )
        with transaction.atomic():
            locked = SkillVersion.objects.select_for_update().get(pk=version.pk)
            lifecycle.move(locked, "experimental", "bench: examples taken as passed")
            locked.refresh_from_db()
            lifecycle.move(locked, "validated", "bench: verified runs taken as given")
    log("thread, 300 intentions and 20 validated skills written")
    return thread


def tasks(n: int) -> list[str]:
    rng = random.Random(23)
    texts = [e.summary for e in episode_texts.episodes(n, seed=4321)]
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            p = rng.randrange(300)
            out.append(
                f"Prepare the pay grade review for {forgetting_bench.subject_name(p)} "
                f"and check ticket HR-{p:05d}{rng.randrange(5)}"
            )
        elif kind == 1:
            out.append(texts[i])
        else:
            verb, thing = SKILL_DOMAINS[rng.randrange(len(SKILL_DOMAINS))]
            out.append(f"We need to {verb} the {thing} before the weekend")
    return out


def measure_context(agent, thread, args) -> dict:
    from rest_framework.test import APIClient

    from piper.tenancy.models import MAX_RATE_PER_MINUTE
    from piper.tenancy.services import api_key_create

    _, raw = api_key_create(
        agent=agent, name="context-bench", scopes=["read"], rate_per_minute=MAX_RATE_PER_MINUTE
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")

    def context(task):
        return client.post(
            "/api/v1/context",
            {
                "task": task,
                "thread_id": str(thread.pk),
                "session_id": "bench-session",
                "budget": {"tokens": args.budget},
            },
            format="json",
        )

    def recall(task):
        return client.post("/api/v1/recall", {"query": task}, format="json")

    for task in tasks(20):  # warm: the embedder, the tokenizer, prepared statements
        context(task), recall(task)
    # What a gunicorn worker does once loaded (gunicorn.conf.py): what is alive
    # now is frozen out of the garbage collector's full collections.
    from piper.wsgi import warm_and_freeze

    warm_and_freeze()
    timings: dict[str, list[float]] = {"context": [], "recall": []}
    sections: dict[str, int] = {}
    costs = []
    for n, task in enumerate(tasks(args.samples)):
        order = (("context", context), ("recall", recall))
        for name, call in order if n % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            response = call(task)
            timings[name].append((time.perf_counter() - started) * 1000)
            assert response.status_code == 201, response.content[:300]
            if name == "context":
                body = response.json()
                costs.append(body["budget"]["used"])
                for s in body["sections"]:
                    sections[s["name"]] = sections.get(s["name"], 0) + 1

    def summary(values):
        return {
            "p50": round(percentile(values, 50), 1),
            "p95": round(percentile(values, 95), 1),
            "p99": round(percentile(values, 99), 1),
        }

    paired = [c - r for c, r in zip(timings["context"], timings["recall"], strict=True)]
    return {
        "samples": args.samples,
        "context_ms": summary(timings["context"]),
        "recall_ms": summary(timings["recall"]),
        "ratio_of_medians": round(
            statistics.median(timings["context"]) / statistics.median(timings["recall"]), 2
        ),
        "paired_median_difference_ms": round(statistics.median(paired), 1),
        "sections_present": {k: f"{v}/{args.samples}" for k, v in sorted(sections.items())},
        "budget_used_tokens": {"median": statistics.median(costs), "max": max(costs)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--subjects", type=int, default=100_000)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--only", default="world,context", help="comma-separated")
    args = parser.parse_args()
    only = set(args.only.split(","))
    setup_django()
    migrate()
    print(f"machine: {machine()}; commit {git_commit()}; database {os.environ['PIPER_DB_NAME']}")
    print(f"{load_average()}; CPU probe {cpu_probe_ms():.1f} ms")
    agent, thread = build_world(args)
    results = {}
    if "context" in only:
        results["context"] = measure_context(agent, thread, args)
        print(f"{load_average()}; CPU probe {cpu_probe_ms():.1f} ms")
    print(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
