import io
import json
import logging
import re

import pytest
from django.core.management import CommandError, call_command

from battery import registry
from battery.models import BatteryRun, ItemResult
from battery.registry import MetricGate, SuiteSummary, registered
from battery.taxonomy import FailureCode
from piper.tenancy.models import Agent

from .helpers import fake_generated_suite, fake_suite

pytestmark = pytest.mark.slow  # these run the battery

L_ITEMS = ["append_read_back", "batch_atomic", "idempotent_retry", "tamper_detected", "isolation"]
L_TITLES = [
    "Append one event; read it back by id and in the list",
    "A batch is appended whole, or not at all",
    "A retried write with its Idempotency-Key writes once",
    "A payload altered behind the trigger is caught at its seq",
    "Another agent's key cannot see, count or reference this agent's events",
]


def battery(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", *args, stdout=out, no_color=True)
    return out.getvalue()


DESIGNED = ["A", "B", "C", "D", "E", "F", "G", "H"]  # besides L; registered, so "not selected"

CAPS_FAILED_CLOSED = [
    {
        "name": "cap 70: current_fact_accuracy, procedure_execution, handover_retention >= 0.6",
        "kind": "cap",
        "passed": False,
        "detail": "not reported: current_fact_accuracy, procedure_execution, handover_retention, "
        "so the cap applies (fail closed); total capped at 70",
        "fail_closed": True,
    },
    {
        "name": "cap 85: current_fact_accuracy, as_of_accuracy, cancelled_intention_suppression, "
        "negative_transfer_safety >= 0.8",
        "kind": "cap",
        "passed": False,
        "detail": "not reported: current_fact_accuracy, as_of_accuracy, "
        "cancelled_intention_suppression, negative_transfer_safety, so the cap applies "
        "(fail closed); total capped at 85",
        "fail_closed": True,
    },
]


def test_run_suite_L_alone_is_incomplete_exits_0_and_stores_the_run_and_its_items(db, tmp_path):
    output = battery("run", "--suite", "L", "--report", str(tmp_path), "--seed", "11")

    run = BatteryRun.objects.get()
    # L passed, but the total counts every designed suite: L carries no weight and the
    # others did not run, so the total is 0 and the run incomplete, never passed.
    assert (
        run.status,
        run.score,
        run.uncapped_score,
        run.score_of_run,
        run.suites,
        run.seed,
        run.target,
    ) == ("incomplete", 0.0, 0.0, 100.0, ["L"], 11, "in-process")
    assert run.missing_suites == {
        code: {
            "name": run.missing_suites[code]["name"],
            "weight": weight,
            "reason": "not_selected",
            "detail": "",
        }
        for code, weight in zip(DESIGNED, [15, 15, 20, 20, 20, 10, 5, 0], strict=True)
    }
    assert run.missing_suites["D"]["name"] == "Procedural memory"
    assert re.fullmatch(r"battery-[0-9a-f]{12}-1", run.agent_name)
    assert run.report_dir == str(tmp_path.resolve())
    assert run.error == ""
    assert run.finished_at > run.started_at
    assert run.suite_scores == {
        "L": {
            "name": "Ledger integrity",
            "weight": 0,
            "gate": 1.0,
            "items": 5,
            "passed": 5,
            "pass_rate": 1.0,
            "score": 100.0,
            "gate_passed": True,
            "metrics": {},
        },
    }
    assert run.gates == [
        {
            "name": "L pass rate >= 100%",
            "kind": "suite",
            "passed": True,
            "detail": "5/5 items passed (100.0%)",
            "fail_closed": False,
        },
        *CAPS_FAILED_CLOSED,
    ]
    items = list(
        ItemResult.objects.filter(run=run)
        .order_by("id")
        .values_list("suite", "item", "title", "passed", "failure_code", "detail")
    )
    assert items == [
        ("L", key, title, True, "", "") for key, title in zip(L_ITEMS, L_TITLES, strict=True)
    ]

    # The primary agent, the tamper item's and the isolation item's: all throwaway, all deactivated.
    prefix = run.agent_name[:-2]
    assert list(
        Agent.objects.filter(is_throwaway=True).order_by("name").values_list("name", "is_active")
    ) == [
        (f"{prefix}-1", False),
        (f"{prefix}-2", False),
        (f"{prefix}-3", False),
    ]

    for key in L_ITEMS:
        assert re.search(rf"^  L\.{key} +pass +[0-9.]+ ms$", output, re.MULTILINE), output
    assert (
        "L     Ledger integrity                  0      5       5   100.0  pass (>= 100%)" in output
    )
    assert (
        "D     Procedural memory                20      —       —     0.0  did not run "
        "(not selected): counts 0" in output
    )
    # Unmeasured because the suites that report their metrics did not run: not a failure.
    assert (
        "cap 70: current_fact_accuracy, procedure_execution, handover_retention >= 0.6: "
        "not measured (not reported: current_fact_accuracy" in output
    )
    assert "FAIL" not in output
    assert (
        "total 0.00 over every designed suite, 8 of which did not run and count 0 "
        "(A, B, C, D, E, F, G, H)\n"
        "score of the suites that ran (L): 100.00 (not the battery's total)\n"
        f"total 0.00   status incomplete   seed 11   target in-process   agent {run.agent_name}"
        in output
    )
    assert output.rstrip().endswith(f"report: {tmp_path.resolve()}/report.html")


def test_report_json_and_html_hold_the_run(db, tmp_path):
    battery("run", "--suite", "L", "--report", str(tmp_path), "--seed", "4")
    run = BatteryRun.objects.get()

    report = json.loads((tmp_path / "report.json").read_text())
    assert sorted(report) == [
        "agent",
        "duration_s",
        "error",
        "failure_codes",
        "finished_at",
        "gates",
        "id",
        "items",
        "metrics",
        "missing_suites",
        "score",
        "score_of_run",
        "seed",
        "started_at",
        "status",
        "suites",
        "target",
        "uncapped_score",
    ]
    assert (
        report["id"],
        report["status"],
        report["score"],
        report["score_of_run"],
        report["seed"],
        report["agent"],
    ) == (str(run.pk), "incomplete", 0.0, 100.0, 4, run.agent_name)
    assert report["missing_suites"] == run.missing_suites
    assert list(report["missing_suites"]) == DESIGNED
    assert report["suites"] == run.suite_scores
    assert report["gates"] == run.gates
    assert report["failure_codes"] == {}
    assert [(i["suite"], i["item"], i["passed"], i["failure_code"]) for i in report["items"]] == [
        ("L", key, True, "") for key in L_ITEMS
    ]
    batch = report["items"][1]["metrics"]
    assert sorted(batch) == ["batch_size", "invalid_field", "invalid_index", "refused_size"]

    html = (tmp_path / "report.html").read_text()
    for key, title in zip(L_ITEMS, L_TITLES, strict=True):
        assert f"<code>L.{key}</code>" in html
        assert title.replace("'", "&#x27;") in html
    assert "<svg" in html and "<style>" in html
    assert "The total counts every designed suite: 8 did not run (A not selected, " in html
    assert "Score of the suites that ran: 100.00 (not the battery's total)." in html
    assert '<span class="badge notrun">did not run</span>' in html
    # Self-contained: nothing is fetched from anywhere.
    assert not re.search(r"""(src|href)=["']?(https?:)?//|<link|<script|@import""", html)


def test_the_same_seed_draws_the_same_items(db, tmp_path):
    battery("run", "--suite", "L", "--report", str(tmp_path / "a"), "--seed", "99")
    battery("run", "--suite", "L", "--report", str(tmp_path / "b"), "--seed", "99")
    first, second = (
        json.loads((tmp_path / name / "report.json").read_text())["items"] for name in ("a", "b")
    )
    assert [i["metrics"] for i in first] == [i["metrics"] for i in second]
    battery("run", "--suite", "L", "--report", str(tmp_path / "c"), "--seed", "100")
    third = json.loads((tmp_path / "c" / "report.json").read_text())["items"]
    assert [i["metrics"] for i in third] != [i["metrics"] for i in first]


def test_a_failing_gate_exits_non_zero_with_status_failed(db, tmp_path):
    failing = fake_suite("ZF", weight=5, results=[True, FailureCode.R1, True, True])
    with registered(failing), pytest.raises(CommandError) as caught:
        battery("run", "--suite", "ZF", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    # Only the gate that failed on what was measured: not the caps left unmeasured by
    # the suites that were not selected.
    assert str(caught.value) == f"battery run {run.pk} failed its gates: ZF pass rate >= 100%"
    assert caught.value.returncode == 1
    # Over the design (105 for A-G, 5 for ZF): 5 * 75 / 110.
    assert (run.status, run.score, run.score_of_run, run.suites) == (
        "failed",
        round(5 * 75 / 110, 2),
        75.0,
        ["ZF"],
    )
    assert list(
        run.items.order_by("id").values_list("item", "passed", "failure_code", "detail")
    ) == [
        ("item_0", True, "", ""),
        ("item_1", False, "R1", "item 1 failed on purpose"),
        ("item_2", True, "", ""),
        ("item_3", True, "", ""),
    ]
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["status"], report["failure_codes"]) == ("failed", {"R1": 1})
    assert "item 1 failed on purpose" in (tmp_path / "report.html").read_text()


def test_caps_over_reported_metrics_limit_the_stored_score(db, tmp_path):
    facts = fake_suite(
        "ZC", weight=20, summary=SuiteSummary(score=100, metrics={"current_fact_accuracy": 0.75})
    )
    skills = fake_suite(
        "ZD", weight=20, summary=SuiteSummary(score=90, metrics={"procedure_execution": 0.65})
    )
    with registered(facts, skills), pytest.raises(CommandError):
        battery("run", "--suite", "ZC,ZD", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    # Over the design, (20 * 100 + 20 * 90) / 145; the suites that ran, 95 capped at 85.
    assert (run.status, run.uncapped_score, run.score, run.score_of_run) == (
        "failed",
        round(3800 / 145, 2),
        round(3800 / 145, 2),
        85.0,
    )
    assert run.metrics == {"current_fact_accuracy": 0.75, "procedure_execution": 0.65}
    assert [(g["kind"], g["passed"], g["fail_closed"]) for g in run.gates] == [
        ("suite", True, False),
        ("suite", True, False),
        ("cap", False, True),
        ("cap", False, False),
    ]
    assert run.gates[3]["detail"] == (
        "current_fact_accuracy 0.75; below 0.8: current_fact_accuracy; not reported: "
        "as_of_accuracy, cancelled_intention_suppression, negative_transfer_safety, so the cap "
        "applies (fail closed); total capped at 85"
    )


def test_an_unknown_suite_is_refused_before_anything_is_stored(db):
    with pytest.raises(CommandError, match=r"^unknown suite Q9; available: "):
        battery("run", "--suite", "Q9")
    assert BatteryRun.objects.count() == 0


def test_an_unreachable_service_is_an_error_not_a_score(db, tmp_path):
    with pytest.raises(CommandError) as caught:
        battery(
            "run", "--suite", "L", "--base-url", "http://127.0.0.1:9", "--report", str(tmp_path)
        )
    run = BatteryRun.objects.get()
    assert str(caught.value) == f"battery run {run.pk} could not complete; see its error above"
    assert (run.status, run.score, run.target) == ("error", None, "http://127.0.0.1:9")
    assert run.error.startswith(
        "the service did not answer: GET http://127.0.0.1:9/api/v1/agent: ConnectError("
    )
    assert run.items.count() == 0
    assert Agent.objects.get(name=run.agent_name).is_active is False
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "error"


def test_list_shows_every_suite():
    with registered(fake_suite("ZL", weight=2, gate=0.5, results=[True, True])):
        output = battery("list")
    lines = output.splitlines()
    assert lines[0] == "suite  weight   gate  items  name"
    assert "L           0   100%      5  Ledger integrity" in lines
    assert "ZL          2    50%      2  Fake ZL" in lines


@pytest.mark.django_db(transaction=True)
def test_run_over_http_against_a_live_server(live_server, tmp_path):
    output = battery(
        "run", "--suite", "L", "--base-url", live_server.url, "--report", str(tmp_path)
    )
    run = BatteryRun.objects.get()
    assert (run.status, run.score_of_run, run.target) == ("incomplete", 100.0, live_server.url)
    assert list(run.items.values_list("passed", flat=True)) == [True] * 5
    assert f"target {live_server.url}" in output


def _outcomes(run: BatteryRun) -> tuple:
    items = sorted(run.items.values_list("suite", "item", "passed", "failure_code"))
    scores = {code: (s["score"], s["metrics"]) for code, s in run.suite_scores.items()}
    return run.status, run.score, run.score_of_run, items, scores


def test_a_run_through_the_sdk_scores_as_a_direct_one(db, tmp_path):
    battery("run", "--suite", "L,A", "--seed", "11", "--report", str(tmp_path / "direct"))
    direct = BatteryRun.objects.get()
    output = battery(
        "run", "--suite", "L,A", "--seed", "11", "--transport", "sdk",
        "--report", str(tmp_path / "sdk"),
    )  # fmt: skip
    sdk = BatteryRun.objects.exclude(pk=direct.pk).get()
    assert sdk.target == "sdk in-process" and "target sdk in-process" in output
    assert _outcomes(sdk) == _outcomes(direct)
    assert (direct.status, direct.score_of_run) == ("incomplete", 100.0)
    assert direct.items.count() > 5


def test_a_run_through_the_sdk_over_http(live_server, tmp_path):
    battery(
        "run", "--suite", "L", "--transport", "sdk", "--base-url", live_server.url,
        "--report", str(tmp_path),
    )  # fmt: skip
    run = BatteryRun.objects.get()
    assert (run.status, run.score_of_run, run.target) == (
        "incomplete",
        100.0,
        f"sdk {live_server.url}",
    )


def test_a_suite_that_crashes_outside_its_items_counts_0_and_the_run_exits_2(db, tmp_path):
    broken = fake_suite("ZE", weight=5, summary=SuiteSummary(score=101))
    with registered(broken), pytest.raises(CommandError) as caught:
        battery("run", "--suite", "ZE,L", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    assert str(caught.value) == f"battery run {run.pk} is incomplete: ZE crashed"
    assert caught.value.returncode == 2
    # The suites after it still ran; it counts 0 with its weight.
    assert (run.status, run.score, run.score_of_run, run.suites) == (
        "incomplete",
        0.0,
        100.0,
        ["L", "ZE"],
    )
    assert list(run.suite_scores) == ["L"]
    assert run.missing_suites["ZE"] == {
        "name": "Fake ZE",
        "weight": 5,
        "reason": "crashed",
        "detail": "ValueError: suite ZE summarised a score of 101; scores are 0-100",
    }
    assert run.error.startswith("suite ZE crashed:\nTraceback (most recent call last):")
    assert run.error.endswith("ValueError: suite ZE summarised a score of 101; scores are 0-100")
    assert run.items.filter(suite="ZE").count() == 1  # the item itself ran and was stored


def test_without_suite_a_designed_suite_not_registered_makes_the_run_exit_2(
    db, tmp_path, monkeypatch
):
    registry.discover()
    monkeypatch.setattr(registry, "_suites", {"L": registry._suites["L"]})
    with pytest.raises(CommandError) as caught:
        battery("run", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    assert (run.status, run.suites, caught.value.returncode) == ("incomplete", ["L"], 2)
    assert str(caught.value) == f"battery run {run.pk} is incomplete: " + ", ".join(
        f"{code} not registered" for code in DESIGNED
    )
    assert run.missing_suites["A"] == {
        "name": "suite A",
        "weight": 15,
        "reason": "not_registered",
        "detail": "",
    }


def test_a_report_that_cannot_be_written_makes_the_run_an_error(db, tmp_path):
    occupied = tmp_path / "a-file"
    occupied.write_text("not a directory")
    with pytest.raises(CommandError, match="could not complete"):
        battery("run", "--suite", "L", "--report", str(occupied))
    run = BatteryRun.objects.get()
    assert (run.status, run.score_of_run, run.report_dir) == ("error", 100.0, "")
    assert run.error.startswith("the report could not be written:\nTraceback")
    assert "FileExistsError" in run.error


def test_the_run_leaves_django_request_logging_as_it_found_it(db, tmp_path):
    logger = logging.getLogger("django.request")
    before = logger.level
    battery("run", "--suite", "L", "--report", str(tmp_path))
    assert logger.level == before


def test_list_counts_generated_items_and_shows_metric_gates():
    suite = fake_generated_suite("ZL", count=7, metric_gates=[MetricGate("recall", minimum=0.99)])
    with registered(suite):
        lines = battery("list").splitlines()
    index = lines.index("ZL          0   100%      7  Fake ZL")
    assert lines[index + 1 : index + 3] == ["      made by a test", "      gate: recall >= 0.99"]


def test_generated_items_are_stored_and_only_their_failures_printed(db, tmp_path):
    suite = fake_generated_suite(
        "ZG",
        count=4,
        weight=5,
        gate=0.5,
        failing=[2],
        metric_gates=[MetricGate("recall", minimum=0.99)],
        summary=SuiteSummary(score=75, metrics={"recall": 0.75}),
    )
    with registered(suite), pytest.raises(CommandError) as caught:
        battery("run", "--suite", "ZG", "--report", str(tmp_path), "--seed", "3")
    run = BatteryRun.objects.get()
    assert str(caught.value) == f"battery run {run.pk} failed its gates: ZG recall >= 0.99"
    assert caught.value.returncode == 1
    assert list(run.items.order_by("id").values_list("item", "passed", "failure_code")) == [
        ("gen_0", True, ""),
        ("gen_1", True, ""),
        ("gen_2", False, "R1"),
        ("gen_3", True, ""),
    ]
    assert [(g["name"], g["kind"], g["passed"], g["detail"]) for g in run.gates[:2]] == [
        ("ZG pass rate >= 50%", "suite", True, "3/4 items passed (75.0%)"),
        ("ZG recall >= 0.99", "metric", False, "recall 0.75"),
    ]
    assert run.suite_scores["ZG"]["gate_passed"] is False
    assert run.status == "failed"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["failure_codes"] == {"R1": 1}


def test_the_run_prints_a_generated_items_failure_but_not_its_passes(db, tmp_path):
    suite = fake_generated_suite("ZG", count=3, weight=5, gate=0.5, failing=[1])
    out = io.StringIO()
    with registered(suite):
        call_command(
            "battery", "run", "--suite", "ZG", "--report", str(tmp_path), stdout=out, no_color=True
        )
    output = out.getvalue()
    assert re.search(r"^  ZG\.gen_1 +FAIL R1 +[0-9.]+ ms$", output, re.MULTILINE), output
    assert "      generated item 1 failed on purpose" in output
    assert "ZG.gen_0" not in output and "ZG.gen_2" not in output
    assert (
        "ZG    Fake ZG                           5      3       2    66.7  pass (>= 50%)" in output
    )
