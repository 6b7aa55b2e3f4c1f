"""The trigger engine: each trigger type, exactly-once firing, no zombies,
rehearsal, the webhook outbox, the post-commit hook and tenant isolation.

Most tests run an agent on a simulated clock (`sim_agent`, `at`) and drive the
engine the way the battery does (`engine.tick`, or one scan at a time), so
"on time" is an exact instant. Concurrency tests commit (transaction=True)
and race real threads, each with its own database connection.
"""

import hashlib
import hmac
import json
import random
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from facts.tests.factories import claim
from intentions import tasks
from intentions.models import (
    EventCursor,
    Firing,
    Intention,
    IntentionDependency,
    IntentionStatus,
    OutboxMessage,
    PendingItem,
    Transition,
    Webhook,
)
from intentions.services import dependencies, engine, firing, outbox
from intentions.services.firing import Fired
from intentions.services.lifecycle import (
    intention_cancel,
    intention_complete,
    intention_expire,
    intention_fire,
    intention_set_dependencies,
    intention_skip,
)
from intentions.services.state import pending_clear
from intentions.tests.factories import (
    T0,
    IntentionFactory,
    ThreadFactory,
    at,
    event_types,
    fired_events,
    firings,
    head_seq,
    in_status,
    intentions_state,
    minutes,
    sim_agent,
    status_of,
    timeline,
)
from intentions.tests.receiver import running_receiver
from ledger.models import Event
from ledger.selectors import chain_verify
from ledger.services import event_append
from piper.errors import Conflict, NotFound, Unprocessable
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


@pytest.fixture
def agent():
    return sim_agent("owner")


@pytest.fixture
def thread(agent):
    return ThreadFactory(agent=agent, key="main")


@pytest.fixture
def enqueued(monkeypatch):
    """The engine's own task entry points, recorded instead of sent to Redis."""
    calls = []
    for task in (tasks.match_events, tasks.check_states, tasks.deliver_outbox_message):
        monkeypatch.setattr(task, "delay", lambda *args, _n=task.name: calls.append((_n, *args)))
    return calls


def timed(agent, due_at, **fields):
    return IntentionFactory(agent=agent, trigger_type="time", due_at=due_at, **fields)


def on_event(agent, event_type, conditions=(), **fields):
    spec = {"event_type": event_type}
    if conditions:
        spec["conditions"] = list(conditions)
    return IntentionFactory(agent=agent, trigger_type="event", trigger_spec=spec, **fields)


def on_state(agent, subject, predicate, op="eq", value=None, **fields):
    spec = {"subject": subject, "predicate": predicate, "op": op}
    if op not in ("exists", "absent"):
        spec["value"] = value
    return IntentionFactory(agent=agent, trigger_type="state", trigger_spec=spec, **fields)


def fired_ids(results) -> list:
    return sorted(f.intention_id for f in results)


# ----------------------------------------------------------------------- time


class TestTimeTriggers:
    def test_fires_at_due_at_on_the_engine_clock_not_a_moment_before(self, agent, thread):
        intention = timed(agent, T0 + minutes(10), thread=thread, description="call Bob")
        at(agent, T0 + minutes(10) - timedelta(microseconds=1))
        assert engine.tick(agent=agent)["time"] == []
        assert status_of(intention) == IntentionStatus.ACTIVE

        at(agent, T0 + minutes(10))
        result = engine.tick(agent=agent)

        firing = Firing.objects.get(intention=intention)
        assert result["time"] == [Fired(intention.pk, 1, firing.pk)]
        assert firings(intention) == [(1, "time", T0 + minutes(10))]
        assert (firing.cause_event, firing.event.event_type) == (None, "intention.fired")
        assert firing.event.payload == {
            "intention_id": str(intention.pk),
            "firing_id": str(firing.pk),
            "occurrence": 1,
            "cause": "time",
            "cause_event_id": None,
            "fired_at": "2030-01-07T09:10:00+00:00",
            "description": "call Bob",
        }
        intention.refresh_from_db()
        assert (intention.status, intention.last_fired_at) == ("due", T0 + minutes(10))
        assert timeline(intention) == [
            ("", "active", 1, "created"),
            ("active", "due", 1, "fired by time"),
        ]
        assert list(
            PendingItem.objects.filter(thread=thread).values_list(
                "intention_id", "kind", "occurrence", "added_at", "cleared_at"
            )
        ) == [(intention.pk, "fired", 1, T0 + minutes(10), None)]

    def test_a_missed_moment_fires_once_when_the_engine_next_runs(self, agent):
        intention = timed(agent, T0 + minutes(10))

        at(agent, T0 + minutes(95))
        engine.tick(agent=agent)
        at(agent, T0 + minutes(200))
        engine.tick(agent=agent)

        assert firings(intention) == [(1, "time", T0 + minutes(95))]

    def test_not_before_holds_it_back(self, agent):
        intention = timed(agent, T0 + minutes(30), not_before=T0 + minutes(20))

        at(agent, T0 + minutes(25))
        assert engine.tick(agent=agent)["time"] == []
        at(agent, T0 + minutes(30))
        assert fired_ids(engine.tick(agent=agent)["time"]) == [intention.pk]

    def test_not_before_alone_fires_from_that_moment(self, agent):
        intention = IntentionFactory(agent=agent, trigger_type="time", not_before=T0 + minutes(20))

        at(agent, T0 + minutes(20))
        engine.tick(agent=agent)

        assert firings(intention) == [(1, "time", T0 + minutes(20))]

    def test_manual_event_state_and_dependency_intentions_are_not_time_scanned(self, agent):
        IntentionFactory(agent=agent)
        on_event(agent, "x")
        on_state(agent, "web", "status", "absent")
        in_status(agent, "blocked", trigger_type="dependency")
        at(agent, T0 + 400 * DAY)

        assert engine.scan_time(agent=agent) == []

    def test_wall_clock_scan(self):
        wall = AgentFactory()
        past = timed(wall, timezone.now() - timedelta(seconds=1))
        future = timed(wall, timezone.now() + timedelta(hours=1))

        assert fired_ids(engine.scan_time()) == [past.pk]
        assert (status_of(past), status_of(future)) == ("due", "active")


class TestRecurrence:
    def test_next_occurrence_only_after_completion_and_count_ends_it(self, agent):
        intention = timed(agent, T0, rrule="FREQ=DAILY;COUNT=3")

        engine.tick(agent=agent)
        at(agent, T0 + 2 * DAY + minutes(1))
        engine.tick(agent=agent)
        assert firings(intention) == [(1, "time", T0)]  # still due: occurrence 2 waits

        intention = intention_complete(agent=agent, intention_id=intention.pk)
        assert (intention.status, intention.occurrence, intention.due_at) == (
            "active",
            2,
            T0 + DAY,
        )
        engine.tick(agent=agent)
        intention_complete(agent=agent, intention_id=intention.pk)
        engine.tick(agent=agent)
        intention = intention_complete(agent=agent, intention_id=intention.pk)
        at(agent, T0 + 30 * DAY)
        engine.tick(agent=agent)

        assert (intention.status, intention.occurrence) == ("completed", 3)
        assert firings(intention) == [
            (1, "time", T0),
            (2, "time", T0 + 2 * DAY + minutes(1)),
            (3, "time", T0 + 2 * DAY + minutes(1)),
        ]
        assert [f[1] for f in timeline(intention)] == [
            "active",
            "due",
            "completed",
            "active",
            "due",
            "completed",
            "active",
            "due",
            "completed",
        ]

    def test_on_time_occurrences_each_fire_once_at_their_moment(self, agent):
        intention = timed(agent, T0, rrule="FREQ=HOURLY;INTERVAL=2")

        for hour in range(0, 7):
            at(agent, T0 + timedelta(hours=hour))
            engine.tick(agent=agent)
            if status_of(intention) == IntentionStatus.DUE:
                intention_complete(agent=agent, intention_id=intention.pk)

        assert firings(intention) == [
            (1, "time", T0),
            (2, "time", T0 + timedelta(hours=2)),
            (3, "time", T0 + timedelta(hours=4)),
            (4, "time", T0 + timedelta(hours=6)),
        ]
        assert Intention.objects.get(pk=intention.pk).due_at == T0 + timedelta(hours=8)

    def test_a_skipped_occurrence_never_fires(self, agent):
        intention = timed(agent, T0 + minutes(30), rrule="FREQ=DAILY")

        intention_skip(agent=agent, intention_id=intention.pk, reason="holiday")
        at(agent, T0 + minutes(30))
        engine.tick(agent=agent)
        at(agent, T0 + DAY + minutes(30))
        engine.tick(agent=agent)

        assert firings(intention) == [(2, "time", T0 + DAY + minutes(30))]


