"""The chaos scripts in short, for the test suite: the same races and the same
checks as fact_storm.py and state_races.py, against pytest-django's live server
(a threaded WSGI server on the test database), with client threads instead of
client processes. A few seconds each; the full runs are the scripts
(docs/reliability.md).

Skill promotion is raced here only at the service level
(skills/tests/test_concurrency.py): through HTTP it needs the sandbox worker.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import _stack
import fact_storm
import pytest
import state_races

from conftest import make_client

pytestmark = pytest.mark.django_db(transaction=True)

WRITES = 50
THREADS = 10


def threads_race(base_url: str, key: str):
    """A racer for state_races' rounds: each request from its own thread, all at once."""

    def racer(requests: list[state_races.Request]) -> list[_stack.Reply]:
        start = threading.Barrier(len(requests))

        def run(request):
            start.wait(timeout=60)
            return state_races.one_request(base_url, key, request)[0]

        with ThreadPoolExecutor(len(requests)) as pool:
            return list(pool.map(run, requests))

    return racer


@pytest.mark.parametrize("mode", ["now", "backdated"])
def test_fifty_writes_at_once_to_one_fact_make_one_linear_chain(live_server, mode):
    client = make_client(f"storm-{mode}", rate_per_minute=1_000_000)
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(days=3)
    claims = [
        (f"w{n:03d}", (base + timedelta(minutes=(n * 37) % WRITES)).isoformat())
        if mode == "backdated"
        else (f"w{n:03d}", None)
        for n in range(WRITES)
    ]
    start = threading.Barrier(THREADS)

    def run(share):
        start.wait(timeout=60)
        return fact_storm.writer(live_server.url, client.raw_key, share, threads=1)

    with ThreadPoolExecutor(THREADS) as pool:
        replies = [
            r for part in pool.map(run, [claims[t::THREADS] for t in range(THREADS)]) for r in part
        ]

    accepted, violations = fact_storm.check_replies(replies)
    figures, more = fact_storm.check_database(client.agent, accepted, mode)
    violations += more
    violations += fact_storm.check_api(
        live_server.url, client.raw_key, accepted, figures["fact rows"]
    )
    assert violations == []
    assert len(replies) == WRITES
    assert figures["overlapping versions (valid x record time)"] == 0
    assert figures["facts.asserted events"] == len(accepted) > 0


@pytest.mark.parametrize("scenario", ["handover", "intention"])
def test_one_winner_races(live_server, scenario):
    client = make_client(f"races-{scenario}", rate_per_minute=1_000_000)
    play, _ = state_races.SCENARIOS[scenario]
    tally = state_races.Tally()
    with _stack.client(live_server.url, client.raw_key) as http:
        for n in range(4):  # both kinds of round, twice
            play(http, threads_race(live_server.url, client.raw_key), client.agent, n, 6, tally)
    assert tally.violations == []
    assert tally.requests == 4 * 6
    assert not [k for k in tally.answers if k.split()[1].startswith("5")]


def test_a_violation_is_reported():
    """The answer checks are not vacuous: a 5xx and a 409 without a code are violations."""
    lost = _stack.Reply("w9", 201, body={"outcome": "created", "fact": {"id": str(uuid.uuid4())}})
    broken = _stack.Reply("w8", 500, code="server_error", body={})
    unexplained = _stack.Reply("w7", 409, body={})
    accepted, violations = fact_storm.check_replies([lost, broken, unexplained])
    assert list(accepted) == ["w9"]
    assert violations == ["w8: 500 server_error: {}", "w7: 409 without an error code: {}"]
