"""Fault tests: real Celery workers and celery-beat, real Redis, real PostgreSQL.

Each test gets a redis-server of its own (`private_redis`), so it can kill
workers, flush or restart Redis without touching anyone else's queues; the
workers and beats it starts run against the test database and that Redis,
consuming this run's queue name there. What must hold whatever happens:
PostgreSQL is the truth, and each due intention is fired exactly once.
"""

import json
import time
import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from facts.tests.factories import claim
from intentions import tasks
from intentions.models import Firing, Intention, OutboxMessage, Transition, Webhook
from intentions.services.lifecycle import intention_fire
from intentions.tests.factories import IntentionFactory
from intentions.tests.receiver import running_receiver
from ledger.models import Event
from ledger.selectors import chain_verify
from ledger.services import event_append
from piper.tenancy.models import Agent
from piper.tenancy.tests.factories import AgentFactory
from testsupport.plugin import celery_client, start_beat, start_redis_server, start_worker

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def wait_for(condition, timeout: float, what: str, processes=()):
    deadline = time.monotonic() + timeout
    while not condition():
        for process in processes:
            process.assert_alive()
        if time.monotonic() > deadline:
            logs = "\n\n".join(f"--- {p.hostname}:\n{p.log()}" for p in processes)
            raise AssertionError(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.02)


@pytest.fixture
def fault(private_redis):
    """Start workers and beats on this test's Redis; all stopped (or already killed) at the end."""
    settings_dict = dict(connection.settings_dict)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    started = []
    env = SimpleNamespace(redis=private_redis, queue=queue, processes=started)
    # Sends only (no result store), and a dead broker fails a send at once.
    env.client = celery_client(private_redis.url, results=False)
    env.client.conf.update(task_publish_retry=False, broker_transport_options={"max_retries": 0})

    def worker(**kwargs):
        process = start_worker(
            settings_dict=settings_dict,
            queue=queue,
            redis_url=env.redis.url,
            name=f"piper-fault{len(started)}-{uuid.uuid4().hex[:6]}",
            **kwargs,
        )
        started.append(process)
        return process

    def beat():
        process = start_beat(settings_dict=settings_dict, redis_url=env.redis.url)
        started.append(process)
        return process

    def send(name, *args):
        return env.client.send_task(name, args=list(args), queue=queue)

    env.worker, env.beat, env.send = worker, beat, send
    try:
        yield env
    finally:
        for process in reversed(started):
            process.stop()
        env.client.close()


def timed(agent, due_at):
    return IntentionFactory(agent=agent, trigger_type="time", due_at=due_at)


def succeeded(process, task: str) -> int:
    text = process.log(tail=10_000_000)
    return sum(1 for line in text.splitlines() if f"Task {task}[" in line and "succeeded" in line)


def assert_each_fired_exactly_once(intentions):
    ids = sorted(i.pk for i in intentions)
    assert sorted(Firing.objects.values_list("intention_id", flat=True)) == ids
    assert set(Intention.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"due"}
    assert Transition.objects.filter(to_status="due").count() == len(ids)
    fired = Event.objects.filter(event_type="intention.fired")
    assert sorted(fired.values_list("payload__intention_id", flat=True)) == [str(i) for i in ids]
    for agent in Agent.objects.filter(pk__in={i.agent_id for i in intentions}):
        assert chain_verify(agent=agent).ok


def test_a_worker_killed_mid_firing_each_due_intention_fires_once_in_the_end(fault):
    agents = [AgentFactory() for _ in range(3)]
    past = timezone.now() - timedelta(minutes=1)
    due = [timed(agents[n % 3], past) for n in range(300)]
    first = fault.worker()

    fault.send("intentions.engine_cycle")
    wait_for(lambda: Firing.objects.count() >= 20, 30, "the first firings", [first])
    first.kill()

    fired_when_killed = Firing.objects.count()
    assert 20 <= fired_when_killed < len(due)
    # acks_late: the killed worker never acknowledged the engine cycle.
    [(_, taken_at)] = fault.redis.client().zrange("unacked_index", 0, -1, withscores=True)
    # A new worker takes the unacknowledged cycle back once it is older than the
    # visibility timeout (shortened from an hour to a second so the test need not
    # wait an hour) and finishes it; nothing else is sent.
    wait_for(lambda: time.time() > taken_at + 1.5, 5, "the visibility timeout")
    second = fault.worker(conf={"broker_transport_options": {"visibility_timeout": 1}})
    wait_for(lambda: Firing.objects.count() == len(due), 30, "every firing", [second])
    wait_for(lambda: succeeded(second, "intentions.engine_cycle") == 1, 30, "the cycle", [second])
    # And the next beat's cycle finds nothing left to fire.
    fault.send("intentions.engine_cycle")
    wait_for(lambda: succeeded(second, "intentions.engine_cycle") == 2, 30, "the next", [second])

    assert_each_fired_exactly_once(due)
    assert fault.redis.client().hlen("unacked") == 0


def _queued_tasks(redis, queue) -> dict[str, int]:
    counts: dict[str, int] = {}
    for raw in redis.lrange(queue, 0, -1):
        name = json.loads(raw)["headers"]["task"]
        counts[name] = counts.get(name, 0) + 1
    return counts


def _pending_work():
    """Due time triggers, and event and state triggers whose cue has been committed."""
    past = timezone.now() - timedelta(seconds=5)
    clock, events, states = AgentFactory(), AgentFactory(), AgentFactory()
    due = [timed(clock, past) for _ in range(10)]
    watchers = [
        IntentionFactory(
            agent=events, trigger_type="event", trigger_spec={"event_type": "deploy.*"}
        )
        for _ in range(3)
    ]
    event_append(agent=events, event_type="deploy.done")
    stated = [
        IntentionFactory(
            agent=states,
            trigger_type="state",
            trigger_spec={"subject": "web", "predicate": "status", "value": "down"},
        )
        for _ in range(3)
    ]
    claim(states, "web", "status", "down", past)
    return due + watchers + stated