class TestExpiry:
    @pytest.mark.parametrize("status", ["active", "blocked", "due", "executing"])
    def test_an_open_intention_expires_when_expires_at_passes(self, agent, status):
        intention = in_status(agent, status, expires_at=T0 + minutes(60))

        at(agent, T0 + minutes(59))
        engine.tick(agent=agent)
        assert status_of(intention) == status
        at(agent, T0 + minutes(60))
        engine.tick(agent=agent)

        assert status_of(intention) == IntentionStatus.EXPIRED
        transition = Transition.objects.filter(intention=intention).order_by("id").last()
        assert (transition.from_status, transition.to_status, transition.reason, transition.at) == (
            status,
            "expired",
            "expires_at passed",
            T0 + minutes(60),
        )

    def test_without_expires_at_nothing_expires(self, agent):
        intention = IntentionFactory(agent=agent)
        at(agent, T0 + 3650 * DAY)

        engine.tick(agent=agent)

        assert status_of(intention) == IntentionStatus.ACTIVE

    def test_expiry_by_the_engine_cancels_the_blocked_dependents_it_dooms(self, agent):
        first = IntentionFactory(agent=agent, expires_at=T0 + minutes(60))
        second = IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[first.pk])
        third = IntentionFactory(agent=agent, trigger_type="manual", dependencies=[second.pk])
        since = head_seq(agent)

        at(agent, T0 + minutes(60))
        engine.tick(agent=agent)

        assert [status_of(i) for i in (first, second, third)] == [
            "expired",
            "cancelled",
            "cancelled",
        ]
        assert event_types(agent, since) == ["intention.expired"] + ["intention.cancelled"] * 2
        assert [timeline(i)[-1] for i in (second, third)] == [
            ("blocked", "cancelled", 1, f"dependency {first.pk} expired"),
            ("blocked", "cancelled", 1, f"dependency {second.pk} cancelled"),
        ]
        cancel = Event.objects.filter(agent=agent, seq__gt=since).order_by("seq")[1]
        assert cancel.payload == {
            "intention_id": str(second.pk),
            "from": "blocked",
            "to": "cancelled",
            "reason": f"dependency {first.pk} expired",
            "occurrence": 1,
            "at": "2030-01-07T10:00:00+00:00",
            "set": {},
        }
        at(agent, T0 + minutes(120))
        engine.tick(agent=agent)
        assert (head_seq(agent), firings(second), firings(third)) == (since + 3, [], [])

    def test_expiry_by_the_engine_leaves_a_fired_dependent_alone(self, agent):
        first = IntentionFactory(agent=agent, expires_at=T0 + minutes(60))
        dependent = IntentionFactory(agent=agent, dependencies=[first.pk])
        intention_fire(agent=agent, intention_id=dependent.pk)
        before = timeline(dependent)

        at(agent, T0 + minutes(60))
        engine.tick(agent=agent)

        assert (status_of(first), status_of(dependent), timeline(dependent)) == (
            "expired",
            "due",
            before,
        )

    def test_expiry_by_the_engine_is_in_the_ledger(self, agent):
        intention = IntentionFactory(agent=agent, expires_at=T0 + minutes(60))
        since = head_seq(agent)

        at(agent, T0 + minutes(60))
        engine.tick(agent=agent)

        assert event_types(agent, since) == ["intention.expired"]
        assert Transition.objects.filter(intention=intention).last().event is not None

    def test_an_intention_past_its_expiry_expires_without_firing(self, agent):
        intention = timed(agent, T0 + minutes(10), expires_at=T0 + minutes(60))

        at(agent, T0 + minutes(120))
        engine.tick(agent=agent)

        assert (status_of(intention), firings(intention)) == ("expired", [])


# ---------------------------------------------------------------------- events


EVENT_CASES = {
    "eq": ({"field": "payload.env", "op": "eq", "value": "prod"}, {"env": "prod"}, {"env": "dev"}),
    "eq by default": ({"field": "payload.env", "value": "prod"}, {"env": "prod"}, {"env": "dev"}),
    "ne": ({"field": "payload.env", "op": "ne", "value": "prod"}, {"env": "dev"}, {"env": "prod"}),
    "ne needs the field": ({"field": "payload.env", "op": "ne", "value": "prod"}, {"env": 1}, {}),
    "gt": ({"field": "payload.n", "op": "gt", "value": 5}, {"n": 6}, {"n": 5}),
    "gte": ({"field": "payload.n", "op": "gte", "value": 5}, {"n": 5}, {"n": 4.99}),
    "lt": ({"field": "payload.n", "op": "lt", "value": 5}, {"n": 4}, {"n": 5}),
    "lte": ({"field": "payload.n", "op": "lte", "value": 5}, {"n": 5}, {"n": 6}),
    "gt incomparable": ({"field": "payload.n", "op": "gt", "value": 5}, {"n": 7}, {"n": "ten"}),
    "gt not on booleans": ({"field": "payload.n", "op": "gt", "value": 0}, {"n": 1}, {"n": True}),
    "in": ({"field": "payload.x", "op": "in", "value": ["a", "b"]}, {"x": "b"}, {"x": "c"}),
    "contains": (
        {"field": "payload.msg", "op": "contains", "value": "err"},
        {"msg": "an error"},
        {"msg": "fine"},
    ),
    "exists": ({"field": "payload.ticket", "op": "exists"}, {"ticket": None}, {"other": 1}),
    "absent": ({"field": "payload.ticket", "op": "absent"}, {"other": 1}, {"ticket": "T-1"}),
    "list path": (
        {"field": "payload.items.0.sku", "value": "A1"},
        {"items": [{"sku": "A1"}]},
        {"items": []},
    ),
    "true is not 1": ({"field": "payload.flag", "value": True}, {"flag": True}, {"flag": 1}),
    "1 is not true": ({"field": "payload.flag", "value": 1}, {"flag": 1.0}, {"flag": True}),
}


class TestEventTriggers:
    @pytest.mark.parametrize("case", EVENT_CASES)
    def test_each_condition_op(self, agent, case):
        condition, matching, other = EVENT_CASES[case]
        intention = on_event(agent, "deploy.finished", [condition])

        event_append(agent=agent, event_type="deploy.finished", payload=other)
        assert engine.match_events(agent_id=agent.pk) == []
        match = event_append(agent=agent, event_type="deploy.finished", payload=matching)
        result = engine.match_events(agent_id=agent.pk)

        assert fired_ids(result) == [intention.pk]
        firing = Firing.objects.get(intention=intention)
        assert (firing.cause, firing.cause_event, firing.fired_at) == ("event", match, T0)
        assert (firing.event.parent_event_id, firing.event.payload["cause_event_id"]) == (
            match.pk,
            str(match.pk),
        )

    @pytest.mark.parametrize(
        ("pattern", "matching", "other"),
        [
            ("deploy.*", "deploy.finished", "deployment.finished"),
            ("*.failed", "build.failed", "build.failed.retry"),
            ("build.failed", "build.failed", "build.failed.retry"),
            ("build.[ab]*", "build.alpha", "build.gamma"),
        ],
    )
    def test_event_type_exact_or_glob(self, agent, pattern, matching, other):
        intention = on_event(agent, pattern)

        event_append(agent=agent, event_type=other)
        assert engine.match_events(agent_id=agent.pk) == []
        event_append(agent=agent, event_type=matching)

        assert fired_ids(engine.match_events(agent_id=agent.pk)) == [intention.pk]

    @pytest.mark.parametrize(
        ("condition", "fields"),
        [
            ({"field": "actor", "value": "ci-bot"}, {"actor": "ci-bot"}),
            ({"field": "session_id", "value": "s9"}, {"session_id": "s9"}),
            ({"field": "source_type", "value": "tool_result"}, {"source_type": "tool_result"}),
        ],
    )
    def test_conditions_on_event_columns(self, agent, condition, fields):
        intention = on_event(agent, "build.done", [condition])

        event_append(agent=agent, event_type="build.done")
        assert engine.match_events(agent_id=agent.pk) == []
        event_append(agent=agent, event_type="build.done", **fields)

        assert fired_ids(engine.match_events(agent_id=agent.pk)) == [intention.pk]

    def test_all_conditions_must_hold(self, agent):
        intention = on_event(
            agent,
            "order.placed",
            [
                {"field": "payload.total", "op": "gte", "value": 100},
                {"field": "payload.country", "op": "in", "value": ["FR", "DE"]},
            ],
        )

        event_append(
            agent=agent, event_type="order.placed", payload={"total": 150, "country": "US"}
        )
        event_append(agent=agent, event_type="order.placed", payload={"total": 50, "country": "FR"})
        assert engine.match_events(agent_id=agent.pk) == []
        event_append(
            agent=agent, event_type="order.placed", payload={"total": 100, "country": "DE"}
        )

        assert fired_ids(engine.match_events(agent_id=agent.pk)) == [intention.pk]

    def test_only_events_after_the_intention_was_created(self, agent):
        before = event_append(agent=agent, event_type="deploy.finished", payload={"env": "prod"})
        intention = on_event(agent, "deploy.finished")

        assert engine.match_events(agent_id=agent.pk) == []
        assert EventCursor.objects.get(agent=agent).last_seq == head_seq(agent)
        after = event_append(agent=agent, event_type="deploy.finished")
        engine.match_events(agent_id=agent.pk)

        assert Firing.objects.get(intention=intention).cause_event == after != before

    def test_among_distractors_fires_once_on_the_first_match(self, agent):
        intention = on_event(agent, "deploy.finished", [{"field": "payload.env", "value": "prod"}])
        for n in range(30):
            event_append(agent=agent, event_type=f"noise.{n % 3}", payload={"env": "prod"})
            event_append(agent=agent, event_type="deploy.finished", payload={"env": "dev"})
        first = event_append(agent=agent, event_type="deploy.finished", payload={"env": "prod"})
        event_append(agent=agent, event_type="deploy.finished", payload={"env": "prod"})

        engine.match_events(agent_id=agent.pk)
        engine.match_events(agent_id=agent.pk)
        event_append(agent=agent, event_type="deploy.finished", payload={"env": "prod"})
        engine.match_events(agent_id=agent.pk)

        assert Firing.objects.get(intention=intention).cause_event == first
        assert fired_events(agent) == [(str(intention.pk), 1, "event")]

    def test_not_before_holds_an_event_trigger_back(self, agent):
        intention = on_event(agent, "deploy.done", not_before=T0 + minutes(60))

        event_append(agent=agent, event_type="deploy.done")
        engine.match_events(agent_id=agent.pk)

        assert (status_of(intention), firings(intention)) == ("active", [])

    def test_intention_fired_events_never_match(self, agent):
        watcher = on_event(agent, "intention.fired")
        other = IntentionFactory(agent=agent)

        intention_fire(agent=agent, intention_id=other.pk)
        engine.match_events(agent_id=agent.pk)

        assert status_of(watcher) == IntentionStatus.ACTIVE

    def test_each_of_several_intentions_fires_on_its_own_event(self, agent):
        deploys = on_event(agent, "deploy.*")
        alerts = on_event(agent, "alert.raised")
        both = on_event(agent, "*")
        deploy = event_append(agent=agent, event_type="deploy.done")
        alert = event_append(agent=agent, event_type="alert.raised")

        engine.match_events(agent_id=agent.pk)

        assert {
            i.description: Firing.objects.get(intention=i).cause_event_id
            for i in (deploys, alerts, both)
        } == {
            deploys.description: deploy.pk,
            alerts.description: alert.pk,
            both.description: deploy.pk,
        }

    def test_a_long_backlog_is_read_in_chunks(self, agent, monkeypatch):
        monkeypatch.setattr(engine, "EVENT_CHUNK", 7)
        intention = on_event(agent, "needle")
        for n in range(30):
            event_append(agent=agent, event_type="hay", payload={"n": n})
        needle = event_append(agent=agent, event_type="needle")

        engine.match_events(agent_id=agent.pk)

        assert Firing.objects.get(intention=intention).cause_event == needle
        assert EventCursor.objects.get(agent=agent).last_seq == needle.seq


