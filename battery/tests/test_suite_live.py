"""Suite H: live carry-over from real agents' telemetry (battery.suites.live_carry_over)."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from battery.models import BatteryRun
from battery.tests.helpers import live_use

pytestmark = pytest.mark.django_db(transaction=True)


def run_h(tmp_path, *, exit_code: int = 0) -> BatteryRun:
    """`battery run --suite H`; exit 2 when H had nothing to measure, 1 when a gate failed."""
    try:
        call_command(
            "battery", "run", "--suite", "H", "--report", str(tmp_path), stdout=io.StringIO()
        )
        code = 0
    except CommandError as exc:
        code = exc.returncode
    assert code == exit_code
    return BatteryRun.objects.latest("started_at")


def test_with_no_live_use_there_is_nothing_to_measure_and_the_run_is_incomplete(tmp_path):
    run = run_h(tmp_path, exit_code=2)
    assert run.status == "incomplete"
    assert run.missing_suites["H"]["reason"] == "nothing_to_measure"
    assert "no agent but the battery's used memory" in run.missing_suites["H"]["detail"]
    assert not run.items.filter(suite="H").exists()


def test_handovers_without_open_items_are_nothing_to_judge(tmp_path):
    live_use(done=0)
    run = run_h(tmp_path, exit_code=2)
    assert run.missing_suites["H"]["reason"] == "nothing_to_measure"
    assert "no carry-over to judge" in run.missing_suites["H"]["detail"]


def test_open_items_shown_and_done_pass(tmp_path):
    live_use("worker-1", done=3)
    live_use("worker-2", done=2)
    run = run_h(tmp_path)
    assert "H" not in run.missing_suites
    items = dict(run.items.filter(suite="H").values_list("item", "passed"))
    assert items == {"open_items_surfaced": True, "open_items_executed": True}
    h = run.suite_scores["H"]
    assert h["metrics"]["open_item_survival_rate"] == 1.0
    assert h["metrics"]["open_item_execution_rate"] == 1.0
    executed = run.items.get(item="open_items_executed").metrics
    assert executed["agents"] == {"worker-1": [3, 3], "worker-2": [2, 2]}
    gates = {g["name"]: g["passed"] for g in run.gates if g["name"].startswith("H ")}
    assert gates == {
        "H pass rate >= 100%": True,
        "H open_item_survival_rate >= 0.9": True,
        "H open_item_execution_rate >= 0.9": True,
    }


def test_items_left_overdue_past_the_grace_fail_the_execution_gate(tmp_path, settings):
    settings.PIPER_LIVE_GRACE_SECONDS = 0  # due is overdue at once
    live_use("slacker", done=1, left_overdue=2)
    run = run_h(tmp_path, exit_code=1)
    assert run.status == "failed"
    executed = run.items.get(item="open_items_executed")
    assert (executed.passed, executed.failure_code) == (False, "P0")
    assert "1/3 (33%), below 90%; lowest: slacker 1/3" in executed.detail
    assert run.items.get(item="open_items_surfaced").passed is True
