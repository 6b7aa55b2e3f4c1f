"""Skill tasks: thin and idempotent when called eagerly; and one real worker
taking sandbox tasks from the queue, as production does."""

import uuid

import pytest

from facts.tests.api_helpers import post
from ledger.models import Event
from skills import tasks
from skills.models import Execution, Validation
from skills.services import runs
from skills.tests.factories import BODY_FOR_API, expected_for, make_skill


@pytest.mark.django_db
def test_validate_version_promotes_and_a_redelivery_is_a_no_op():
    version = make_skill()
    validation = Validation.objects.get(version=version)
    tasks.validate_version(str(validation.pk))
    tasks.validate_version(str(validation.pk))
    validation.refresh_from_db()
    version.refresh_from_db()
    assert (validation.status, version.status) == ("passed", "experimental")
    assert validation.cases.count() == 2


@pytest.mark.django_db
def test_a_task_about_a_row_that_is_gone_changes_nothing():
    version = make_skill()
    validation = Validation.objects.get(version=version)

    def state():
        validation.refresh_from_db()
        return (
            Validation.objects.count(),
            Execution.objects.count(),
            Event.objects.count(),
            validation.status,
        )

    before = state()
    tasks.validate_version(str(uuid.uuid4()))
    tasks.execute_version(str(uuid.uuid4()))
    tasks.review_validated()
    assert state() == before


@pytest.mark.django_db
def test_an_unavailable_sandbox_is_retried_then_recorded(monkeypatch):
    from skills.sandbox import SandboxUnavailable

    version = make_skill()
    execution = runs.execution_request(
        agent=version.agent,
        version_id=version.pk,
        data=runs.ExecuteInput(params={"record": "A"}, allow_unvalidated=True),
    )

    def unavailable(**kwargs):
        raise SandboxUnavailable("bwrap is not installed")

    monkeypatch.setattr(runs, "_run", lambda version, params: unavailable())
    # Eagerly with retries exhausted: recorded as unavailable, not lost.
    tasks.execute_version.apply(args=[str(execution.pk)], retries=tasks.MAX_RETRIES)
    execution.refresh_from_db()
    assert (execution.status, execution.outcome, execution.succeeded) == (
        "finished",
        "unavailable",
        False,
    )
    assert execution.error == "sandbox unavailable: bwrap is not installed"


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_validation_and_a_synchronous_execute(celery_worker_process):
    from conftest import make_client

    client = make_client("skills-worker")
    response = post(client, "/api/v1/skills", BODY_FOR_API)
    assert response.status_code == 201, response.json()
    version_id = response.json()["versions"][0]["id"]
    # The examples validation was queued after commit; the worker runs it in the sandbox.
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        statuses = set(
            Validation.objects.filter(version_id=version_id).values_list("status", flat=True)
        )
        if statuses and "queued" not in statuses and len(statuses) >= 1:
            body = client.get(f"/api/v1/skills/versions/{version_id}").json()
            if (
                body["status"] == "experimental"
                and Validation.objects.filter(
                    version_id=version_id, kind="holdout", status="passed"
                ).exists()
            ):
                break
        time.sleep(0.2)
    else:
        raise AssertionError(f"not validated in time; worker log:\n{celery_worker_process.log()}")

    response = post(
        client,
        f"/api/v1/skills/versions/{version_id}/execute?wait=10",
        {"params": {"record": "W-1"}, "allow_unvalidated": True},
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["status"], body["outcome"], body["succeeded"], body["result"]) == (
        "finished",
        "ok",
        True,
        expected_for("W-1"),
    )
    assert Execution.objects.get(pk=body["id"]).validator_passed is True
