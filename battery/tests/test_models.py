import io

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction

from battery.models import BatteryRun, ItemResult


def test_models_and_migrations_agree(db):
    out = io.StringIO()
    call_command("makemigrations", "battery", "--check", "--dry-run", stdout=out)
    assert out.getvalue() == "No changes detected in app 'battery'\n"


def _run(**fields) -> BatteryRun:
    return BatteryRun.objects.create(seed=1, suites=["L"], target="in-process", **fields)


@pytest.mark.parametrize("score", [-0.01, 100.01])
@pytest.mark.parametrize(
    ("field", "constraint"),
    [("score", "battery_run_score_0_100"), ("score_of_run", "battery_run_score_of_run_0_100")],
)
def test_the_database_refuses_a_score_outside_0_100(db, score, field, constraint):
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        _run(**{field: score})
    assert getattr(_run(**{field: 100}), field) == 100


def test_a_run_may_be_incomplete(db):
    assert _run(status=BatteryRun.Status.INCOMPLETE).status == "incomplete"


@pytest.mark.parametrize(
    ("passed", "failure_code"),
    [(True, "W0"), (False, "")],
    ids=["pass-with-code", "fail-without-code"],
)
def test_the_database_requires_a_failure_code_exactly_when_an_item_failed(db, passed, failure_code):
    run = _run()
    with (
        pytest.raises(IntegrityError, match="battery_item_failure_code_iff_failed"),
        transaction.atomic(),
    ):
        ItemResult.objects.create(
            run=run,
            suite="L",
            item="x",
            title="x",
            passed=passed,
            failure_code=failure_code,
            duration_ms=1,
        )


def test_an_item_is_stored_once_per_run(db):
    run = _run()
    ItemResult.objects.create(run=run, suite="L", item="x", title="x", passed=True, duration_ms=1)
    with pytest.raises(IntegrityError, match="battery_item_once_per_run"), transaction.atomic():
        ItemResult.objects.create(
            run=run, suite="L", item="x", title="x", passed=True, duration_ms=1
        )