# ---------------------------------------------------------------------- states


STATE_CASES = {
    "eq": ("status", "down", "eq", "down", "up"),
    "ne": ("status", "up", "ne", "down", "down"),
    "gt": ("cpu", 95, "gt", 90, 90),
    "gte": ("cpu", 90, "gte", 90, 89),
    "lt": ("disk_free", 4, "lt", 5, 5),
    "lte": ("disk_free", 5, "lte", 5, 6),
    "in": ("status", "degraded", "in", ["down", "degraded"], "up"),
    "contains": ("banner", "maintenance tonight", "contains", "maintenance", "all good"),
}


class TestStateTriggers:
    @pytest.mark.parametrize("case", STATE_CASES)
    def test_each_op_over_current_facts(self, agent, case):
        predicate, holds, op, value, does_not = STATE_CASES[case]
        intention = on_state(agent, "web", predicate, op, value)
        claim(agent, "web", predicate, does_not, T0 - DAY)

        assert engine.check_states(agent=agent) == []
        claim(agent, "web", predicate, holds, T0 - minutes(1))
        result = engine.check_states(agent=agent)

        assert fired_ids(result) == [intention.pk]
        assert firings(intention) == [(1, "state", T0)]

    def test_exists_and_absent(self, agent):
        exists = on_state(agent, "web", "owner", "exists")
        absent = on_state(agent, "web", "owner", "absent")

        assert fired_ids(engine.check_states(agent=agent)) == [absent.pk]
        claim(agent, "web", "owner", "ops team", T0 - DAY)
        assert fired_ids(engine.check_states(agent=agent)) == [exists.pk]

    def test_only_facts_valid_at_the_engine_clock_count(self, agent):
        intention = on_state(agent, "web", "status", "eq", "down")
        claim(agent, "web", "status", "down", T0 - 2 * DAY, T0 - DAY)  # over before now
        claim(agent, "web", "status", "down", T0 + minutes(30))  # not yet

        assert engine.check_states(agent=agent) == []
        at(agent, T0 + minutes(30))
        engine.check_states(agent=agent)

        assert firings(intention) == [(1, "state", T0 + minutes(30))]

    def test_a_superseded_value_no_longer_counts(self, agent):
        claim(agent, "web", "status", "down", T0 - DAY)
        claim(agent, "web", "status", "up", T0 - minutes(5))
        intention = on_state(agent, "web", "status", "eq", "down")

        assert engine.check_states(agent=agent) == []
        assert status_of(intention) == IntentionStatus.ACTIVE

    def test_a_related_entity_compares_by_name_and_the_subject_may_be_an_id(self, agent):
        applied = claim(agent, "web", "runs_on", object_entity="host-1", valid_from=T0 - DAY)
        intention = on_state(agent, str(applied.fact.subject_id), "runs_on", "eq", "host-1")

        assert fired_ids(engine.check_states(agent=agent)) == [intention.pk]

    def test_an_unknown_subject_or_predicate_is_absent_not_an_error(self, agent):
        unknown_subject = on_state(agent, "nobody", "status", "eq", "down")
        unknown_predicate = on_state(agent, "web", "mood", "absent")
        claim(agent, "web", "status", "down", T0 - DAY)

        assert fired_ids(engine.check_states(agent=agent)) == [unknown_predicate.pk]
        assert status_of(unknown_subject) == IntentionStatus.ACTIVE

    def test_fires_once_while_the_condition_keeps_holding(self, agent):
        intention = on_state(agent, "web", "status", "eq", "down")
        claim(agent, "web", "status", "down", T0 - DAY)

        for minute in range(3):
            at(agent, T0 + minutes(minute))
            engine.check_states(agent=agent)

        assert firings(intention) == [(1, "state", T0)]


# ------------------------------------------------------------- dependency, manual


class TestDependencyAndManual:
    def test_fires_when_all_dependencies_complete_not_before(self, agent):
        first, second = IntentionFactory(agent=agent), IntentionFactory(agent=agent)
        dependent = IntentionFactory(
            agent=agent, trigger_type="dependency", dependencies=[first.pk, second.pk]
        )

        intention_complete(agent=agent, intention_id=first.pk)
        at(agent, T0 + minutes(5))
        engine.tick(agent=agent)
        assert status_of(dependent) == IntentionStatus.BLOCKED
        at(agent, T0 + minutes(9))
        intention_complete(agent=agent, intention_id=second.pk)

        assert firings(dependent) == [(1, "dependency", T0 + minutes(9))]

    def test_a_cancelled_dependency_never_releases_its_dependent_it_cancels_it(self, agent):
        first = IntentionFactory(agent=agent)
        dependent = IntentionFactory(
            agent=agent, trigger_type="dependency", dependencies=[first.pk]
        )

        intention_cancel(agent=agent, intention_id=first.pk)
        engine.tick(agent=agent)

        assert (status_of(dependent), firings(dependent)) == ("cancelled", [])

    def test_a_chain_fires_in_order(self, agent):
        first = IntentionFactory(agent=agent)
        second = IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[first.pk])
        third = IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[second.pk])

        intention_complete(agent=agent, intention_id=first.pk)
        assert (status_of(second), status_of(third)) == ("due", "blocked")
        intention_complete(agent=agent, intention_id=second.pk)
        assert status_of(third) == "due"

    def test_a_time_intention_with_a_dependency_still_waits_for_its_time(self, agent):
        first = IntentionFactory(agent=agent)
        later = timed(agent, T0 + minutes(60), dependencies=[first.pk])

        intention_complete(agent=agent, intention_id=first.pk)

        assert (status_of(later), firings(later)) == ("active", [])

    def test_completing_an_occurrence_of_a_recurring_dependency_releases_the_dependent(self, agent):
        daily = timed(agent, T0, rrule="FREQ=DAILY;COUNT=5")
        dependent = IntentionFactory(
            agent=agent, trigger_type="dependency", dependencies=[daily.pk]
        )
        engine.tick(agent=agent)

        intention_complete(agent=agent, intention_id=daily.pk)

        assert firings(dependent) == [(1, "dependency", T0)]

    def test_manual_fires_only_when_asked(self, agent):
        intention = IntentionFactory(agent=agent)
        at(agent, T0 + 100 * DAY)
        engine.tick(agent=agent)
        assert status_of(intention) == IntentionStatus.ACTIVE

        intention_fire(agent=agent, intention_id=intention.pk)

        assert firings(intention) == [(1, "manual", T0 + 100 * DAY)]


