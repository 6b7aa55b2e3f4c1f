"""The validations reconciler (skills.validation_backlog): a validation whose task
was lost — Redis flushed, or taken by a worker that was killed (acks_late gives
it back only after the visibility timeout, an hour) — is found in PostgreSQL and
queued again, and a real worker runs it exactly once; one a worker is running
now is left to it; a promotion lost between a validation's finish and the
version's move is made up (issue 18, scripts/chaos/worker_kill.py)."""

import time

import psycopg
import pytest
from django.db import connection

from ledger.models import Event
from skills import tasks
from skills.models import (
    Execution,
    ExecutionStatus,
    SkillVersion,
    Validation,
    ValidationKind,
    ValidationStatus,
    VersionStatus,
)
from skills.services import runs
from skills.tests.factories import make_skill

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def lost_tasks(monkeypatch):
    """Validations requested now get no task (as if the broker lost it)."""
    lost = []
    monkeypatch.setattr(runs, "_enqueue_validation", lost.append)
    yield lost
    monkeypatch.undo()


def finished_events(validation_id) -> int:
    return Event.objects.filter(
        event_type="skill.validation_finished", payload__validation_id=str(validation_id)
    ).count()


def test_a_lost_validation_is_queued_again_and_a_real_worker_runs_it_once(
    lost_tasks, celery_worker_process
):
    version = make_skill()
    [validation] = Validation.objects.filter(version=version)
    assert lost_tasks == [validation.pk]
    lost_tasks.clear()
    time.sleep(1.5)
    # Within the grace nothing is touched: its task may still be on its way.
    assert tasks.validation_backlog(grace_seconds=600) == {
        "requeued": 0,
        "running": 0,
        "promotions": 0,
        "executions_requeued": 0,
    }
    # The fixture's no-op is undone for the reconciler: it queues the real task.
    from pytest import MonkeyPatch

    with MonkeyPatch.context() as patch:
        patch.setattr(runs, "_enqueue_validation", lambda pk: tasks.validate_version.delay(str(pk)))
        assert tasks.validation_backlog(grace_seconds=1)["requeued"] == 1
        deadline = time.monotonic() + 60
        # The task records the validation, then promotes the version (a second
        # transaction): wait for both.
        while (
            Validation.objects.get(pk=validation.pk).status == ValidationStatus.QUEUED
            or SkillVersion.objects.get(pk=version.pk).status == VersionStatus.CANDIDATE
        ):
            if time.monotonic() > deadline:
                raise AssertionError(f"never run; worker log:\n{celery_worker_process.log()}")
            time.sleep(0.2)
    validation.refresh_from_db()
    version.refresh_from_db()
    assert (validation.status, version.status) == ("passed", "experimental")
    assert validation.cases.count() == validation.cases_total == 2
    assert finished_events(validation.pk) == 1
    # Finished: the next sweep leaves it alone (the hold-out replay it queued is new).
    assert validation.pk not in runs.validation_backlog(grace_seconds=0).requeued


@pytest.fixture
def other_session():
    params = connection.get_connection_params()
    for name in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(name, None)
    with psycopg.connect(**params, autocommit=True) as other:
        yield other


def test_a_validation_a_worker_is_running_is_left_to_it(
    lost_tasks, other_session, in_process_sandbox
):
    version = make_skill()
    [validation] = Validation.objects.filter(version=version)
    key = f"skills:validation:{validation.pk}"
    # Another worker's connection holds the run lock: it is running this validation.
    other_session.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
    lost_tasks.clear()

    done = runs.validation_backlog(grace_seconds=0)
    assert (done.requeued, done.running) == ([], 1)
    assert lost_tasks == []
    # A second delivery meanwhile steps aside: one run, by the lock's holder.
    assert runs.validation_run(validation_id=validation.pk) is None
    assert Validation.objects.get(pk=validation.pk).status == ValidationStatus.QUEUED

    other_session.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])
    assert runs.validation_backlog(grace_seconds=0).requeued == [validation.pk]
    assert runs.validation_run(validation_id=validation.pk).status == ValidationStatus.PASSED
    assert finished_events(validation.pk) == 1


def test_a_promotion_lost_after_the_finish_is_made_up_with_its_replays(
    lost_tasks, monkeypatch, in_process_sandbox
):
    version = make_skill()
    [validation] = Validation.objects.filter(version=version)
    # The worker dies between the validation's commit and the version's promotion.
    with monkeypatch.context() as patch:
        patch.setattr(runs.lifecycle, "consider_promotion", lambda **kwargs: None)
        runs.validation_run(validation_id=validation.pk)
    version.refresh_from_db()
    assert (Validation.objects.get(pk=validation.pk).status, version.status) == (
        "passed",
        VersionStatus.CANDIDATE,
    )
    # Within the grace: left alone.
    assert runs.validation_backlog(grace_seconds=600).promotions == []

    done = runs.validation_backlog(grace_seconds=0)

    assert done.promotions == [version.pk]
    version.refresh_from_db()
    assert version.status == VersionStatus.EXPERIMENTAL
    # The hold-out replay was requested in the promotion's transaction.
    [holdout] = Validation.objects.filter(version=version, kind=ValidationKind.HOLDOUT)
    assert holdout.pk in lost_tasks
    # Made up once: the next sweep has nothing to promote.
    assert runs.validation_backlog(grace_seconds=0).promotions == []


def test_a_lost_execution_is_queued_again_and_run_once(
    monkeypatch, other_session, in_process_sandbox
):
    version = make_skill()
    lost = []
    monkeypatch.setattr(runs, "_enqueue_execution", lost.append)
    execution = runs.execution_request(
        agent=version.agent,
        version_id=version.pk,
        data=runs.ExecuteInput(params={"record": "A-1"}, allow_unvalidated=True),
    )
    assert lost == [execution.pk]
    assert runs.validation_backlog(grace_seconds=600).executions_requeued == []
    # A worker running it holds its lock: left to it; a second delivery steps aside.
    key = f"skills:execution:{execution.pk}"
    other_session.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [key])
    assert runs.validation_backlog(grace_seconds=0).executions_requeued == []
    assert runs.execution_run(execution_id=execution.pk) is None
    other_session.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [key])

    ran = []
    monkeypatch.setattr(
        runs, "_enqueue_execution", lambda pk: ran.append(runs.execution_run(execution_id=pk))
    )
    assert runs.validation_backlog(grace_seconds=0).executions_requeued == [execution.pk]
    execution.refresh_from_db()
    assert (execution.status, execution.succeeded) == (ExecutionStatus.FINISHED, True)
    assert (
        Event.objects.filter(
            event_type="skill.execution_finished", payload__execution_id=str(execution.pk)
        ).count()
        == 1
    )
    assert runs.validation_backlog(grace_seconds=0).executions_requeued == []
    assert Execution.objects.filter(pk=execution.pk, status=ExecutionStatus.QUEUED).count() == 0
