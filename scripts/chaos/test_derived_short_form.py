"""worker_kill.py's consolidation and validation checks in short, for the test
suite (scripts/chaos/_derived.py; the full run is in docs/reliability.md): the
work's tasks are all lost — the test's queue has no worker — and a consolidation
run is left mid-way as a killed worker leaves it (a step committed, its
heartbeat old). What celery-beat runs then — consolidate_due's resumption and
the validations reconciler — gets every piece done exactly once, and the same
checks as the full run pass; before it, they fail. A few seconds.
Sandbox executions asked for are lost and re-queued the same way.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from conftest import make_client
from consolidation import tasks as consolidation_tasks
from consolidation.models import ConsolidationRun, RunKind
from consolidation.selectors import agents_due
from consolidation.services import consolidation_run_start, consolidation_run_step
from skills import tasks as skill_tasks
from skills.services import runs
from skills.tests.helpers import in_process_sandbox  # noqa: F401  (a fixture)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _derived  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)


def send(client, sent: dict, kind: str, k: int, path: str, body: dict, status: int = 201):
    answer = client.post(path, body, format="json")
    assert answer.status_code == status, answer.json()
    sent.setdefault(kind, []).append((k, answer.status_code, 0.0))
    return answer.json()


def test_lost_consolidation_and_validation_tasks_are_done_once_by_the_reconcilers(
    monkeypatch,
    settings,
    in_process_sandbox,  # noqa: F811
):
    settings.CONSOLIDATION_BATCH_SIZE = 5
    client = make_client("derived-short-form")
    agent = client.agent
    sent: dict = {}
    now = datetime.now(UTC).isoformat()
    for k in range(14):
        send(client, sent, "statement", k, "/api/v1/episodes", _derived.statement_episode(k, now))
    for k in range(6):
        send(client, sent, "trace", k, "/api/v1/skills/traces", _derived.trace_body(k)[1])
    for k in range(2):
        made = send(client, sent, "skill", k, "/api/v1/skills", _derived.skill_body(k))
        execute = f"/api/v1/skills/versions/{made['versions'][0]['id']}/execute"
        body = {"params": {"record": f"X-{k}"}, "allow_unvalidated": True}
        send(client, sent, "execute", k, execute, body, status=202)

    # A facts run's worker was killed after its first step: the run is left running.
    run = consolidation_run_start(agent=agent, kind=RunKind.FACTS)
    assert not consolidation_run_step(run_id=run.pk).done
    ConsolidationRun.objects.filter(pk=run.pk).update(
        heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    left = _derived.pending(agent)
    assert (left["validations queued"], left["executions queued"]) == (2, 2)
    assert left["consolidation runs running"] == 1
    _, violations = _derived.check(agent, sent)
    assert any("still queued" in v for v in violations)
    assert any("execution" in v and "queued" in v for v in violations)
    assert any("ended running" in v for v in violations)

    # celery-beat: consolidate_due finds the agent (a stale run, new events) and
    # the tasks it queues run; the validations reconciler queues the lost
    # validations again, and a sandbox worker runs them (here, at once).
    monkeypatch.setattr(consolidation_tasks.consolidate_agent, "delay", lambda *a: None)
    monkeypatch.setattr(
        runs, "_enqueue_validation", lambda pk: skill_tasks.validate_version(str(pk))
    )
    monkeypatch.setattr(runs, "_enqueue_execution", lambda pk: skill_tasks.execute_version(str(pk)))
    for _ in range(2):  # two cycles of beat: the second finds nothing left
        for kind in RunKind.values:
            if agent.pk in agents_due(kind=kind, stale_seconds=60):
                consolidation_tasks.consolidate_agent(str(agent.pk), kind)
        skill_tasks.validation_backlog(grace_seconds=0)

    assert _derived.pending(agent) == {
        "validations queued": 0,
        "executions queued": 0,
        "consolidation runs running": 0,
        "facts events not consolidated": 0,
        "duplicates events not consolidated": 0,
        "skills events not consolidated": 0,
    }
    figures, violations = _derived.check(agent, sent)
    assert violations == [], violations
    assert figures["statements / claims / candidates"].startswith("14 / 14 / 14 (14 asserted")
    assert figures["traces / procedures / candidate skills"].startswith("6 / 2 / 2")