class TestARecurringDependency:
    """Rule (lifecycle): a dependency on a recurring intention is met by its
    first successful completion of an occurrence; if the series ends with none
    (cancelled, expired, or run out on a skip), what waits on it is cancelled."""

    def _waiting(self, agent, *dependencies, trigger_type="dependency"):
        return IntentionFactory(
            agent=agent, trigger_type=trigger_type, dependencies=[d.pk for d in dependencies]
        )

    def test_met_by_the_first_completed_occurrence_after_skips(self, agent):
        daily = timed(agent, T0, rrule="FREQ=DAILY;COUNT=4")
        dependent = self._waiting(agent, daily)
        intention_skip(agent=agent, intention_id=daily.pk)
        assert status_of(dependent) == "blocked"

        intention_complete(agent=agent, intention_id=daily.pk)  # occurrence 2
        intention_skip(agent=agent, intention_id=daily.pk)
        intention_complete(agent=agent, intention_id=daily.pk)  # the last

        assert firings(dependent) == [(1, "dependency", T0)]
        assert status_of(daily) == "completed"

    def test_a_series_run_out_on_skips_cancels_what_waits_on_it(self, agent):
        daily = timed(agent, T0, rrule="FREQ=DAILY;COUNT=2")
        fires_after = self._waiting(agent, daily)
        manual_after = self._waiting(agent, daily, trigger_type="manual")
        tail = self._waiting(agent, fires_after)
        intention_skip(agent=agent, intention_id=daily.pk)
        assert {status_of(i) for i in (fires_after, manual_after, tail)} == {"blocked"}
        since = head_seq(agent)

        ended = intention_skip(agent=agent, intention_id=daily.pk, reason="no longer needed")

        assert (ended.status, ended.occurrence) == ("completed", 2)
        reason = f"dependency {daily.pk} ended without success"
        for dependent in (fires_after, manual_after):
            assert timeline(dependent)[-1] == ("blocked", "cancelled", 1, reason)
        assert timeline(tail)[-1] == (
            "blocked",
            "cancelled",
            1,
            f"dependency {fires_after.pk} cancelled",
        )
        assert event_types(agent, since) == ["intention.completed"] + ["intention.cancelled"] * 3
        engine.tick(agent=agent)
        assert [firings(i) for i in (fires_after, manual_after, tail)] == [[], [], []]

    def test_a_series_cut_short_by_expires_at_on_a_skip_is_ended_too(self, agent):
        daily = timed(
            agent, T0, rrule="FREQ=DAILY;COUNT=5", expires_at=T0 + DAY + timedelta(hours=12)
        )
        dependent = self._waiting(agent, daily)
        intention_skip(agent=agent, intention_id=daily.pk)
        assert (status_of(daily), status_of(dependent)) == ("active", "blocked")

        intention_skip(agent=agent, intention_id=daily.pk)  # the next would be past expiry

        assert (status_of(daily), status_of(dependent)) == ("completed", "cancelled")
        assert timeline(dependent)[-1][3] == f"dependency {daily.pk} ended without success"

    def test_expired_by_the_engine_after_skips_cancels_what_waits_on_it(self, agent):
        daily = timed(agent, T0, rrule="FREQ=DAILY;COUNT=5", expires_at=T0 + 3 * DAY)
        dependent = self._waiting(agent, daily)
        intention_skip(agent=agent, intention_id=daily.pk)
        at(agent, T0 + 3 * DAY)

        engine.tick(agent=agent)

        assert (status_of(daily), status_of(dependent)) == ("expired", "cancelled")
        assert timeline(dependent)[-1][3] == f"dependency {daily.pk} expired"

    def test_a_series_done_once_then_run_out_on_a_skip_still_counts_as_done(self, agent):
        daily = timed(agent, T0, rrule="FREQ=DAILY;COUNT=2")
        other = IntentionFactory(agent=agent)
        dependent = self._waiting(agent, daily, other)
        intention_complete(agent=agent, intention_id=daily.pk)
        since = head_seq(agent)

        intention_skip(agent=agent, intention_id=daily.pk)

        assert event_types(agent, since) == ["intention.completed"]
        assert status_of(dependent) == "blocked"
        intention_complete(agent=agent, intention_id=other.pk)
        assert status_of(dependent) == "due"

    def test_a_series_run_out_on_skips_never_counts_as_done(self, agent):
        daily = timed(agent, T0, rrule="FREQ=DAILY;COUNT=1")
        intention_skip(agent=agent, intention_id=daily.pk)
        waiting = IntentionFactory(agent=agent)
        message = (
            f"dependency {daily.pk} ended without success (every occurrence was skipped): "
            "this intention could never have every dependency met"
        )

        for attempt in (
            lambda: self._waiting(agent, daily),
            lambda: intention_set_dependencies(
                agent=agent, intention=waiting, dependencies=[daily.pk]
            ),
        ):
            with pytest.raises(Unprocessable) as refused:
                attempt()
            assert (refused.value.code, refused.value.message) == ("dependency_ended", message)
        assert dependencies.unmet([Intention.objects.get(pk=daily.pk)]) is True


# ----------------------------------------------------------------- exactly once


class TestExactlyOnce:
    def test_the_same_firing_delivered_twice_fires_once(self, agent, thread):
        intention = IntentionFactory(agent=agent, thread=thread)

        first = firing.fire(intention_id=intention.pk, occurrence=1, cause="manual", at=T0)
        state = intentions_state()
        second = firing.fire(intention_id=intention.pk, occurrence=1, cause="manual", at=T0)

        assert first is not None and second is None
        assert intentions_state() == state
        assert fired_events(agent) == [(str(intention.pk), 1, "manual")]
        assert PendingItem.objects.filter(intention=intention).count() == 1

    def test_a_stale_occurrence_does_not_fire_the_next(self, agent):
        intention = timed(agent, T0, rrule="FREQ=DAILY")
        engine.tick(agent=agent)
        intention_complete(agent=agent, intention_id=intention.pk)  # now occurrence 2
        at(agent, T0 + DAY)

        late_duplicate = firing.fire(intention_id=intention.pk, occurrence=1, cause="time", at=T0)

        assert late_duplicate is None
        assert status_of(intention) == IntentionStatus.ACTIVE

    def test_duplicate_task_deliveries(self, agent):
        timed_one = timed(agent, T0)
        evented = on_event(agent, "ping")
        stated = on_state(agent, "web", "status", "eq", "down")
        event_append(agent=agent, event_type="ping")
        claim(agent, "web", "status", "down", T0 - DAY)

        for _ in range(3):
            tasks.match_events(str(agent.pk))
            tasks.check_states(str(agent.pk))
            engine.tick(agent=agent)

        assert [len(firings(i)) for i in (timed_one, evented, stated)] == [1, 1, 1]
        assert len(fired_events(agent)) == 3

    def test_a_state_recheck_for_an_unknown_agent_is_a_no_op(self):
        tasks.check_states("00000000-0000-0000-0000-000000000000")


def in_thread(fn):
    """Run fn with its own connection, closed afterwards so the test database can be flushed."""

    def run(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return run


def race(workers: int, work) -> list:
    """Start `workers` threads at once; each runs work(i). Returns, per worker, its
    result or the traceback of what it raised (as a str starting 'Traceback')."""
    start = threading.Barrier(workers)

    @in_thread
    def run(i):
        start.wait(timeout=60)
        try:
            return work(i)
        except Exception:
            return traceback.format_exc(limit=4)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, range(workers)))


def errors(outcomes) -> list[str]:
    return [o for o in outcomes if isinstance(o, str) and o.startswith("Traceback")]


def assert_fired_exactly_once(intentions, cause: str):
    ids = [i.pk for i in intentions]
    assert sorted(
        Firing.objects.filter(intention__in=ids).values_list("intention_id", flat=True)
    ) == sorted(ids)
    assert set(Intention.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"due"}
    assert Transition.objects.filter(intention__in=ids, to_status="due").count() == len(ids)
    fired = Event.objects.filter(
        event_type="intention.fired", payload__intention_id__in=[str(i) for i in ids]
    )
    assert sorted(fired.values_list("payload__intention_id", flat=True)) == sorted(
        str(i) for i in ids
    )
    assert set(fired.values_list("payload__cause", flat=True)) == {cause}


@pytest.mark.django_db(transaction=True)
class TestExactlyOnceUnderConcurrency:
    def test_twenty_threads_firing_and_scanning_the_same_due_intentions(self, enqueued):
        agents = [AgentFactory() for _ in range(3)]
        due = [timed(agents[n % 3], timezone.now() - timedelta(seconds=n + 1)) for n in range(30)]

        def work(i):
            if i % 2:
                return engine.scan_time()
            order = due[:]
            random.Random(i).shuffle(order)
            return [
                firing.fire(intention_id=x.pk, occurrence=1, cause="time", at=timezone.now())
                for x in order
            ]

        outcomes = race(20, work)

        assert errors(outcomes) == []
        results = [f for outcome in outcomes for f in outcome if f is not None]
        assert fired_ids(results) == sorted(i.pk for i in due)  # each fired by exactly one
        assert_fired_exactly_once(due, "time")
        assert all(chain_verify(agent=a).ok for a in agents)

    def test_two_beats_scanning_at_once_share_the_work(self, enqueued):
        agents = [AgentFactory() for _ in range(4)]
        past = timezone.now() - timedelta(minutes=1)
        due = [timed(agents[n % 4], past - timedelta(seconds=n % 7)) for n in range(120)]

        outcomes = race(2, lambda i: engine.scan_time(chunk=25))

        assert errors(outcomes) == []
        assert fired_ids(outcomes[0] + outcomes[1]) == sorted(i.pk for i in due)
        assert_fired_exactly_once(due, "time")

    def test_event_matching_run_by_several_workers_fires_each_intention_once(self, enqueued):
        agent = AgentFactory()
        watchers = [on_event(agent, f"job.{n % 5}") for n in range(20)]
        for n in range(40):
            event_append(agent=agent, event_type=f"job.{n % 5}", payload={"n": n})

        outcomes = race(8, lambda i: engine.match_events(agent_id=agent.pk))

        assert errors(outcomes) == []
        assert fired_ids([f for o in outcomes for f in o]) == sorted(w.pk for w in watchers)
        assert_fired_exactly_once(watchers, "event")
        assert EventCursor.objects.get(agent=agent).last_seq == head_seq(agent)
        assert chain_verify(agent=agent).ok

    def test_state_rechecks_racing_fire_each_intention_once(self, enqueued):
        agent = AgentFactory()
        claim(agent, "web", "status", "down")
        watchers = [on_state(agent, "web", "status", "eq", "down") for _ in range(10)]

        outcomes = race(6, lambda i: engine.check_states(agent=agent))

        assert errors(outcomes) == []
        assert fired_ids([f for o in outcomes for f in o]) == sorted(w.pk for w in watchers)
        assert_fired_exactly_once(watchers, "state")

    def test_ending_dependencies_at_once_cancels_their_dependents_once(self, enqueued):
        agent = AgentFactory()
        roots = [IntentionFactory(agent=agent) for _ in range(3)]
        ids = [r.pk for r in roots]
        # Each waits on every root; a chain hangs off each (locks in two orders).
        shared = [
            IntentionFactory(agent=agent, trigger_type="dependency", dependencies=ids)
            for _ in range(3)
        ]
        tails = [
            IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[s.pk])
            for s in shared
        ]

        def work(i):
            end = intention_cancel if i % 2 else intention_expire
            try:  # a root already ended one way cannot end the other
                return end(agent=agent, intention_id=roots[i % 3].pk).status
            except Conflict as exc:
                return exc.code

        outcomes = race(6, work)

        assert errors(outcomes) == []
        assert set(outcomes) <= {"cancelled", "expired", "invalid_transition"}
        doomed = [*shared, *tails]
        assert {status_of(i) for i in doomed} == {"cancelled"}
        assert Transition.objects.filter(intention__in=doomed, to_status="cancelled").count() == 6
        assert (
            Event.objects.filter(
                event_type="intention.cancelled",
                payload__intention_id__in=[str(i.pk) for i in doomed],
            ).count()
            == 6
        )
        assert chain_verify(agent=agent).ok

    def test_a_dependency_completed_and_another_cancelled_at_once(self, enqueued):
        agent = AgentFactory()
        done, dropped = IntentionFactory(agent=agent), IntentionFactory(agent=agent)
        dependents = [
            IntentionFactory(
                agent=agent, trigger_type="dependency", dependencies=[done.pk, dropped.pk]
            )
            for _ in range(4)
        ]

        def work(i):
            if i == 0:
                return intention_complete(agent=agent, intention_id=done.pk).status
            return intention_cancel(agent=agent, intention_id=dropped.pk).status

        outcomes = race(2, work)

        assert outcomes == ["completed", "cancelled"]
        assert {status_of(d) for d in dependents} == {"cancelled"}
        assert Firing.objects.filter(intention__in=dependents).count() == 0
        assert chain_verify(agent=agent).ok

    def test_completing_twice_at_once_fires_the_dependent_once(self, enqueued):
        agent = AgentFactory()
        first = IntentionFactory(agent=agent)
        dependents = [
            IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[first.pk])
            for _ in range(5)
        ]

        def work(i):
            try:
                return intention_complete(agent=agent, intention_id=first.pk).status
            except Conflict as exc:
                return exc.code

        outcomes = race(6, work)

        assert sorted(outcomes) == ["completed"] + ["invalid_transition"] * 5
        assert_fired_exactly_once(dependents, "dependency")


