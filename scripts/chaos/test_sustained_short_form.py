"""sustained_load.py in short, for the test suite: the same world, mix and
checks against pytest-django's live server, two client threads for a few
seconds. It proves the load and its accounting, not the rate or the memory:
those need the real server for minutes (docs/reliability.md)."""

from __future__ import annotations

import _faults
import httpx
import pytest
import sustained_load

from conftest import make_client
from piper.tenancy.models import Scope


@pytest.mark.django_db(transaction=True)
def test_a_mixed_open_loop_load_is_answered_without_one_error(live_server):
    client = make_client("sustained", scopes=(Scope.READ, Scope.WRITE), rate_per_minute=1_000_000)
    subjects = sustained_load.build_world(client.agent, episodes=60, facts=40)
    with httpx.Client(
        base_url=live_server.url, headers={"Authorization": f"Bearer {client.raw_key}"}
    ) as http:
        [thread_ids] = _faults.make_threads(http, "short", procs=1, threads=2)

    replies = sustained_load.client_process(
        live_server.url,
        client.raw_key,
        proc=0,
        threads=2,
        total_threads=2,
        rate=6,
        seconds=5,
        thread_ids=thread_ids,
        subjects=subjects,
        seed=3,
    )
    phase = sustained_load.summarise(replies, rate=6, seconds=5)

    assert phase["errors"] == 0, phase["error_samples"]
    assert phase["requests"] == 30  # 6/s for 5 s: every instant was sent
    assert sum(f["n"] for f in phase["by_op"].values()) == 30
    assert {r.label for r in replies} <= set(sustained_load.OPS)
    assert len({r.label for r in replies}) >= 4  # a mix, not one kind
    assert 0 < phase["p50_ms"] <= phase["p95_ms"] <= phase["p99_ms"] <= phase["max_ms"]


def test_a_phase_that_errs_or_falls_behind_does_not_hold():
    ok = {"errors": 0, "p95_ms": 80.0, "on_time_share": 0.99}
    assert sustained_load.held(ok)
    assert not sustained_load.held({**ok, "errors": 1})
    assert not sustained_load.held({**ok, "p95_ms": 101.0})
    assert not sustained_load.held({**ok, "on_time_share": 0.9})


def test_memory_that_climbs_is_growth_and_memory_that_wobbles_is_not():
    sampler = sustained_load.MemorySampler(web_pid=0, worker_pid=None)
    # (seconds, web MB, worker MB, postgres MB) every 5 s for 10 minutes:
    # the web climbs 1 MB a sample, the worker wobbles around 400 MB.
    sampler.samples = [
        (t, 500.0 + t / 5, 400.0 + (3 if (t // 5) % 2 else -3), 2000.0) for t in range(0, 600, 5)
    ]
    growth = sampler.growth()
    assert growth["web"]["grows"] is True
    assert growth["web"]["change_mb"] > 90
    assert growth["worker"]["grows"] is False
    assert growth["postgres"]["grows"] is False
