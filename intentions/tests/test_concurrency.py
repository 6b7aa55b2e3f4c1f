"""Completing one occurrence of a recurring intention, many times at once.

A recurring intention that is completed moves on to its next occurrence, which
can itself be completed (early). So completions sent at once — duplicates from
an agent runtime that retries, or two workers — used to complete one
occurrence each: six concurrent completions of a daily intention consumed six
days (scripts/chaos/state_races.py showed it). Naming the occurrence makes the
completion a compare-and-set: one wins, the others are 409 stale_occurrence.

The race tests commit (transaction=True) and call from real threads, each with
its own database connection, as separate web processes would.
"""

from __future__ import annotations

import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection, transaction

from facts.tests.api_helpers import post
from intentions.models import Transition
from intentions.services.lifecycle import intention_complete, intention_skip
from intentions.tests.factories import T0, IntentionFactory, minutes, sim_agent
from piper.errors import Conflict

pytestmark = pytest.mark.django_db(transaction=True)


def race(calls) -> list:
    """Run the calls at once, each in its own thread, connection and transaction.
    Returns each call's result, its Conflict code, or the traceback of anything else."""
    start = threading.Barrier(len(calls))

    def run(call):
        try:
            start.wait(timeout=60)
            with transaction.atomic():
                return call()
        except Conflict as exc:
            return exc.code
        except Exception:
            return traceback.format_exc(limit=4)
        finally:
            connection.close()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def daily(agent):
    return IntentionFactory(
        agent=agent, trigger_type="time", due_at=T0 + minutes(10), rrule="FREQ=DAILY"
    )


def test_completing_one_occurrence_at_once_completes_it_once():
    agent = sim_agent()
    intention = daily(agent)

    outcomes = race(
        [
            lambda: intention_complete(agent=agent, intention_id=intention.pk, occurrence=1).pk
            for _ in range(6)
        ]
    )

    assert sorted(map(str, outcomes)) == sorted([str(intention.pk)] + ["stale_occurrence"] * 5)
    intention.refresh_from_db()
    assert (intention.status, intention.occurrence) == ("active", 2)
    assert intention.due_at == T0 + minutes(10 + 24 * 60)
    assert Transition.objects.filter(intention=intention, to_status="completed").count() == 1


def test_skipping_and_completing_one_occurrence_at_once_does_one_of_them():
    agent = sim_agent()
    intention = daily(agent)
    complete = lambda: intention_complete(agent=agent, intention_id=intention.pk, occurrence=1)  # noqa: E731
    skip = lambda: intention_skip(agent=agent, intention_id=intention.pk, occurrence=1)  # noqa: E731

    outcomes = race([complete, skip] * 3)

    assert sum(o == "stale_occurrence" for o in outcomes) == 5
    intention.refresh_from_db()
    assert intention.occurrence == 2
    assert Transition.objects.filter(intention=intention, to_status="completed").count() == 1


class TestApi:
    def test_a_passed_occurrence_is_409_stale_occurrence_and_changes_nothing(self, client_a):
        intention = daily(client_a.agent)
        url = f"/api/v1/intentions/{intention.pk}/complete"
        first = post(client_a, url, {"occurrence": 1})
        assert (first.status_code, first.json()["occurrence"]) == (200, 2)

        again = post(client_a, url, {"occurrence": 1})

        assert again.status_code == 409
        assert again.json() == {
            "error": {
                "code": "stale_occurrence",
                "message": "occurrence 1 is not pending: the intention is at occurrence 2; "
                "read it again",
                "details": {"current_occurrence": 2, "occurrence": 1},
            }
        }
        intention.refresh_from_db()
        assert intention.occurrence == 2
        assert Transition.objects.filter(intention=intention, to_status="completed").count() == 1

    def test_skip_takes_the_occurrence_too(self, client_a):
        intention = daily(client_a.agent)
        url = f"/api/v1/intentions/{intention.pk}/skip"

        assert post(client_a, url, {"occurrence": 2}).json()["error"]["code"] == "stale_occurrence"
        assert post(client_a, url, {"occurrence": 1}).status_code == 200