@pytest.mark.django_db(transaction=True)
def test_event_matching_for_an_unknown_agent_is_a_no_op():
    tasks.match_events("00000000-0000-0000-0000-000000000000")

    assert EventCursor.objects.count() == 0


@pytest.mark.django_db(transaction=True)
class TestLockOrder:
    """Services lock an intention row, then the agent's ledger chain head
    (event_append). These tests pin the interleavings where the engine takes
    them the other way round."""

    def _pinned(self, hold_row_then, act) -> list:
        """One thread locks `row` first (as a service's first step does) and,
        once `act` is running in another thread, calls `hold_row_then`."""
        locked = threading.Event()

        @in_thread
        def holder(row_pk):
            try:
                with transaction.atomic():
                    Intention.objects.select_for_update().get(pk=row_pk)
                    locked.set()
                    time.sleep(0.5)  # the other thread now holds the chain head and waits
                    hold_row_then()
                return None
            except Exception:
                return traceback.format_exc(limit=3)

        @in_thread
        def actor():
            locked.wait(timeout=10)
            try:
                act()
                return None
            except Exception:
                return traceback.format_exc(limit=3)

        return holder, actor

    def test_completing_a_dependency_while_its_dependent_is_cancelled(self, enqueued):
        agent = AgentFactory()
        first = IntentionFactory(agent=agent)
        dependent = IntentionFactory(
            agent=agent, trigger_type="dependency", dependencies=[first.pk]
        )
        holder, actor = self._pinned(
            lambda: intention_cancel(agent=agent, intention_id=dependent.pk),
            lambda: intention_complete(agent=agent, intention_id=first.pk),
        )

        with ThreadPoolExecutor(2) as pool:
            outcomes = [pool.submit(holder, dependent.pk), pool.submit(actor)]
            outcomes = [f.result() for f in outcomes]

        assert outcomes == [None, None]

    def test_matching_events_while_a_matching_intention_is_cancelled(self, enqueued):
        agent = AgentFactory()
        on_event(agent, "ping", priority=9)
        second = on_event(agent, "ping")
        event_append(agent=agent, event_type="ping")
        holder, actor = self._pinned(
            lambda: intention_cancel(agent=agent, intention_id=second.pk),
            lambda: engine.match_events(agent_id=agent.pk),
        )

        with ThreadPoolExecutor(2) as pool:
            outcomes = [pool.submit(holder, second.pk), pool.submit(actor)]
            outcomes = [f.result() for f in outcomes]

        assert outcomes == [None, None]


def backend_pid() -> int:
    connection.ensure_connection()
    return connection.connection.info.backend_pid


class InThread:
    """`work()` in a thread with its own connection; with `hold`, inside a
    transaction kept open (after `work` returns or raises) until release()."""

    def __init__(self, work, *, hold: bool = False):
        self.pid: int | None = None
        self.done = threading.Event()
        self._go = threading.Event()
        self._hold = hold
        self._work = work
        self._pool = ThreadPoolExecutor(1)
        self.future = self._pool.submit(in_thread(self._run))
        started = time.monotonic()
        while self.pid is None and time.monotonic() - started < 10:
            time.sleep(0.01)

    def _run(self):
        self.pid = backend_pid()
        try:
            with transaction.atomic():
                try:
                    result = self._work()
                finally:
                    self.done.set()
                if self._hold:
                    self._go.wait(timeout=60)
            return result
        except Exception as exc:
            return exc

    def waits_for_a_lock(self, timeout: float = 10) -> None:
        """Return once this thread's statement waits on a lock; fail if it finishes instead."""
        deadline = time.monotonic() + timeout
        while True:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [self.pid]
                )
                if cursor.fetchone() == ("Lock",):
                    return
            if self.done.is_set():
                raise AssertionError(f"finished without waiting for a lock: {self.future}")
            if time.monotonic() > deadline:
                raise AssertionError("never waited for a lock")
            time.sleep(0.01)

    def result(self):
        self._go.set()
        try:
            return self.future.result(timeout=60)
        finally:
            self._pool.shutdown()


def blocked_on_ended(agent) -> list:
    """Blocked intentions with a dependency that ended undone: they would wait forever."""
    return sorted(
        IntentionDependency.objects.filter(
            intention__agent=agent,
            intention__status=IntentionStatus.BLOCKED,
            depends_on__status__in=[IntentionStatus.CANCELLED, IntentionStatus.EXPIRED],
        ).values_list("intention_id", flat=True)
    )


def dependent_of(agent, *dependencies):
    return lambda: IntentionFactory(
        agent=agent, trigger_type="dependency", dependencies=[d.pk for d in dependencies]
    )


