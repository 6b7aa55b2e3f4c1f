"""piper.transactions.run_write: the outermost run_write owns the retries.

The errors are real: PostgreSQL raises them (a deadlock's SQLSTATE), and each
run writes a real ledger event, so a test sees which run's work was kept."""

import pytest
from django.db import IntegrityError, OperationalError, connection, transaction

from ledger import services as ledger_services
from ledger.models import Event
from piper.errors import Conflict
from piper.tenancy.tests.factories import AgentFactory
from piper.transactions import WRITE_ATTEMPTS, RaceLost, run_write

pytestmark = pytest.mark.django_db

LOST = "another write to the same fact kept getting there first; retry the request"


def _raise_in_postgres(sqlstate: str) -> None:
    # A real PostgreSQL error with that SQLSTATE, as psycopg and Django see one.
    with connection.cursor() as cursor:
        cursor.execute(f"DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '{sqlstate}'; END $$")


def _append_then_fail(agent, runs: list, failures: int, fail, name: str = "run"):
    """A write that appends `<name>.<n>` on its n-th run, then fails (fail()) on the first `failures`."""

    def write():
        runs.append(1)
        ledger_services.event_append(agent=agent, event_type=f"{name}.{len(runs)}")
        if len(runs) <= failures:
            fail()
        return len(runs)

    return write


def _lose_race():
    raise RaceLost(LOST)


def _deadlock():
    _raise_in_postgres("40P01")


def _kept(agent) -> list[str]:
    return list(
        Event.objects.filter(agent=agent).order_by("seq").values_list("event_type", flat=True)
    )


@pytest.mark.parametrize("sqlstate", ["40P01", "40001"])  # deadlock, serialization failure
def test_a_deadlocked_write_is_run_again_and_only_its_last_run_is_kept(sqlstate):
    agent, runs = AgentFactory(), []

    result = run_write(_append_then_fail(agent, runs, 2, lambda: _raise_in_postgres(sqlstate)))

    assert result == 3
    assert _kept(agent) == ["run.3"]


def test_a_write_deadlocked_every_time_gives_up_after_the_last_attempt():
    agent, runs = AgentFactory(), []

    with pytest.raises(OperationalError):
        run_write(_append_then_fail(agent, runs, WRITE_ATTEMPTS, _deadlock))

    assert len(runs) == WRITE_ATTEMPTS
    assert _kept(agent) == []


def test_other_database_errors_are_not_retried():
    agent, runs = AgentFactory(), []

    with pytest.raises(OperationalError):
        run_write(_append_then_fail(agent, runs, 1, lambda: _raise_in_postgres("57014")))

    assert len(runs) == 1


def test_an_integrity_error_nobody_called_a_lost_race_is_not_retried():
    agent, runs = AgentFactory(), []

    with pytest.raises(IntegrityError):
        run_write(_append_then_fail(agent, runs, 1, lambda: _raise_in_postgres("23505")))

    assert len(runs) == 1
    assert _kept(agent) == []


def test_a_lost_race_is_run_again_and_only_the_winning_run_is_kept():
    agent, runs = AgentFactory(), []

    assert run_write(_append_then_fail(agent, runs, 1, _lose_race)) == 2

    assert _kept(agent) == ["run.2"]


def test_a_race_lost_every_time_is_a_409_concurrent_write():
    agent, runs = AgentFactory(), []

    with pytest.raises(Conflict) as raised:
        run_write(_append_then_fail(agent, runs, WRITE_ATTEMPTS, _lose_race))

    assert (raised.value.status, raised.value.code, raised.value.message) == (
        409,
        "concurrent_write",
        LOST,
    )
    assert isinstance(raised.value.__cause__, RaceLost)
    assert len(runs) == WRITE_ATTEMPTS
    assert _kept(agent) == []


@pytest.mark.parametrize("fail", [_lose_race, _deadlock], ids=["race", "deadlock"])
def test_a_nested_run_write_leaves_the_retry_to_the_outermost(fail):
    """The inner write fails once: the owner runs the whole again, outer work
    included; the inner one does not run itself again inside the same run."""
    agent, outer_runs, inner_runs = AgentFactory(), [], []
    inner = _append_then_fail(agent, inner_runs, 1, fail, name="inner")

    def outer():
        outer_runs.append(1)
        ledger_services.event_append(agent=agent, event_type=f"outer.{len(outer_runs)}")
        return run_write(inner)

    assert run_write(outer) == 2

    assert (len(outer_runs), len(inner_runs)) == (2, 2)
    assert _kept(agent) == ["outer.2", "inner.2"]


def test_a_nested_run_write_losing_every_time_is_tried_as_often_as_the_owner_allows():
    agent, outer_runs, inner_runs = AgentFactory(), [], []
    inner = _append_then_fail(agent, inner_runs, WRITE_ATTEMPTS, _lose_race, name="inner")

    def outer():
        outer_runs.append(1)
        return run_write(inner)

    with pytest.raises(Conflict) as raised:
        run_write(outer)

    assert raised.value.code == "concurrent_write"
    assert (len(outer_runs), len(inner_runs)) == (WRITE_ATTEMPTS, WRITE_ATTEMPTS)


def test_inside_a_callers_plain_transaction_the_outermost_run_write_still_owns_the_retry():
    """A caller's transaction.atomic (a task's, a test's) retries nothing: the
    run_write inside it retries its own savepoint, and the caller's work stays."""
    agent, runs = AgentFactory(), []

    with transaction.atomic():
        ledger_services.event_append(agent=agent, event_type="before")
        assert run_write(_append_then_fail(agent, runs, 1, _lose_race)) == 2
        ledger_services.event_append(agent=agent, event_type="after")

    assert _kept(agent) == ["before", "run.2", "after"]


def test_a_failing_write_leaves_the_next_one_its_own_owner():
    agent, runs = AgentFactory(), []
    with pytest.raises(OperationalError):
        run_write(_append_then_fail(agent, [], 1, lambda: _raise_in_postgres("57014")))

    assert run_write(_append_then_fail(agent, runs, 1, _lose_race)) == 2


@pytest.mark.django_db(transaction=True)
def test_work_run_on_commit_is_a_write_of_its_own_with_its_own_retries():
    """A callback after commit (a task run eagerly) cannot be retried by the
    write that registered it, which has committed: it owns its own retries."""
    agent, runs = AgentFactory(), []
    after = _append_then_fail(agent, runs, 1, _lose_race, name="after")

    def write():
        ledger_services.event_append(agent=agent, event_type="write")
        transaction.on_commit(lambda: run_write(after))

    run_write(write)

    assert len(runs) == 2
    assert _kept(agent) == ["write", "after.2"]
