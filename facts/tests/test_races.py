"""facts.services.common.run_facts_write: meeting a constraint a concurrent
writer's row can make us meet is a lost race, run again by the outermost
run_write; any other IntegrityError is a bug and surfaces at once.

The violations are real: a second row of an existing predicate, inserted in
the write's own transaction (the threaded races are in test_concurrency.py)."""

import pytest
from django.db import IntegrityError

from facts.models import Predicate
from facts.services.common import run_facts_write
from facts.tests.factories import PredicateFactory
from piper.errors import Conflict
from piper.ids import uuid7
from piper.transactions import WRITE_ATTEMPTS, RaceLost, run_write

pytestmark = pytest.mark.django_db


def _insert_again(predicate: Predicate, **changes) -> None:
    row = Predicate.objects.get(pk=predicate.pk)
    for name, value in changes.items():
        setattr(row, name, value)
    row.save(force_insert=True)


def _write(predicate: Predicate, runs: list, collisions: int, **changes):
    """A write whose first `collisions` runs insert the predicate's row again."""

    def write():
        runs.append(1)
        if len(runs) <= collisions:
            _insert_again(predicate, **changes)
        return len(runs)

    return write


def test_a_write_meeting_a_concurrent_writers_row_is_run_again():
    predicate, runs = PredicateFactory(), []

    # The same (agent, name) under a new id: facts_predicate_unique, as when
    # two first uses of a predicate race.
    assert run_facts_write(_write(predicate, runs, 1, pk=uuid7())) == 2

    assert Predicate.objects.filter(agent=predicate.agent).count() == 1


def test_a_write_that_keeps_losing_the_race_is_a_409_concurrent_write():
    predicate, runs = PredicateFactory(), []

    with pytest.raises(Conflict) as raised:
        run_facts_write(_write(predicate, runs, WRITE_ATTEMPTS, pk=uuid7()))

    assert (raised.value.code, raised.value.message) == (
        "concurrent_write",
        "another write to the same fact kept getting there first; retry the request",
    )
    assert isinstance(raised.value.__cause__, RaceLost)
    assert isinstance(raised.value.__cause__.__cause__, IntegrityError)
    assert len(runs) == WRITE_ATTEMPTS


def test_a_constraint_no_concurrent_writer_explains_is_not_retried():
    predicate, runs = PredicateFactory(), []

    # The same id under another name: the primary key, a bug rather than a race.
    with pytest.raises(IntegrityError, match="facts_predicate_pkey"):
        run_facts_write(_write(predicate, runs, 1, name="another_name"))

    assert len(runs) == 1


def test_under_an_enclosing_write_the_lost_race_runs_the_whole_again():
    """As a facts service inside a request (or inside consolidation's own
    transaction): the enclosing run_write is the owner and runs everything again."""
    predicate, outer_runs, inner_runs = PredicateFactory(), [], []
    inner = _write(predicate, inner_runs, 1, pk=uuid7())

    def outer():
        outer_runs.append(1)
        return run_facts_write(inner)

    assert run_write(outer) == 2

    assert (len(outer_runs), len(inner_runs)) == (2, 2)
