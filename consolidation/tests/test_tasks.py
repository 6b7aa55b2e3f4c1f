"""Consolidation tasks: thin, re-queued when the budget runs out, and — in a real worker
against real Redis and PostgreSQL — resumable after the worker is killed mid-run."""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from consolidation import tasks
from consolidation.models import CandidateEvidence, CandidateFact, ConsolidationRun
from consolidation.selectors import agents_due
from consolidation.services import consolidate, consolidation_run_start, consolidation_run_step
from consolidation.tests.factories import said
from episodes.tests.factories import episodes_batch
from ledger.models import Event
from ledger.selectors import chain_verify
from piper.tenancy.services import agent_deactivate
from piper.tenancy.tests.factories import AgentFactory
from testsupport.plugin import celery_client, start_worker


def wait_for(condition, timeout: float, what: str, processes=()):
    deadline = time.monotonic() + timeout
    while not condition():
        for process in processes:
            process.assert_alive()
        if time.monotonic() > deadline:
            logs = "\n\n".join(f"--- {p.hostname}:\n{p.log()}" for p in processes)
            raise AssertionError(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.02)


@pytest.mark.django_db
class TestEager:
    def test_a_spent_budget_queues_the_task_again(self, monkeypatch, settings):
        settings.CONSOLIDATION_TASK_BUDGET_SECONDS = 0
        agent = AgentFactory(name="budget")
        for n in range(3):
            said(agent, f"Person{chr(65 + n)} Stone joined Initech.", minutes=n)
        queued = []
        monkeypatch.setattr(tasks.consolidate_agent, "delay", lambda *a: queued.append(a))
        result = tasks.consolidate_agent.apply(args=[str(agent.pk), "facts", 1]).get()
        run = ConsolidationRun.objects.get(agent=agent)
        assert result == {"run": str(run.pk), "status": "running", "cursor_seq": run.cursor_seq}
        assert (run.steps, queued) == (1, [(str(agent.pk), "facts", 1)])
        # The queued task (run here) resumes the same run.
        tasks.consolidate_agent.apply(args=[str(agent.pk), "facts", 1])
        assert ConsolidationRun.objects.get(pk=run.pk).steps == 2

    def test_an_unknown_or_inactive_agent_is_a_no_op(self):
        assert tasks.consolidate_agent.apply(args=[str(uuid.uuid4())]).get() == {"run": None}
        agent = agent_deactivate(agent=AgentFactory(name="asleep"))
        assert tasks.consolidate_agent.apply(args=[str(agent.pk)]).get() == {"run": None}

    def test_the_beat_queues_agents_with_new_episodes_and_stalled_runs(self, monkeypatch):
        fresh, done, stalled, idle = (
            AgentFactory(name=n) for n in ("fresh", "done", "stall", "idle")
        )
        said(fresh, "Alice Chen moved to Berlin.")
        said(done, "Bob Stone joined Initech.")
        consolidate(agent=done)
        said(stalled, "Carl Stone joined Initech.")
        said(stalled, "Dora Stone joined Initech.", minutes=1)
        run = consolidation_run_start(agent=stalled, batch_size=1)
        consolidation_run_step(run_id=run.pk)
        queued = []
        monkeypatch.setattr(tasks.consolidate_agent, "delay", lambda *a: queued.append(a))
        # A run stepped just now is someone's work in progress: left alone. Each kind
        # keeps its own cursor: no duplicates run has read anything yet.
        assert tasks.consolidate_due() == 4
        assert queued == [
            (str(fresh.pk), "facts"),
            *sorted((str(a.pk), "duplicates") for a in (fresh, done, stalled)),
        ]
        ConsolidationRun.objects.filter(pk=run.pk).update(
            heartbeat_at=timezone.now()
            - timedelta(seconds=settings.CONSOLIDATION_STALE_SECONDS + 1)
        )
        assert sorted(
            agents_due(kind="facts", stale_seconds=settings.CONSOLIDATION_STALE_SECONDS)
        ) == sorted([fresh.pk, stalled.pk])
        assert idle.pk not in agents_due(kind="facts", stale_seconds=0)


