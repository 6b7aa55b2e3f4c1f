import time

import pytest
from django.db import connection

from battery.registry import Item, ItemFailure, expect, expect_equal
from battery.runner import ItemContext, item_execute, suite_execute
from battery.taxonomy import FailureCode
from piper.tenancy.models import Agent
from piper.tenancy.services import agent_create

from .helpers import fake_generated_suite


def _context(*, seed: int = 5, item: str = "x") -> ItemContext:
    # These items never call the service, so no client is needed.
    return ItemContext(run_id=None, seed=seed, suite="ZR", item=item, client=None, new_client=None)


def _run(func, *, default_code=FailureCode.S0):
    item = Item(key="x", title="An item", run=func, default_code=default_code)
    return item_execute(suite_code="ZR", item=item, context=_context())


def test_a_passing_item_reports_its_metrics():
    outcome = _run(lambda ctx: {"recall": 0.5})
    assert (outcome.suite, outcome.item, outcome.title) == ("ZR", "x", "An item")
    assert (outcome.passed, outcome.failure_code, outcome.detail, outcome.metrics) == (
        True,
        "",
        "",
        {"recall": 0.5},
    )


def test_an_items_duration_is_the_time_it_took():
    outcome = _run(lambda ctx: time.sleep(0.03))
    assert 30 <= outcome.duration_ms < 5_000


def test_an_item_returning_none_passes_with_no_metrics():
    outcome = _run(lambda ctx: None)
    assert (outcome.passed, outcome.metrics) == (True, {})


def test_an_item_failure_keeps_its_code_detail_and_metrics():
    def item(ctx):
        raise ItemFailure(FailureCode.P1, "fired twice", metrics={"fired": 2})

    outcome = _run(item)
    assert (outcome.passed, outcome.failure_code, outcome.detail, outcome.metrics) == (
        False,
        "P1",
        "fired twice",
        {"fired": 2},
    )


def test_an_unexpected_exception_fails_with_the_default_code_and_the_traceback_tail():
    def item(ctx):
        return {"ratio": 1 / 0}

    outcome = _run(item, default_code=FailureCode.S0)
    assert (outcome.passed, outcome.failure_code, outcome.metrics) == (False, "S0", {})
    assert outcome.detail.startswith("unexpected error: Traceback (most recent call last):")
    assert 'return {"ratio": 1 / 0}' in outcome.detail
    assert outcome.detail.endswith("ZeroDivisionError: division by zero")


def test_expect_helpers_raise_item_failures():
    expect(True, FailureCode.R0, "unused")
    expect_equal(3, 3, code=FailureCode.R0, what="unused")
    with pytest.raises(ItemFailure) as caught:
        expect_equal([1], [2], code=FailureCode.R1, what="answer")
    assert (caught.value.code, caught.value.detail) == (
        FailureCode.R1,
        "answer: expected [2], got [1]",
    )
    with pytest.raises(ItemFailure) as caught:
        expect(False, "A0", "not surfaced")
    assert (caught.value.code, caught.value.detail) == (FailureCode.A0, "not surfaced")


def test_randomness_is_seeded_per_run_suite_and_item():
    def draws(**kw):
        rng = _context(**kw).rng
        return [rng.random(), rng.randrange(10**9)]

    assert draws(seed=5, item="x") == draws(seed=5, item="x")
    assert draws(seed=5, item="x") != draws(seed=6, item="x")
    assert draws(seed=5, item="x") != draws(seed=5, item="y")


def test_inside_a_transaction_a_failed_item_is_rolled_back_and_a_passed_one_kept(db):
    def passes(ctx):
        agent_create(name="kept-by-passing-item")

    def fails(ctx):
        agent_create(name="dropped-by-failing-item")
        raise ItemFailure(FailureCode.W0, "no")

    def breaks_the_transaction(ctx):
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 / 0")

    assert _run(passes).passed is True
    assert _run(fails).passed is False
    broken = _run(breaks_the_transaction, default_code=FailureCode.W1)
    assert (broken.passed, broken.failure_code) == (False, "W1")
    assert "division by zero" in broken.detail
    # The database error did not abort the enclosing transaction.
    assert list(Agent.objects.filter(name__contains="-item").values_list("name", flat=True)) == [
        "kept-by-passing-item"
    ]


def _execute(suite, *, seed=5):
    return list(suite_execute(suite=suite, seed=seed, run_id=None, client=None, new_client=None))


def test_a_suite_runs_its_declared_items_then_its_generated_ones():
    suite = fake_generated_suite("ZG", count=3, failing=[1])
    suite.item("declared", "A declared item", default_code=FailureCode.W0)(lambda ctx: {"d": 1})
    outcomes = _execute(suite)
    draws = [spec.data["draw"] for spec in suite.specs(suite.generators[0], seed=5)]
    assert [(o.item, o.passed, o.failure_code, o.generator, o.metrics) for o in outcomes] == [
        ("declared", True, "", "", {"d": 1}),
        ("gen_0", True, "", "gen", {"planned": 1, "draw": draws[0], "state": "gen"}),
        ("gen_1", False, "R1", "gen", {"planned": 1}),
        ("gen_2", True, "", "gen", {"planned": 1, "draw": draws[2], "state": "gen"}),
    ]
    assert outcomes[2].detail == "generated item 1 failed on purpose"
    assert outcomes[2].title == "Generated item 1"
    assert suite.prepared == [["gen_0", "gen_1", "gen_2"]]  # once, with every item


def test_when_the_world_cannot_be_prepared_every_generated_item_fails_with_its_code():
    def refuses(ctx, specs):
        raise ItemFailure(FailureCode.W0, "POST /facts answered 400")

    outcomes = _execute(fake_generated_suite("ZG", count=2, prepare=refuses))
    assert [(o.item, o.passed, o.failure_code, o.detail, o.metrics) for o in outcomes] == [
        (f"gen_{i}", False, "W0", "world setup failed: POST /facts answered 400", {"planned": 1})
        for i in range(2)
    ]


def test_a_crash_while_preparing_fails_every_item_under_the_setup_code():
    def crashes(ctx, specs):
        return 1 / 0

    outcomes = _execute(fake_generated_suite("ZG", count=2, prepare=crashes))
    assert {(o.passed, o.failure_code) for o in outcomes} == {(False, "W0")}
    assert outcomes[0].detail.startswith("world setup failed: Traceback (most recent call last):")
    assert outcomes[0].detail.endswith("ZeroDivisionError: division by zero")


def test_inside_a_transaction_a_failed_prepare_is_rolled_back_and_a_good_one_kept(db):
    def good(ctx, specs):
        agent_create(name="kept-by-good-prepare")
        return {"prepared_by": ctx.item}

    def bad(ctx, specs):
        agent_create(name="dropped-by-bad-prepare")
        raise ItemFailure(FailureCode.W0, "no")

    assert all(o.passed for o in _execute(fake_generated_suite("ZG", prepare=good)))
    assert not any(o.passed for o in _execute(fake_generated_suite("ZH", prepare=bad)))
    assert list(Agent.objects.filter(name__contains="-prepare").values_list("name", flat=True)) == [
        "kept-by-good-prepare"
    ]