@pytest.mark.django_db(transaction=True)
class TestCreatingADependentWhileItsDependencyEnds:
    """intention_create locks the dependencies before reading their status; the
    cascades of cancel, expiry and completion lock them before reading the dependents."""

    @pytest.mark.parametrize("end", [intention_cancel, intention_expire])
    def test_ended_first_the_creation_waits_and_is_refused(self, enqueued, end):
        agent = AgentFactory()
        first = IntentionFactory(agent=agent)
        ending = InThread(lambda: end(agent=agent, intention_id=first.pk), hold=True)
        assert ending.done.wait(timeout=10)

        creating = InThread(dependent_of(agent, first))
        creating.waits_for_a_lock()  # rather than read past the uncommitted end
        assert ending.result().status in ("cancelled", "expired")
        refused = creating.result()

        assert isinstance(refused, Unprocessable), refused
        assert refused.code == "dependency_ended"
        assert list(Intention.objects.filter(agent=agent).values_list("pk", flat=True)) == [
            first.pk
        ]

    @pytest.mark.parametrize("end", [intention_cancel, intention_expire])
    def test_created_first_the_end_waits_and_cancels_the_new_dependent(self, enqueued, end):
        agent = AgentFactory()
        first = IntentionFactory(agent=agent)
        creating = InThread(dependent_of(agent, first), hold=True)
        assert creating.done.wait(timeout=10)

        ending = InThread(lambda: end(agent=agent, intention_id=first.pk))
        ending.waits_for_a_lock()  # else its cascade misses the uncommitted dependent
        dependent = creating.result()
        how = ending.result().status

        assert dependent.status == "blocked"
        assert timeline(dependent) == [
            ("", "blocked", 1, "created"),
            ("blocked", "cancelled", 1, f"dependency {first.pk} {how}"),
        ]
        assert blocked_on_ended(agent) == []
        assert chain_verify(agent=agent).ok

    def test_completed_first_the_creation_waits_and_finds_it_done(self, enqueued):
        agent = AgentFactory()
        first = IntentionFactory(agent=agent)
        completing = InThread(
            lambda: intention_complete(agent=agent, intention_id=first.pk), hold=True
        )
        assert completing.done.wait(timeout=10)

        # A manual intention waiting on it: its status is decided once, at creation.
        creating = InThread(lambda: IntentionFactory(agent=agent, dependencies=[first.pk]))
        creating.waits_for_a_lock()
        assert completing.result().status == "completed"
        dependent = creating.result()

        assert (dependent.status, status_of(dependent)) == ("active", "active")
        assert timeline(dependent) == [("", "active", 1, "created")]

    def test_created_first_a_completion_waits_and_releases_the_new_dependent(self, enqueued):
        agent = AgentFactory()
        first = IntentionFactory(agent=agent)
        creating = InThread(dependent_of(agent, first), hold=True)
        assert creating.done.wait(timeout=10)

        completing = InThread(lambda: intention_complete(agent=agent, intention_id=first.pk))
        completing.waits_for_a_lock()
        dependent = creating.result()
        assert completing.result().status == "completed"

        assert (dependent.status, status_of(dependent)) == ("blocked", "due")
        [(occurrence, cause, _)] = firings(dependent)
        assert (occurrence, cause) == (1, "dependency")

    def test_ended_first_new_dependencies_of_an_intention_are_refused(self, enqueued):
        agent = AgentFactory()
        first, waiting = IntentionFactory(agent=agent), IntentionFactory(agent=agent)
        ending = InThread(lambda: intention_cancel(agent=agent, intention_id=first.pk), hold=True)
        assert ending.done.wait(timeout=10)

        setting = InThread(
            lambda: intention_set_dependencies(
                agent=agent, intention=waiting, dependencies=[first.pk]
            )
        )
        setting.waits_for_a_lock()
        assert ending.result().status == "cancelled"
        refused = setting.result()

        assert isinstance(refused, Unprocessable), refused
        assert refused.code == "dependency_ended"
        assert (status_of(waiting), blocked_on_ended(agent)) == ("active", [])

    def test_dependencies_are_locked_before_the_ones_waiting_on_them(self, enqueued):
        # `later` waits on `earlier`, yet has the smaller pk: pk order alone
        # would lock `later` first, against the cascade's order (earlier, then
        # its dependents), and deadlock with the cancel below.
        agent = AgentFactory()
        later = IntentionFactory(agent=agent)
        earlier = IntentionFactory(agent=agent)
        intention_set_dependencies(agent=agent, intention=later, dependencies=[earlier.pk])
        assert later.pk < earlier.pk and status_of(later) == "blocked"
        holder = InThread(
            lambda: Intention.objects.select_for_update().get(pk=earlier.pk), hold=True
        )
        assert holder.done.wait(timeout=10)
        cancelling = InThread(lambda: intention_cancel(agent=agent, intention_id=earlier.pk))
        cancelling.waits_for_a_lock()
        creating = InThread(dependent_of(agent, later, earlier))
        creating.waits_for_a_lock()

        holder.result()
        cancelled, created = cancelling.result(), creating.result()

        assert getattr(cancelled, "status", cancelled) == "cancelled"
        assert isinstance(created, Unprocessable), created  # not a deadlock victim
        assert created.code == "dependency_ended"
        assert status_of(later) == "cancelled"
        assert blocked_on_ended(agent) == []

    def test_racing_creations_and_cancels_never_leave_one_blocked_on_an_ended_one(self, enqueued):
        agent = AgentFactory()
        for _ in range(12):
            first = IntentionFactory(agent=agent)

            def work(i, first=first):
                if i == 0:
                    return intention_cancel(agent=agent, intention_id=first.pk).status
                try:
                    return dependent_of(agent, first)().status
                except Unprocessable as exc:
                    return exc.code

            outcomes = race(3, work)

            assert errors(outcomes) == []
            assert outcomes[0] == "cancelled"
            assert set(outcomes[1:]) <= {"blocked", "dependency_ended"}
        assert blocked_on_ended(agent) == []
        assert not Intention.objects.filter(agent=agent, status="blocked").exists()
        assert chain_verify(agent=agent).ok


# --------------------------------------------------------------------- zombies


def _armed(agent, trigger_type):
    """An intention of `trigger_type` whose cue can be made to hold, and a way to make it hold."""
    if trigger_type == "time":
        return timed(agent, T0 + minutes(5)), lambda: at(agent, T0 + minutes(10))
    if trigger_type == "event":
        return on_event(agent, "cue"), lambda: event_append(agent=agent, event_type="cue")
    if trigger_type == "state":
        return on_state(agent, "web", "status", "eq", "down"), lambda: claim(
            agent, "web", "status", "down", T0 - DAY
        )
    if trigger_type == "dependency":
        first = IntentionFactory(agent=agent)
        dependent = IntentionFactory(
            agent=agent, trigger_type="dependency", dependencies=[first.pk]
        )
        return dependent, lambda: intention_complete(agent=agent, intention_id=first.pk)
    return IntentionFactory(agent=agent), lambda: None


class TestNoZombies:
    @pytest.mark.parametrize("trigger_type", ["time", "event", "state", "dependency", "manual"])
    @pytest.mark.parametrize("end", ["cancelled", "completed", "expired"])
    def test_an_ended_one_shot_never_fires_again_by_any_path(self, agent, trigger_type, end):
        intention, cue = _armed(agent, trigger_type)
        if end == "cancelled":
            intention_cancel(agent=agent, intention_id=intention.pk)
        elif end == "completed":
            intention_complete(agent=agent, intention_id=intention.pk)
        else:
            intention_expire(agent=agent, intention_id=intention.pk)
        cue()

        engine.tick(agent=agent)
        tasks.engine_cycle()
        dependencies.release_dependents(intention=intention, at=T0)
        assert firing.fire(intention_id=intention.pk, cause="manual", at=T0) is None
        with pytest.raises(Conflict) as refused:
            intention_fire(agent=agent, intention_id=intention.pk)

        assert refused.value.code == "not_armed"
        assert (status_of(intention), firings(intention)) == (end, [])
        assert fired_events(agent) == []

    def test_a_recurring_one_never_fires_ahead_of_completion_or_skip(self, agent):
        intention = timed(agent, T0, rrule="FREQ=HOURLY")
        engine.tick(agent=agent)

        for hour in range(1, 6):
            at(agent, T0 + timedelta(hours=hour))
            engine.tick(agent=agent)
            firing.fire(intention_id=intention.pk, cause="time", at=T0 + timedelta(hours=hour))

        assert firings(intention) == [(1, "time", T0)]

    def test_a_cancelled_recurring_one_never_comes_back(self, agent):
        intention = timed(agent, T0, rrule="FREQ=HOURLY")
        engine.tick(agent=agent)
        intention_cancel(agent=agent, intention_id=intention.pk)

        at(agent, T0 + DAY)
        engine.tick(agent=agent)

        assert (status_of(intention), firings(intention)) == ("cancelled", [(1, "time", T0)])


# ------------------------------------------------------------------- rehearsal


class TestRehearsal:
    def test_long_pending_intentions_resurface_once_per_window(self, agent, thread):
        waiting = IntentionFactory(agent=agent, thread=thread)
        blocked = in_status(agent, "blocked", thread=thread)
        no_thread = IntentionFactory(agent=agent)
        due = in_status(agent, "due", thread=thread)

        at(agent, T0 + timedelta(hours=24) - timedelta(seconds=1))
        assert engine.rehearse(agent=agent) == 0
        at(agent, T0 + timedelta(hours=24))
        assert engine.rehearse(agent=agent) == 2
        at(agent, T0 + timedelta(hours=47))
        assert engine.rehearse(agent=agent) == 0

        assert sorted(
            PendingItem.objects.filter(kind="rehearsed").values_list("intention_id", "added_at")
        ) == sorted([(waiting.pk, T0 + DAY), (blocked.pk, T0 + DAY)])
        assert {
            i.pk: i.last_rehearsed_at
            for i in Intention.objects.filter(pk__in=[waiting.pk, blocked.pk, no_thread.pk, due.pk])
        } == {waiting.pk: T0 + DAY, blocked.pk: T0 + DAY, no_thread.pk: T0, due.pk: T0}

    def test_a_seen_rehearsal_comes_back_after_another_window(self, agent, thread):
        waiting = IntentionFactory(agent=agent, thread=thread)
        at(agent, T0 + DAY)
        engine.rehearse(agent=agent)
        item = PendingItem.objects.get(intention=waiting, kind="rehearsed")
        pending_clear(agent=agent, thread=thread, item_ids=[item.pk])
        at(agent, T0 + 2 * DAY)
        assert engine.tick(agent=agent)["rehearsed"] == 1

        item.refresh_from_db()
        assert (item.added_at, item.cleared_at) == (T0 + 2 * DAY, None)
        assert PendingItem.objects.filter(intention=waiting).count() == 1

    def test_the_rehearse_task_uses_the_wall_clock_and_skips_simulated_agents(self, agent, thread):
        IntentionFactory(agent=agent, thread=thread)
        wall = AgentFactory()
        wall_thread = ThreadFactory(agent=wall)
        old = IntentionFactory(agent=wall, thread=wall_thread)
        fresh = IntentionFactory(agent=wall, thread=wall_thread)
        Intention.objects.filter(pk=old.pk).update(
            last_rehearsed_at=timezone.now() - timedelta(hours=25)
        )
        at(agent, T0 + 10 * DAY)

        tasks.rehearse()

        assert list(
            PendingItem.objects.filter(kind="rehearsed").values_list("intention_id", flat=True)
        ) == [old.pk]
        assert Intention.objects.get(pk=fresh.pk).last_rehearsed_at == fresh.last_rehearsed_at


# ---------------------------------------------------------------------- webhook


@pytest.fixture
def receiver():
    with running_receiver() as server:
        yield server


@pytest.fixture
def hooked(agent, receiver):
    Webhook.objects.create(agent=agent, url=receiver.url, secret="s3cret")
    return agent


def _fired_message(agent, thread=None, **fields) -> OutboxMessage:
    intention = IntentionFactory(agent=agent, thread=thread, priority=2, **fields)
    intention_fire(agent=agent, intention_id=intention.pk)
    return OutboxMessage.objects.get(firing__intention=intention)