def test_redis_flushed_with_work_queued_nothing_is_lost(fault, monkeypatch):
    # The post-commit hook queues its matchers on this test's Redis.
    for task in (tasks.match_events, tasks.check_states):
        monkeypatch.setattr(task, "delay", lambda *args, _name=task.name: fault.send(_name, *args))
    intentions = _pending_work()
    fault.send("intentions.engine_cycle")  # the beat's cycle, queued before the flush
    redis = fault.redis.client()
    assert _queued_tasks(redis, fault.queue) == {
        "intentions.match_events": 4,
        "intentions.check_states": 1,  # only the claim's commit can change a fact
        "intentions.engine_cycle": 1,
    }

    redis.flushall()

    assert (redis.dbsize(), Firing.objects.count()) == (0, 0)
    worker = fault.worker()
    fault.send("intentions.engine_cycle")  # the next beat
    wait_for(lambda: Firing.objects.count() == len(intentions), 30, "every firing", [worker])
    wait_for(lambda: succeeded(worker, "intentions.engine_cycle") >= 1, 30, "the cycle", [worker])
    assert_each_fired_exactly_once(intentions)


def test_redis_down_while_work_arrives_then_restarted_nothing_is_lost(fault, monkeypatch):
    worker = fault.worker()
    for task in (tasks.match_events, tasks.check_states):
        monkeypatch.setattr(task, "delay", lambda *args, _name=task.name: fault.send(_name, *args))
    port = fault.redis.port
    fault.redis.stop()

    # Writes commit although the post-commit enqueue fails (the hook logs it).
    intentions = _pending_work()
    assert Firing.objects.count() == 0

    fault.redis = start_redis_server(port=port, directory=fault.redis.directory)
    try:
        assert fault.redis.client().llen(fault.queue) == 0  # whatever was queued is gone
        fault.send("intentions.engine_cycle")  # the first beat after Redis is back
        wait_for(lambda: Firing.objects.count() == len(intentions), 30, "every firing", [worker])
        assert_each_fired_exactly_once(intentions)
    finally:
        fault.redis.stop()


def test_two_beats_at_once_never_double_fire(fault):
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    PeriodicTask.objects.create(
        name="fault-test: intentions engine",
        task="intentions.engine_cycle",
        interval=IntervalSchedule.objects.create(every=1, period=IntervalSchedule.SECONDS),
        queue=fault.queue,
    )
    agents = [AgentFactory() for _ in range(3)]
    before = [timed(agents[n % 3], timezone.now() - timedelta(seconds=n)) for n in range(60)]
    worker = fault.worker(concurrency=2)
    beats = [fault.beat(), fault.beat()]
    soon = timezone.now()
    later = [timed(agents[n % 3], soon + timedelta(milliseconds=50 * n)) for n in range(60)]
    everything = before + later

    wait_for(
        lambda: Firing.objects.count() == len(everything),
        30,
        "every firing",
        [worker, *beats],
    )
    sent_by = [b.log().count("Sending due task fault-test: intentions engine") for b in beats]
    wait_for(
        lambda: all(
            b.log().count("Sending due task fault-test: intentions engine") >= n + 2
            for b, n in zip(beats, sent_by, strict=True)
        ),
        15,
        "two more cycles from each beat",
        [worker, *beats],
    )
    for beat in beats:
        beat.stop()
    wait_for(lambda: fault.redis.client().llen(fault.queue) == 0, 15, "the queue to drain")

    assert succeeded(worker, "intentions.engine_cycle") >= 4
    assert_each_fired_exactly_once(everything)


def test_a_worker_killed_mid_delivery_the_message_is_delivered_after_the_lease(fault, monkeypatch):
    monkeypatch.setattr(
        tasks.deliver_outbox_message,
        "delay",
        lambda *args: fault.send("intentions.deliver_outbox_message", *args),
    )
    agent = AgentFactory()
    with running_receiver() as receiver:
        receiver.hang = 1  # the first POST never gets its answer: the worker dies waiting
        Webhook.objects.create(agent=agent, url=receiver.url, secret="s3cret")
        intention = IntentionFactory(agent=agent)
        first = fault.worker()
        intention_fire(agent=agent, intention_id=intention.pk)  # queues the delivery on commit
        message = OutboxMessage.objects.get(firing__intention=intention)

        wait_for(receiver.arrived.is_set, 30, "the first POST", [first])
        first.kill()

        message.refresh_from_db()
        assert (message.status, message.attempts) == ("pending", 1)
        assert message.claimed_until > timezone.now()
        # The lease (60 s) runs out; not waited for here.
        OutboxMessage.objects.filter(pk=message.pk).update(
            claimed_until=timezone.now() - timedelta(seconds=1)
        )
        second = fault.worker()
        fault.send("intentions.retry_outbox")  # the beat's retry
        wait_for(
            lambda: OutboxMessage.objects.get(pk=message.pk).status == "delivered",
            30,
            "the redelivery",
            [second],
        )

    message.refresh_from_db()
    assert (message.attempts, message.claimed_until, message.last_error) == (2, None, "")
    # At least once, and the receiver can tell: the same delivery id, body and signature.
    (headers1, body1), (headers2, body2) = receiver.received
    assert body1 == body2
    assert json.loads(body1) == message.payload
    for name in ("X-Piper-Delivery", "X-Piper-Signature"):
        assert headers1[name] == headers2[name]
    assert headers1["X-Piper-Delivery"] == str(message.firing_id)