@pytest.mark.django_db(transaction=True)
def test_the_task_runs_in_a_real_worker(celery_worker_process):
    agent = AgentFactory(name="worker-run")
    said(agent, "Alice Chen moved to Berlin.")
    result = tasks.consolidate_agent.delay(str(agent.pk)).get(timeout=60)
    run = ConsolidationRun.objects.get(agent=agent)
    assert result == {"run": str(run.pk), "status": "succeeded", "cursor_seq": run.to_seq}
    assert CandidateFact.objects.get(agent=agent).status == "asserted"


@pytest.fixture
def private_workers(private_redis):
    settings_dict = dict(connection.settings_dict)
    started = []

    def worker(**kwargs):
        process = start_worker(
            settings_dict=settings_dict,
            queue=settings.CELERY_TASK_DEFAULT_QUEUE,
            redis_url=private_redis.url,
            name=f"piper-consolidation{len(started)}-{uuid.uuid4().hex[:6]}",
            **kwargs,
        )
        started.append(process)
        return process

    client = celery_client(private_redis.url, results=False)
    try:
        yield private_redis, worker, client
    finally:
        for process in reversed(started):
            process.stop()
        client.close()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_run_is_resumed_and_nothing_is_written_twice(private_workers):
    redis, worker, client = private_workers
    agent = AgentFactory(name="killed-mid-run")
    people = [f"Worker{n:03d} Stone" for n in range(240)]
    episodes_batch(
        agent,
        [
            {"summary": f"{name} moved to Town{n % 7}.", "actor": f"a{n % 5}", "session_id": "s"}
            for n, name in enumerate(people)
        ],
    )
    first = worker()
    # Three episodes a step: ~80 transactions, so the kill lands mid-run.
    client.send_task(
        "consolidation.consolidate_agent",
        args=[str(agent.pk), "facts", 3],
        queue=settings.CELERY_TASK_DEFAULT_QUEUE,
    )
    wait_for(
        lambda: ConsolidationRun.objects.filter(agent=agent, steps__gte=5).exists(),
        60,
        "the first steps",
        [first],
    )
    first.kill()
    run = ConsolidationRun.objects.get(agent=agent)
    assert run.status == "running"
    assert run.from_seq < run.cursor_seq < run.to_seq
    done_when_killed = CandidateFact.objects.filter(agent=agent).count()
    assert 0 < done_when_killed < len(people)
    # acks_late: the killed worker never acknowledged the task; a new worker takes it back
    # once it is older than the visibility timeout (shortened to a second) and resumes.
    [(_, taken_at)] = redis.client().zrange("unacked_index", 0, -1, withscores=True)
    wait_for(lambda: time.time() > taken_at + 1.5, 5, "the visibility timeout")
    second = worker(conf={"broker_transport_options": {"visibility_timeout": 1}})
    wait_for(
        lambda: ConsolidationRun.objects.get(pk=run.pk).status == "succeeded",
        120,
        "the run to finish",
        [second],
    )
    run.refresh_from_db()
    assert ConsolidationRun.objects.filter(agent=agent).count() == 1
    assert (run.episodes_read, run.cursor_seq) == (len(people), run.to_seq)
    # Every claim once, each with exactly its one episode as evidence.
    assert (
        sorted(CandidateFact.objects.filter(agent=agent).values_list("subject", flat=True))
        == people
    )
    assert set(CandidateFact.objects.filter(agent=agent).values_list("status", flat=True)) == {
        "asserted"
    }
    assert CandidateEvidence.objects.filter(agent=agent).count() == len(people)
    events = Event.objects.filter(agent=agent)
    assert events.filter(event_type="consolidation.run_started").count() == 1
    assert events.filter(event_type="consolidation.candidate_proposed").count() == len(people)
    assert events.filter(event_type="consolidation.candidate_asserted").count() == len(people)
    assert events.filter(event_type="facts.asserted").count() == len(people)
    assert chain_verify(agent=agent).ok
    # The resumed task was acknowledged once it returned.
    wait_for(lambda: redis.client().hlen("unacked") == 0, 30, "the acknowledgement", [second])