class TestWebhookOutbox:
    def test_a_firing_writes_its_message_in_the_same_transaction(self, hooked, thread):
        message = _fired_message(hooked, thread, description="water the plants")

        firing = message.firing
        assert (message.agent_id, message.status, message.attempts) == (hooked.pk, "pending", 0)
        assert message.payload == {
            "type": "intention.fired",
            "firing_id": str(firing.pk),
            "intention_id": str(firing.intention_id),
            "occurrence": 1,
            "description": "water the plants",
            "priority": 2,
            "thread": "main",
            "fired_at": "2030-01-07T09:00:00+00:00",
            "cause": "manual",
        }

    def test_no_message_without_an_active_webhook(self, agent):
        IntentionFactory(agent=agent)
        in_status(agent, "due")
        Webhook.objects.create(agent=agent, url="http://127.0.0.1:9/", secret="x", is_active=False)
        in_status(agent, "due")

        assert OutboxMessage.objects.count() == 0

    def test_the_message_is_queued_for_delivery_after_commit(
        self, hooked, enqueued, django_capture_on_commit_callbacks
    ):
        with django_capture_on_commit_callbacks(execute=True):
            message = _fired_message(hooked)

        assert ("intentions.deliver_outbox_message", str(message.pk)) in enqueued

    def test_delivery_posts_the_signed_json(self, hooked, receiver):
        message = _fired_message(hooked)

        assert outbox.deliver(message_id=message.pk) == "delivered"

        [(headers, body)] = receiver.received
        assert json.loads(body) == message.payload
        assert body == json.dumps(message.payload, separators=(",", ":"), sort_keys=True).encode()
        expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        assert headers["X-Piper-Signature"] == expected
        assert headers["X-Piper-Delivery"] == str(message.firing_id)
        assert headers["Content-Type"] == "application/json"
        message.refresh_from_db()
        assert (message.status, message.attempts, message.last_error) == ("delivered", 1, "")
        assert message.delivered_at is not None

    def test_delivering_twice_posts_once(self, hooked, receiver):
        message = _fired_message(hooked)

        assert outbox.deliver(message_id=message.pk) == "delivered"
        assert outbox.deliver(message_id=message.pk) == "skipped"
        tasks.deliver_outbox_message(str(message.pk))
        assert outbox.deliver_due() == 0

        assert len(receiver.received) == 1

    def test_a_500_is_retried_later_with_backoff(self, hooked, receiver):
        message = _fired_message(hooked)
        receiver.statuses = [500]

        before = timezone.now()
        assert outbox.deliver(message_id=message.pk) == "pending"
        after = timezone.now()

        message.refresh_from_db()
        assert (message.status, message.attempts, message.last_error) == ("pending", 1, "HTTP 500")
        assert (
            before + timedelta(seconds=2) <= message.next_attempt_at <= after + timedelta(seconds=2)
        )
        assert outbox.deliver_due() == 0  # not yet
        OutboxMessage.objects.filter(pk=message.pk).update(
            next_attempt_at=timezone.now() - timedelta(seconds=1)
        )
        assert outbox.deliver_due() == 1
        message.refresh_from_db()
        assert (message.status, message.attempts) == ("delivered", 2)
        assert [json.loads(body) for _, body in receiver.received] == [message.payload] * 2

    def test_gives_up_after_max_attempts_with_doubling_backoff(self, hooked, receiver):
        message = _fired_message(hooked)
        receiver.statuses = [500] * 20
        waits = []

        for _ in range(outbox.MAX_ATTEMPTS):
            before = timezone.now()
            outbox.deliver(message_id=message.pk)
            message.refresh_from_db()
            waits.append(round((message.next_attempt_at - before).total_seconds()))
        assert outbox.deliver(message_id=message.pk) == "skipped"

        assert waits[:-1] == [2, 4, 8, 16, 32, 64, 128]
        assert (message.status, message.attempts, message.last_error) == ("failed", 8, "HTTP 500")
        assert len(receiver.received) == outbox.MAX_ATTEMPTS

    def test_an_unreachable_endpoint_is_an_attempt(self, agent, receiver):
        receiver.shutdown()
        receiver.server_close()
        Webhook.objects.create(agent=agent, url=receiver.url, secret="x")
        message = _fired_message(agent)

        assert outbox.deliver(message_id=message.pk) == "pending"

        message.refresh_from_db()
        assert message.attempts == 1
        assert message.last_error.startswith("ConnectError: ")

    def test_a_webhook_switched_off_before_delivery_fails_the_message(self, hooked, receiver):
        message = _fired_message(hooked)
        Webhook.objects.filter(agent=hooked).update(is_active=False)

        assert outbox.deliver(message_id=message.pk) == "failed"

        message.refresh_from_db()
        assert (message.status, message.last_error, receiver.received) == (
            "failed",
            "no active webhook",
            [],
        )


class TestDeliveryLease:
    """A delivery claims its message for LEASE_SECONDS, posts outside any
    transaction, then records its outcome only if the claim is still the latest."""

    def test_a_delivery_whose_worker_died_mid_call_is_retried_after_the_lease(
        self, hooked, receiver, monkeypatch
    ):
        monkeypatch.setattr(outbox, "LEASE_SECONDS", 0.5)
        message = _fired_message(hooked)
        lost = outbox._claim(message.pk)  # claimed, then the worker died: no outcome

        message.refresh_from_db()
        assert (message.status, message.attempts, lost.attempt) == ("pending", 1, 1)
        assert outbox.deliver(message_id=message.pk) == "skipped"  # the claim is live
        assert outbox.deliver_due() == 0
        time.sleep(0.6)
        assert outbox.deliver_due() == 1

        message.refresh_from_db()
        assert (message.status, message.attempts, message.claimed_until) == ("delivered", 2, None)
        [(headers, body)] = receiver.received
        assert headers["X-Piper-Delivery"] == str(message.firing_id)
        assert json.loads(body) == message.payload

    def test_the_late_outcome_of_a_lapsed_claim_is_not_recorded(
        self, hooked, receiver, monkeypatch
    ):
        monkeypatch.setattr(outbox, "LEASE_SECONDS", 0.2)
        message = _fired_message(hooked)
        slow = outbox._claim(message.pk)
        time.sleep(0.3)
        receiver.statuses = [500]
        assert outbox.deliver(message_id=message.pk) == "pending"  # attempt 2 took it over

        assert outbox._record(slow, ok=True, error="") == "superseded"

        message.refresh_from_db()
        assert (message.status, message.attempts, message.last_error) == ("pending", 2, "HTTP 500")
        assert message.delivered_at is None

    def test_a_last_attempt_lost_mid_call_gives_up_after_its_lease(
        self, hooked, receiver, monkeypatch
    ):
        message = _fired_message(hooked)
        OutboxMessage.objects.filter(pk=message.pk).update(attempts=outbox.MAX_ATTEMPTS - 1)
        monkeypatch.setattr(outbox, "LEASE_SECONDS", 0.2)
        outbox._claim(message.pk)
        time.sleep(0.3)

        assert outbox.deliver_due() == 1

        message.refresh_from_db()
        assert (message.status, message.attempts, message.last_error) == (
            "failed",
            8,
            "no outcome recorded for attempt 8 of 8",
        )
        assert receiver.received == []

    def test_a_webhook_removed_during_the_call_stays_given_up(self, hooked, receiver):
        message = _fired_message(hooked)
        claim = outbox._claim(message.pk)
        outbox.webhook_delete(agent=hooked)

        assert outbox._record(claim, ok=False, error="HTTP 500") == "superseded"

        message.refresh_from_db()
        assert (message.status, message.last_error, message.claimed_until) == (
            "failed",
            "webhook removed",
            None,
        )


@pytest.mark.django_db(transaction=True)
def test_a_slow_receiver_holds_no_lock_or_transaction_during_the_call(receiver, enqueued):
    agent = AgentFactory()
    Webhook.objects.create(agent=agent, url=receiver.url, secret="x")
    message = _fired_message(agent)
    receiver.hang = 1
    backend = {}

    @in_thread
    def deliver():
        connection.ensure_connection()
        backend["pid"] = connection.connection.info.backend_pid
        return outbox.deliver(message_id=message.pk)

    with ThreadPoolExecutor(1) as pool:
        delivery = pool.submit(deliver)
        assert receiver.arrived.wait(timeout=30)
        try:
            # The POST is in flight. The delivering connection is not in a transaction:
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT state FROM pg_stat_activity WHERE pid = %s", [backend["pid"]]
                )
                assert cursor.fetchone() == ("idle",)
            # another transaction locks the row at once and changes it;
            with transaction.atomic():
                row = OutboxMessage.objects.select_for_update(nowait=True).get(pk=message.pk)
                assert (row.status, row.attempts) == ("pending", 1)
                assert row.claimed_until > timezone.now()
                OutboxMessage.objects.filter(pk=message.pk).update(last_error="looked at")
            # and another delivery leaves the claimed message alone.
            assert outbox.deliver(message_id=message.pk) == "skipped"
            assert outbox.deliver_due() == 0
        finally:
            receiver.release.set()
        assert delivery.result(timeout=30) == "delivered"

    message.refresh_from_db()
    assert (message.status, message.attempts, message.claimed_until, message.last_error) == (
        "delivered",
        1,
        None,
        "",
    )
    assert len(receiver.received) == 1


@pytest.mark.django_db(transaction=True)
def test_two_deliveries_at_once_post_once(receiver, enqueued):
    agent = AgentFactory()
    Webhook.objects.create(agent=agent, url=receiver.url, secret="x")
    message = _fired_message(agent)

    outcomes = race(4, lambda i: outbox.deliver(message_id=message.pk))

    assert sorted(outcomes) == ["delivered", "skipped", "skipped", "skipped"]
    assert len(receiver.received) == 1


# ------------------------------------------------------------- post-commit hook


