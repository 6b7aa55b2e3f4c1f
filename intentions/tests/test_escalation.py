"""Escalation policies: checked when made or replaced, acted on by the engine
exactly once per occurrence, delivered through the outbox, shown to the agent
(and to no other agent)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from facts.tests.api_helpers import iso, ok, post, put
from intentions import tasks
from intentions.models import (
    Escalation,
    Intention,
    IntentionStatus,
    OutboxMessage,
    PendingItem,
    Webhook,
)
from intentions.services import engine, outbox
from intentions.services.escalation import escalate_due
from intentions.services.lifecycle import (
    intention_complete,
    intention_fail,
    intention_set_escalation_policy,
    intention_start,
)
from intentions.tests.factories import (
    T0,
    IntentionFactory,
    ThreadFactory,
    at,
    event_types,
    head_seq,
    in_status,
    minutes,
    sim_agent,
)
from intentions.tests.receiver import running_receiver
from intentions.tests.test_apis import (
    act,
    battery_client,
    detail_body,
    intention_body,
    intentions_state,
    make_intention,
    refused,
    set_clock,
    tick,
)
from intentions.tests.test_engine import errors, race
from ledger.models import Event
from ledger.selectors import chain_verify
from ledger.tests.helpers import error
from piper.errors import Conflict, InvalidInput
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

HOUR = 3600
ALLOWED = "after_failures, note, notify, overdue_seconds, to_session"


@pytest.fixture
def agent():
    return sim_agent("escalating")


@pytest.fixture
def thread(agent):
    return ThreadFactory(agent=agent, key="ops")


def escalations(intention) -> list[tuple[int, str, int]]:
    return list(
        Escalation.objects.filter(intention=intention)
        .order_by("occurrence")
        .values_list("occurrence", "reason", "attempts")
    )


def escalated_events(agent) -> list[dict]:
    return list(
        Event.objects.filter(agent=agent, event_type="intention.escalated")
        .order_by("seq")
        .values_list("payload", flat=True)
    )


def fresh(intention) -> Intention:
    return Intention.objects.get(pk=intention.pk)


# ------------------------------------------------------------------ failures


class TestAfterFailures:
    def test_not_before_the_count_then_once_with_every_record(self, agent, thread):
        intention = in_status(
            agent,
            IntentionStatus.DUE,
            thread=thread,
            escalation_policy={"after_failures": 2, "to_session": "oncall", "note": "page Ana"},
        )

        intention_fail(agent=agent, intention_id=intention.pk, reason="timeout")
        assert (fresh(intention).escalated_at, escalations(intention)) == (None, [])
        since = head_seq(agent)
        at(agent, T0 + minutes(3))
        failed = intention_fail(agent=agent, intention_id=intention.pk, reason="timeout again")

        [escalation] = Escalation.objects.filter(intention=intention)
        assert (escalation.occurrence, escalation.reason, escalation.attempts) == (1, "failures", 2)
        assert (escalation.escalated_at, escalation.agent_id) == (T0 + minutes(3), agent.pk)
        assert event_types(agent, since) == ["intention.failed", "intention.escalated"]
        event = Event.objects.get(agent=agent, event_type="intention.escalated")
        assert escalation.event_id == event.pk
        assert event.payload == {
            "intention_id": str(intention.pk),
            "escalation_id": str(escalation.pk),
            "policy": {"after_failures": 2, "to_session": "oncall", "note": "page Ana"},
            "reason": "failures",
            "occurrence": 1,
            "attempts": 2,
            "after_failures": 2,
            "overdue_seconds": None,
            "to_session": "oncall",
            "note": "page Ana",
            "notify": [],
            "escalated_at": "2030-01-07T09:03:00+00:00",
            "last_fired_at": "2030-01-07T09:00:00+00:00",
        }
        assert (failed.status, failed.escalated_at) == ("due", T0 + minutes(3))
        assert failed.escalation == {
            "id": str(escalation.pk),
            "event_id": str(event.pk),
            "reason": "failures",
            "occurrence": 1,
            "attempts": 2,
            "after_failures": 2,
            "overdue_seconds": None,
            "to_session": "oncall",
            "note": "page Ana",
            "notify": [],
        }
        assert list(
            PendingItem.objects.filter(thread=thread, kind="escalated").values_list(
                "intention_id", "occurrence", "added_at"
            )
        ) == [(intention.pk, 1, T0 + minutes(3))]
        assert OutboxMessage.objects.count() == 0  # notify did not ask for the webhook
        assert chain_verify(agent=agent).ok

    def test_more_failures_never_escalate_again(self, agent):
        intention = in_status(agent, IntentionStatus.DUE, escalation_policy={"after_failures": 1})
        for n in range(3):
            intention_fail(agent=agent, intention_id=intention.pk, reason=f"try {n}")
        escalate_due(agent=agent)
        engine.tick(agent=agent)

        assert escalations(intention) == [(1, "failures", 1)]
        assert len(escalated_events(agent)) == 1

    def test_retries_of_one_occurrence_escalate_once(self, agent):
        """A retry re-arms a time intention as a new occurrence: the same commitment."""
        intention = IntentionFactory(
            agent=agent,
            trigger_type="time",
            due_at=T0,
            retry_policy={"max_retries": 3, "backoff_seconds": 60},
            escalation_policy={"after_failures": 1},
        )
        engine.tick(agent=agent)
        retried = intention_fail(agent=agent, intention_id=intention.pk, reason="timeout")
        assert (retried.status, retried.occurrence, retried.attempts) == ("active", 2, 1)
        assert escalations(intention) == [(2, "failures", 1)]

        at(agent, T0 + minutes(1))
        engine.tick(agent=agent)  # the retry fires
        intention_fail(agent=agent, intention_id=intention.pk, reason="timeout again")

        assert fresh(intention).attempts == 2
        assert escalations(intention) == [(2, "failures", 1)]

    def test_the_next_occurrence_of_a_recurring_one_may_escalate_again(self, agent):
        intention = IntentionFactory(
            agent=agent,
            trigger_type="time",
            due_at=T0,
            rrule="FREQ=DAILY;COUNT=3",
            escalation_policy={"after_failures": 1},
        )
        engine.tick(agent=agent)
        intention_fail(agent=agent, intention_id=intention.pk, reason="down")
        assert fresh(intention).escalated_at == T0

        nxt = intention_complete(agent=agent, intention_id=intention.pk, evidence={"ok": 1})
        assert (nxt.status, nxt.occurrence, nxt.escalated_at, nxt.escalation) == (
            "active",
            2,
            None,
            None,
        )
        at(agent, T0 + timedelta(days=1))
        engine.tick(agent=agent)
        intention_fail(agent=agent, intention_id=intention.pk, reason="down again")

        assert escalations(intention) == [(1, "failures", 1), (2, "failures", 1)]


# ------------------------------------------------------------------- overdue


class TestOverdue:
    def test_escalates_once_overdue_seconds_after_it_fired_not_a_moment_before(self, agent):
        intention = IntentionFactory(
            agent=agent, trigger_type="time", due_at=T0, escalation_policy={"overdue_seconds": 600}
        )
        assert engine.tick(agent=agent)["escalated"] == []  # fires now; not overdue yet
        at(agent, T0 + timedelta(seconds=599))
        assert engine.tick(agent=agent)["escalated"] == []
        assert fresh(intention).escalated_at is None

        at(agent, T0 + timedelta(seconds=600))
        [escalated] = engine.tick(agent=agent)["escalated"]

        escalation = Escalation.objects.get(intention=intention)
        assert (escalated.intention_id, escalated.occurrence, escalated.reason) == (
            intention.pk,
            1,
            "overdue",
        )
        assert escalated.escalation_id == escalation.pk
        assert fresh(intention).escalated_at == T0 + timedelta(seconds=600)
        assert fresh(intention).status == "due"  # escalating changes no status

    def test_a_repeated_sweep_or_redelivered_task_escalates_nothing_more(self, agent):
        intention = in_status(agent, IntentionStatus.DUE, escalation_policy={"overdue_seconds": 60})
        at(agent, T0 + HOUR * timedelta(seconds=1))

        first = escalate_due(agent=agent)
        assert [e.intention_id for e in first] == [intention.pk]
        since = head_seq(agent)
        assert escalate_due(agent=agent) == []
        assert engine.tick(agent=agent)["escalated"] == []
        assert event_types(agent, since) == []
        assert escalations(intention) == [(1, "overdue", 0)]

    @pytest.mark.parametrize("status", ["active", "blocked", "executing"])
    def test_only_a_due_one_is_overdue(self, agent, status):
        intention = in_status(agent, status, escalation_policy={"overdue_seconds": 60})
        at(agent, T0 + timedelta(days=2))

        assert escalate_due(agent=agent) == []
        assert fresh(intention).escalated_at is None

    @pytest.mark.parametrize("status", ["completed", "cancelled", "expired"])
    def test_an_ended_one_never_escalates(self, agent, status):
        intention = in_status(
            agent, status, escalation_policy={"overdue_seconds": 60, "after_failures": 1}
        )
        Intention.objects.filter(pk=intention.pk).update(attempts=5, last_fired_at=T0)
        at(agent, T0 + timedelta(days=2))

        assert escalate_due(agent=agent) == []

    def test_started_in_time_it_does_not_escalate(self, agent):
        intention = in_status(agent, IntentionStatus.DUE, escalation_policy={"overdue_seconds": 60})
        intention_start(agent=agent, intention_id=intention.pk)
        at(agent, T0 + timedelta(days=1))

        assert engine.tick(agent=agent)["escalated"] == []

    def test_the_time_it_was_executing_is_not_overdue_time(self, agent):
        """Overdue counts from when it last became due, not from its firing: an
        attempt that ran long and failed is due again from the failure on."""
        intention = in_status(
            agent, IntentionStatus.DUE, escalation_policy={"overdue_seconds": 600}
        )
        at(agent, T0 + minutes(1))
        intention_start(agent=agent, intention_id=intention.pk)
        at(agent, T0 + minutes(30))
        assert engine.tick(agent=agent)["escalated"] == []  # executing: never overdue

        failed = intention_fail(agent=agent, intention_id=intention.pk, reason="tool crashed")
        assert (failed.status, failed.escalated_at) == ("due", None)
        at(agent, T0 + minutes(40) - timedelta(microseconds=1))
        assert engine.tick(agent=agent)["escalated"] == []

        at(agent, T0 + minutes(40))
        [escalated] = engine.tick(agent=agent)["escalated"]
        assert (escalated.reason, fresh(intention).escalated_at) == ("overdue", T0 + minutes(40))

    def test_without_a_policy_nothing_escalates(self, agent):
        in_status(agent, IntentionStatus.DUE)
        at(agent, T0 + timedelta(days=30))

        assert escalate_due(agent=agent) == []

    def test_a_policy_written_before_policies_were_checked_is_ignored(self, agent):
        """Rows from before validation (or written in bulk, as the benchmark does) must
        not break the sweep for everyone."""
        odd = in_status(agent, IntentionStatus.DUE)
        Intention.objects.filter(pk=odd.pk).update(
            escalation_policy={"overdue_seconds": "soon", "after_failures": [1], "page": "x"}
        )
        good = in_status(agent, IntentionStatus.DUE, escalation_policy={"overdue_seconds": 60})
        at(agent, T0 + timedelta(days=1))

        assert [e.intention_id for e in escalate_due(agent=agent)] == [good.pk]

    def test_the_wall_clock_sweep_leaves_simulated_agents_alone(self, agent):
        intention = in_status(agent, IntentionStatus.DUE, escalation_policy={"overdue_seconds": 1})
        wall = AgentFactory()
        due = in_status(wall, IntentionStatus.DUE, escalation_policy={"overdue_seconds": 1})
        Intention.objects.filter(pk=due.pk).update(
            last_fired_at=timezone.now() - timedelta(minutes=5)
        )
        at(agent, T0 + timedelta(days=1))

        assert [e.intention_id for e in escalate_due()] == [due.pk]
        assert fresh(intention).escalated_at is None


# -------------------------------------------------------------- the database


class TestTheDatabaseHoldsTheLine:
    def test_an_occurrence_escalates_at_most_once(self, agent):
        intention = in_status(agent, IntentionStatus.DUE, escalation_policy={"after_failures": 1})
        intention_fail(agent=agent, intention_id=intention.pk, reason="x")
        first = Escalation.objects.get(intention=intention)

        with pytest.raises(IntegrityError), transaction.atomic():
            Escalation.objects.create(
                agent=agent,
                intention=intention,
                occurrence=1,
                reason="overdue",
                attempts=1,
                escalated_at=T0,
                policy={},
                event_id=first.event_id,
            )

    def test_an_escalation_is_history(self, agent):
        intention = in_status(agent, IntentionStatus.DUE, escalation_policy={"after_failures": 1})
        intention_fail(agent=agent, intention_id=intention.pk, reason="x")

        with pytest.raises(IntegrityError), transaction.atomic():
            Escalation.objects.filter(intention=intention).update(reason="overdue")

    def test_an_outbox_message_delivers_one_firing_or_one_escalation(self, agent):
        with pytest.raises(IntegrityError), transaction.atomic():
            OutboxMessage.objects.create(agent=agent, payload={})


# --------------------------------------------------------------------- webhook


@pytest.fixture
def receiver():
    with running_receiver() as server:
        yield server


@pytest.fixture
def hooked(agent, receiver):
    Webhook.objects.create(agent=agent, url=receiver.url, secret="s3cret")
    return agent


class TestWebhook:
    def test_notify_webhook_writes_an_outbox_message_in_the_same_transaction(
        self, hooked, thread, django_capture_on_commit_callbacks, monkeypatch
    ):
        queued = []
        monkeypatch.setattr(tasks.deliver_outbox_message, "delay", queued.append)
        intention = in_status(
            hooked,
            IntentionStatus.DUE,
            thread=thread,
            description="renew the certificate",
            priority=4,
            escalation_policy={"overdue_seconds": 300, "notify": ["webhook"], "note": "urgent"},
        )
        OutboxMessage.objects.all().delete()  # the firing's own message
        at(hooked, T0 + minutes(5))

        with django_capture_on_commit_callbacks(execute=True):
            escalate_due(agent=hooked)

        escalation = Escalation.objects.get(intention=intention)
        message = OutboxMessage.objects.get()
        assert (message.escalation_id, message.firing_id, message.status) == (
            escalation.pk,
            None,
            "pending",
        )
        assert message.payload == {
            "type": "intention.escalated",
            "escalation_id": str(escalation.pk),
            "intention_id": str(intention.pk),
            "occurrence": 1,
            "reason": "overdue",
            "attempts": 0,
            "description": "renew the certificate",
            "priority": 4,
            "status": "due",
            "thread": "ops",
            "escalated_at": "2030-01-07T09:05:00+00:00",
            "last_fired_at": "2030-01-07T09:00:00+00:00",
            "to_session": "",
            "note": "urgent",
        }
        assert queued == [str(message.pk)]

    def test_it_is_delivered_signed_with_the_escalation_as_delivery_id(self, hooked, receiver):
        intention = in_status(
            hooked,
            IntentionStatus.DUE,
            escalation_policy={"after_failures": 1, "notify": ["webhook"]},
        )
        intention_fail(agent=hooked, intention_id=intention.pk, reason="x")
        message = OutboxMessage.objects.get(escalation__intention=intention)

        assert outbox.deliver(message_id=message.pk) == "delivered"

        [(headers, body)] = receiver.received
        assert headers["X-Piper-Delivery"] == str(message.escalation_id)
        assert headers["X-Piper-Signature"] == outbox.sign("s3cret", body)

    def test_without_notify_or_without_a_webhook_no_message(self, agent, receiver):
        quiet = in_status(agent, IntentionStatus.DUE, escalation_policy={"after_failures": 1})
        asks = in_status(
            agent,
            IntentionStatus.DUE,
            escalation_policy={"after_failures": 1, "notify": ["webhook"]},
        )
        intention_fail(agent=agent, intention_id=asks.pk, reason="no webhook yet")
        Webhook.objects.create(agent=agent, url=receiver.url, secret="s3cret")
        intention_fail(agent=agent, intention_id=quiet.pk, reason="not asked")

        assert escalations(quiet) == [(1, "failures", 1)]
        assert escalations(asks) == [(1, "failures", 1)]
        assert OutboxMessage.objects.filter(escalation__isnull=False).count() == 0

    def test_another_agents_webhook_is_never_used(self, agent, receiver):
        other = AgentFactory()
        Webhook.objects.create(agent=other, url=receiver.url, secret="s3cret")
        intention = in_status(
            agent,
            IntentionStatus.DUE,
            escalation_policy={"after_failures": 1, "notify": ["webhook"]},
        )
        intention_fail(agent=agent, intention_id=intention.pk, reason="x")

        assert OutboxMessage.objects.filter(escalation__isnull=False).count() == 0


# ----------------------------------------------------------------- concurrency


@pytest.mark.django_db(transaction=True)
class TestExactlyOnceUnderConcurrency:
    def test_two_concurrent_sweeps_escalate_each_intention_once(self):
        agents = [AgentFactory() for _ in range(3)]
        overdue = []
        for n in range(24):
            intention = in_status(
                agents[n % 3],
                IntentionStatus.DUE,
                escalation_policy={"overdue_seconds": 60, "notify": ["webhook"]},
            )
            overdue.append(intention)
        for a in agents:
            Webhook.objects.create(agent=a, url="http://127.0.0.1:9/", secret="s3cret")
        Intention.objects.filter(pk__in=[i.pk for i in overdue]).update(
            last_fired_at=timezone.now() - timedelta(minutes=5)
        )

        outcomes = race(4, lambda i: escalate_due(chunk=5))

        assert errors(outcomes) == []
        escalated = sorted(e.intention_id for outcome in outcomes for e in outcome)
        assert escalated == sorted(i.pk for i in overdue)  # each by exactly one sweep
        assert Escalation.objects.count() == 24
        assert OutboxMessage.objects.filter(escalation__isnull=False).count() == 24
        assert Event.objects.filter(event_type="intention.escalated").count() == 24
        assert Intention.objects.filter(escalated_at__isnull=True).count() == 0
        assert all(chain_verify(agent=a).ok for a in agents)

    def test_a_failure_racing_the_beat_escalates_once(self):
        agent = AgentFactory()
        intentions = [
            in_status(
                agent,
                IntentionStatus.DUE,
                escalation_policy={"after_failures": 1, "overdue_seconds": 1},
            )
            for _ in range(6)
        ]
        Intention.objects.filter(agent=agent).update(
            last_fired_at=timezone.now() - timedelta(minutes=1)
        )

        def work(i):
            if i % 2:
                return tasks.engine_cycle()
            for x in intentions:
                intention_fail(agent=agent, intention_id=x.pk, reason=f"worker {i}")

        assert errors(race(4, work)) == []
        assert Escalation.objects.count() == 6
        assert Event.objects.filter(event_type="intention.escalated").count() == 6
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM intentions_escalation GROUP BY intention_id")
            assert {row[0] for row in cursor.fetchall()} == {1}


# ------------------------------------------------------------------------- API

POLICY_REFUSALS = [
    ({"after_failures": 0}, "after_failures", "Ensure this value is greater than or equal to 1."),
    ({"after_failures": 101}, "after_failures", "Ensure this value is less than or equal to 100."),
    ({"after_failures": "3"}, "after_failures", "A valid integer is required."),
    ({"after_failures": 1.5}, "after_failures", "A valid integer is required."),
    (
        {"overdue_seconds": 0},
        "overdue_seconds",
        "Ensure this value is greater than or equal to 1.",
    ),
    (
        {"overdue_seconds": 365 * 24 * 3600 + 1},
        "overdue_seconds",
        "Ensure this value is less than or equal to 31536000.",
    ),
    ({"after_failures": 1, "to_session": 5}, "to_session", "Not a valid string."),
    (
        {"after_failures": 1, "note": "n" * 1001},
        "note",
        "Ensure this field has no more than 1000 characters.",
    ),
    ({"after_minutes": 60}, "after_minutes", f"unknown field; allowed: {ALLOWED}"),
]


class TestTheApi:
    @pytest.mark.parametrize(("policy", "field", "message"), POLICY_REFUSALS)
    def test_a_bad_policy_is_refused_naming_the_field_and_nothing_is_written(
        self, client_a, policy, field, message
    ):
        before = intentions_state()
        refused(
            post(
                client_a,
                "/api/v1/intentions",
                {"description": "x", "trigger_type": "manual", "escalation_policy": policy},
            ),
            400,
            error(
                "invalid",
                f"escalation_policy.{field}: {message}",
                {"escalation_policy": {field: [message]}},
            ),
            before,
        )

    @pytest.mark.parametrize(
        "notify", [["email"], ["webhook", "webhook"], "webhook"], ids=["unknown", "twice", "text"]
    )
    def test_notify_names_known_channels_once(self, client_a, notify):
        before = intentions_state()
        response = post(
            client_a,
            "/api/v1/intentions",
            {
                "description": "x",
                "trigger_type": "manual",
                "escalation_policy": {"after_failures": 1, "notify": notify},
            },
        )
        assert response.status_code == 400
        assert list(response.json()["error"]["details"]["escalation_policy"]) == ["notify"]
        assert response.json()["error"]["message"].startswith("escalation_policy.notify")
        assert intentions_state() == before

    def test_a_policy_needs_a_condition(self, client_a):
        before = intentions_state()
        message = "needs after_failures or overdue_seconds (or both); send {} for no escalation"
        refused(
            post(
                client_a,
                "/api/v1/intentions",
                {
                    "description": "x",
                    "trigger_type": "manual",
                    "escalation_policy": {"notify": ["webhook"], "note": "who knows when"},
                },
            ),
            400,
            error("invalid", f"escalation_policy: {message}", {"escalation_policy": [message]}),
            before,
        )

    def test_the_service_refuses_what_the_api_refuses(self, agent):
        with pytest.raises(InvalidInput) as caught:
            IntentionFactory(agent=agent, escalation_policy={"after_failures": True})
        assert caught.value.details == {
            "escalation_policy": {"after_failures": ["a whole number from 1 to 100"]}
        }

    def test_the_escalation_is_shown_in_due_detail_list_and_resume(self):
        sim = battery_client("escalation-api")
        thread = post(sim, "/api/v1/threads", {"key": "ops", "session_id": "s1"}).json()
        intention = make_intention(
            sim,
            trigger_type="time",
            due_at=T0.isoformat(),
            thread=thread["id"],
            escalation_policy={"overdue_seconds": 900, "to_session": "s2"},
        )
        quiet = make_intention(sim, description="no policy")
        tick(sim)
        assert intention_body(intention["id"])["escalated_at"] is None
        set_clock(sim, T0 + minutes(15))

        result = tick(sim)

        escalation = Escalation.objects.get(intention_id=intention["id"])
        assert result["escalated"] == [
            {
                "intention_id": intention["id"],
                "occurrence": 1,
                "reason": "overdue",
                "escalation_id": str(escalation.pk),
            }
        ]
        body = intention_body(intention["id"])
        assert body["escalated_at"] == iso(T0 + minutes(15))
        assert body["escalation"] == {
            "id": str(escalation.pk),
            "event_id": str(escalation.event_id),
            "reason": "overdue",
            "occurrence": 1,
            "attempts": 0,
            "after_failures": None,
            "overdue_seconds": 900,
            "to_session": "s2",
            "note": "",
            "notify": [],
        }
        assert ok(sim.get(f"/api/v1/intentions/{intention['id']}")) == detail_body(intention["id"])
        assert ok(sim.get("/api/v1/intentions/due"))["results"] == [body]
        assert [i["id"] for i in ok(sim.get("/api/v1/intentions?escalated=true"))["results"]] == [
            intention["id"]
        ]
        assert [i["id"] for i in ok(sim.get("/api/v1/intentions?escalated=false"))["results"]] == [
            quiet["id"]
        ]
        resumed = ok(post(sim, f"/api/v1/threads/{thread['id']}/resume", {"session_id": "s1"}))
        assert resumed["intentions"][0] == body  # the due one first; then `quiet` (no thread)
        assert [(p["kind"], p["intention_id"]) for p in resumed["pending"]] == [
            ("fired", intention["id"]),
            ("escalated", intention["id"]),
        ]

    def test_another_agent_sees_nothing_of_it(self, client_a, client_b):
        intention = make_intention(client_a, escalation_policy={"after_failures": 1})
        act(client_a, intention["id"], "fire")
        act(client_a, intention["id"], "fail", {"reason": "x"})
        assert intention_body(intention["id"])["escalated_at"] is not None

        assert client_b.get(f"/api/v1/intentions/{intention['id']}").status_code == 404
        assert ok(client_b.get("/api/v1/intentions/due"))["results"] == []
        assert ok(client_b.get("/api/v1/intentions?escalated=true"))["results"] == []
        before = intentions_state()
        response = put(
            client_b,
            f"/api/v1/intentions/{intention['id']}/escalation-policy",
            {"escalation_policy": {}},
        )
        assert response.status_code == 404
        assert intentions_state() == before

    def test_replacing_the_policy(self, client_a):
        intention = make_intention(client_a)
        act(client_a, intention["id"], "fire")
        act(client_a, intention["id"], "fail", {"reason": "x"})
        act(client_a, intention["id"], "fail", {"reason": "y"})
        since = head_seq(client_a.agent)

        response = put(
            client_a,
            f"/api/v1/intentions/{intention['id']}/escalation-policy",
            {"escalation_policy": {"after_failures": 2, "notify": ["webhook"]}},
        )

        assert response.status_code == 200
        assert response.json() == detail_body(intention["id"])
        assert response.json()["escalation_policy"] == {"after_failures": 2, "notify": ["webhook"]}
        # Two failures already: the new policy's condition holds, and it escalates now.
        assert response.json()["escalation"]["reason"] == "failures"
        assert event_types(client_a.agent, since) == [
            "intention.escalation_policy_set",
            "intention.escalated",
        ]
        again = put(
            client_a,
            f"/api/v1/intentions/{intention['id']}/escalation-policy",
            {"escalation_policy": {"after_failures": 1}},
        )
        assert again.status_code == 200
        assert Escalation.objects.filter(intention_id=intention["id"]).count() == 1

    def test_replacing_it_is_checked_like_making_it(self, client_a):
        intention = make_intention(client_a)
        before = intentions_state()
        message = f"unknown field; allowed: {ALLOWED}"
        refused(
            put(
                client_a,
                f"/api/v1/intentions/{intention['id']}/escalation-policy",
                {"escalation_policy": {"page": "oncall"}},
            ),
            400,
            error(
                "invalid",
                f"escalation_policy.page: {message}",
                {"escalation_policy": {"page": [message]}},
            ),
            before,
        )

    def test_an_ended_intention_keeps_its_policy(self, client_a):
        intention = make_intention(client_a)
        act(client_a, intention["id"], "cancel", {"reason": "no"})
        before = intentions_state()
        refused(
            put(
                client_a,
                f"/api/v1/intentions/{intention['id']}/escalation-policy",
                {"escalation_policy": {"after_failures": 1}},
            ),
            409,
            error(
                "not_open",
                "intention is cancelled; only an open one can change its escalation",
                {"status": "cancelled"},
            ),
            before,
        )
        with pytest.raises(Conflict):
            intention_set_escalation_policy(
                agent=client_a.agent, intention_id=uuid.UUID(intention["id"]), policy={}
            )