class TestPostCommitHook:
    def test_a_commit_for_an_agent_with_armed_event_triggers_queues_matching(
        self, agent, enqueued, django_capture_on_commit_callbacks
    ):
        on_event(agent, "deploy.*")
        enqueued.clear()

        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            event_append(agent=agent, event_type="deploy.done")

        assert len(callbacks) == 1
        assert enqueued == [("intentions.match_events", str(agent.pk))]

    def test_armed_state_triggers_queue_a_recheck(
        self, agent, enqueued, django_capture_on_commit_callbacks
    ):
        on_state(agent, "web", "status", "eq", "down")
        on_event(agent, "x")
        enqueued.clear()

        with django_capture_on_commit_callbacks(execute=True):
            claim(agent, "web", "status", "down")

        assert sorted(enqueued) == [
            ("intentions.check_states", str(agent.pk)),
            ("intentions.match_events", str(agent.pk)),
        ]

    def test_state_triggers_are_rechecked_only_after_a_facts_commit(
        self, agent, enqueued, django_capture_on_commit_callbacks
    ):
        watcher = on_state(agent, "web", "status", "eq", "down")
        enqueued.clear()

        with django_capture_on_commit_callbacks(execute=True):
            event_append(agent=agent, event_type="deploy.done")  # no fact can have changed
            intention_fire(agent=agent, intention_id=IntentionFactory(agent=agent).pk)
        assert enqueued == []

        with django_capture_on_commit_callbacks(execute=True):
            claim(agent, "web", "status", "up")
        assert enqueued == [("intentions.check_states", str(agent.pk))]
        assert status_of(watcher) == IntentionStatus.ACTIVE

    @pytest.mark.parametrize("kind", ["none", "time", "manual", "cancelled event", "blocked event"])
    def test_an_agent_without_armed_event_or_state_triggers_queues_nothing(
        self, agent, enqueued, django_capture_on_commit_callbacks, kind
    ):
        if kind in ("time", "manual"):
            IntentionFactory(agent=agent, trigger_type=kind, due_at=T0 if kind == "time" else None)
        elif kind == "cancelled event":
            intention_cancel(agent=agent, intention_id=on_event(agent, "x").pk)
        elif kind == "blocked event":
            on_event(agent, "x", dependencies=[IntentionFactory(agent=agent).pk])

        with django_capture_on_commit_callbacks(execute=True) as callbacks:
            event_append(agent=agent, event_type="x")

        assert len(callbacks) == 1
        assert enqueued == []

    def test_another_agents_armed_triggers_do_not_count(
        self, agent, enqueued, django_capture_on_commit_callbacks
    ):
        on_event(AgentFactory(), "x")

        with django_capture_on_commit_callbacks(execute=True):
            event_append(agent=agent, event_type="x")

        assert enqueued == []

    def test_the_queued_task_fires_the_intention(
        self, agent, enqueued, django_capture_on_commit_callbacks
    ):
        intention = on_event(agent, "deploy.*")
        with django_capture_on_commit_callbacks(execute=True):
            event_append(agent=agent, event_type="deploy.done")

        for name, *args in list(enqueued):
            getattr(tasks, name.split(".")[1])(*args)

        assert firings(intention) == [(1, "event", T0)]


# ------------------------------------------------------------- tenant isolation


class TestTenantIsolation:
    def test_one_agents_engine_run_never_touches_another_agents_intentions(self):
        mine, theirs = sim_agent("mine"), sim_agent("theirs")
        built = {}
        for who in (mine, theirs):
            built[who.name] = [
                timed(who, T0),
                on_event(who, "cue"),
                on_state(who, "web", "status", "eq", "down"),
                IntentionFactory(agent=who, thread=ThreadFactory(agent=who)),
            ]
            event_append(agent=who, event_type="cue")
            claim(who, "web", "status", "down", T0 - DAY)
        at(mine, T0 + 2 * DAY)
        at(theirs, T0 + 2 * DAY)
        before = [
            (i.status, i.last_rehearsed_at)
            for i in Intention.objects.filter(agent=theirs).order_by("pk")
        ]

        result = engine.tick(agent=mine)

        assert (len(result["time"]), len(result["events"]), len(result["states"])) == (1, 1, 1)
        assert result["rehearsed"] == 1
        assert [
            (i.status, i.last_rehearsed_at)
            for i in Intention.objects.filter(agent=theirs).order_by("pk")
        ] == before
        assert Firing.objects.filter(agent=theirs).count() == 0
        assert PendingItem.objects.filter(agent=theirs).count() == 0

    def test_facts_of_one_agent_never_satisfy_anothers_state_trigger(self):
        mine, theirs = AgentFactory(), AgentFactory()
        watcher = on_state(theirs, "web", "status", "eq", "down")
        claim(mine, "web", "status", "down")

        assert engine.check_states() == []
        assert status_of(watcher) == IntentionStatus.ACTIVE

    def test_events_of_one_agent_never_match_anothers_triggers(self):
        mine, theirs = AgentFactory(), AgentFactory()
        watcher = on_event(theirs, "cue")
        event_append(agent=mine, event_type="cue")

        engine.match_events(agent_id=mine.pk)
        engine.match_events(agent_id=theirs.pk)

        assert status_of(watcher) == IntentionStatus.ACTIVE

    def test_the_wall_clock_engine_skips_simulated_clock_agents(self):
        simulated = sim_agent("sim", now=timezone.now() - timedelta(hours=2))
        thread = ThreadFactory(agent=simulated)
        waiting = timed(simulated, timezone.now() - timedelta(hours=1), thread=thread)
        expiring = IntentionFactory(
            agent=simulated, expires_at=timezone.now() - timedelta(minutes=90)
        )
        stated = on_state(simulated, "web", "status", "eq", "down")
        claim(simulated, "web", "status", "down", timezone.now() - timedelta(hours=1))
        Intention.objects.filter(agent=simulated).update(
            last_rehearsed_at=timezone.now() - timedelta(days=3)
        )
        wall = AgentFactory()
        wall_due = timed(wall, timezone.now() - timedelta(hours=1))

        assert fired_ids(engine.scan_time()) == [wall_due.pk]
        tasks.engine_cycle()
        assert engine.check_states() == []
        assert engine.rehearse() == 0
        assert engine.expire_due() == 0

        assert [status_of(i) for i in (waiting, expiring, stated)] == ["active"] * 3
        assert Firing.objects.filter(agent=simulated).count() == 0

    def test_another_agents_intention_cannot_be_fired_by_hand(self):
        mine, theirs = AgentFactory(), AgentFactory()
        intention = IntentionFactory(agent=theirs)

        with pytest.raises(NotFound):
            intention_fire(agent=mine, intention_id=intention.pk)
        assert status_of(intention) == IntentionStatus.ACTIVE


class TestBatchedTimeScan:
    """scan_time fires each agent's share of a chunk in one transaction."""

    def test_many_due_across_agents_fire_once_with_every_side_effect(self, enqueued, receiver):
        agents = [AgentFactory() for _ in range(3)]
        Webhook.objects.create(agent=agents[0], url=receiver.url, secret="s3cret")
        threads = {a.pk: ThreadFactory(agent=a, key="main") for a in agents}
        past = timezone.now() - timedelta(minutes=5)
        due = [
            timed(agents[n % 3], past + timedelta(seconds=n), thread=threads[agents[n % 3].pk])
            for n in range(45)
        ]
        later = timed(agents[0], timezone.now() + DAY)

        fired = engine.scan_time(chunk=10)  # several chunks, each split by agent

        assert fired_ids(fired) == sorted(i.pk for i in due)
        assert_fired_exactly_once(due, "time")
        assert status_of(later) == IntentionStatus.ACTIVE
        assert PendingItem.objects.filter(intention__in=due, kind="fired").count() == 45
        assert (
            Transition.objects.filter(intention__in=due, to_status="due", reason="fired by time")
            .exclude(event=None)
            .count()
            == 45
        )
        assert OutboxMessage.objects.filter(agent=agents[0]).count() == 15  # the hooked agent's
        assert not OutboxMessage.objects.exclude(agent=agents[0]).exists()
        assert all(chain_verify(agent=a).ok for a in agents)
        assert engine.scan_time() == []  # nothing left: a second beat fires nothing

    def test_a_batch_that_meets_a_racer_falls_back_to_one_at_a_time(self, enqueued, monkeypatch):
        agent = AgentFactory()
        due = [timed(agent, timezone.now() - timedelta(seconds=n + 1)) for n in range(6)]

        def lost_race(*args):
            raise firing._AlreadyFired

        monkeypatch.setattr(firing, "_fire_time_batch", lost_race)
        fired = engine.scan_time()

        assert fired_ids(fired) == sorted(i.pk for i in due)
        assert_fired_exactly_once(due, "time")

    def test_not_before_and_snoozed_rows_are_rechecked_under_the_lock(self, enqueued):
        agent = AgentFactory()
        now = timezone.now()
        ready = timed(agent, now - timedelta(minutes=1))
        moved = timed(agent, now - timedelta(minutes=1))
        Intention.objects.filter(pk=moved.pk).update(due_at=now + DAY)  # as after the scan's read

        fired = firing.fire_time_batch(
            agent_id=agent.pk, intention_ids=[ready.pk, moved.pk], at=now
        )

        assert fired_ids(fired) == [ready.pk]
        assert status_of(moved) == IntentionStatus.ACTIVE


def test_event_catch_up_looks_at_each_agent_once(enqueued, monkeypatch):
    agents = [AgentFactory() for _ in range(2)]
    for n in range(7):
        on_event(agents[n % 2], f"job.{n}")
    seen = []
    monkeypatch.setattr(engine, "match_events", lambda *, agent_id: seen.append(agent_id))

    assert engine.catch_up_events() == 2
    assert sorted(seen) == sorted(a.pk for a in agents)
