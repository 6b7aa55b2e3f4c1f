import dataclasses

import pytest

from battery import registry
from battery.registry import (
    DesignedSuite,
    ItemOutcome,
    MetricGate,
    SuiteSummary,
    designed_suites,
    pass_rate,
    registered,
)
from battery.scoring import (
    CAPS,
    CRASHED,
    NOT_RUN,
    NOT_SELECTED,
    Gate,
    MissingSuite,
    Scorecard,
    SuiteResult,
    designed_total,
    score_run,
    suite_result,
    suites_missing,
    weighted_total,
)

from .helpers import fake_suite


def _outcome(passed: bool) -> ItemOutcome:
    return ItemOutcome(
        suite="ZS",
        item="i",
        title="t",
        passed=passed,
        failure_code="" if passed else "W0",
        detail="",
        metrics={},
        duration_ms=1.0,
    )


def _result(code, *, weight, score, items=4, passed=4, gate=1.0, metrics=None) -> SuiteResult:
    return SuiteResult(
        code=code,
        name=code,
        weight=weight,
        gate=gate,
        items=items,
        passed=passed,
        score=score,
        metrics=metrics or {},
    )


def _designed(*suites: tuple[str, float]) -> list[DesignedSuite]:
    return [DesignedSuite(code=c, name=c, weight=w, registered=True) for c, w in suites]


def _complete(results: list[SuiteResult]) -> Scorecard:
    """The results as a complete run: the design is the suites that ran."""
    return score_run(results, designed=_designed(*((r.code, r.weight) for r in results)))


ALL_CAP_METRICS = {
    "current_fact_accuracy": 1.0,
    "procedure_execution": 1.0,
    "handover_retention": 1.0,
    "as_of_accuracy": 1.0,
    "cancelled_intention_suppression": 1.0,
    "negative_transfer_safety": 1.0,
}
CAP_70 = "cap 70: current_fact_accuracy, procedure_execution, handover_retention >= 0.6"
CAP_85 = (
    "cap 85: current_fact_accuracy, as_of_accuracy, cancelled_intention_suppression, "
    "negative_transfer_safety >= 0.8"
)


def test_default_suite_score_is_the_pass_rate_times_100():
    suite = fake_suite("ZS", weight=5, gate=0.75)
    result = suite_result(suite=suite, outcomes=[_outcome(True)] * 3 + [_outcome(False)])
    assert result == SuiteResult(
        code="ZS", name="Fake ZS", weight=5, gate=0.75, items=4, passed=3, score=75.0, metrics={}
    )
    assert (result.pass_rate, result.gate_passed) == (0.75, True)
    assert pass_rate([]) == 0.0


def test_a_suite_may_summarise_itself():
    suite = fake_suite("ZS", summary=SuiteSummary(score=42.5, metrics={"as_of_accuracy": 0.5}))
    result = suite_result(suite=suite, outcomes=[_outcome(True)])
    assert (result.score, result.metrics, result.pass_rate) == (42.5, {"as_of_accuracy": 0.5}, 1.0)


def test_a_summary_outside_0_100_is_refused():
    suite = fake_suite("ZS", summary=SuiteSummary(score=101))
    with pytest.raises(ValueError, match="suite ZS summarised a score of 101; scores are 0-100"):
        suite_result(suite=suite, outcomes=[_outcome(True)])


def test_suite_gate_needs_the_minimum_pass_rate_and_at_least_one_item():
    assert _result("X", weight=1, score=0, items=4, passed=3, gate=0.75).gate_passed is True
    assert _result("X", weight=1, score=0, items=4, passed=2, gate=0.75).gate_passed is False
    assert _result("X", weight=1, score=0, items=0, passed=0, gate=0.0).gate_passed is False


def test_total_is_weighted_over_suites_with_weight_and_ignores_weight_zero():
    results = [
        _result("A", weight=15, score=80),
        _result("C", weight=20, score=45),
        _result("L", weight=0, score=0, passed=0),
    ]
    # (15 * 80 + 20 * 45) / 35 = 2100 / 35
    assert weighted_total(results) == 60.0
    assert designed_total(results, []) == 60.0


def test_total_of_weight_zero_suites_alone_is_their_combined_pass_rate():
    results = [
        _result("L", weight=0, score=100, items=5, passed=5),
        _result("Z", weight=0, score=0, items=3, passed=1),
    ]
    assert weighted_total(results) == 75.0  # 6 of 8 items
    assert weighted_total([]) == 0.0


def test_a_suite_that_did_not_run_counts_0_and_makes_the_run_incomplete():
    designed = _designed(("A", 15), ("C", 20), ("D", 20), ("L", 0))
    ran = [
        _result("A", weight=15, score=100, metrics=ALL_CAP_METRICS),
        _result("C", weight=20, score=100),
        _result("L", weight=0, score=100),
    ]
    card = score_run(ran, designed=designed)
    # D (20) did not run: (15 * 100 + 20 * 100 + 20 * 0) / 55, not 100.
    assert card.uncapped_total == card.total == 3500 / 55
    assert card.total_of_run == 100.0  # what the suites that ran scored, labelled as such
    assert card.missing == [MissingSuite(code="D", name="D", weight=20, reason=NOT_RUN)]
    assert (card.complete, card.failed, card.passed, card.status) == (
        False,
        False,
        False,
        "incomplete",
    )
    assert all(gate.passed for gate in card.gates)  # no gate failed: incomplete, never passed


def test_a_missing_weight_zero_suite_moves_no_total_but_the_run_is_incomplete():
    card = score_run(
        [_result("A", weight=15, score=90, metrics=ALL_CAP_METRICS)],
        designed=_designed(("A", 15), ("L", 0)),
    )
    assert (card.total, card.total_of_run, card.status) == (90.0, 90.0, "incomplete")
    assert [m.code for m in card.missing] == ["L"]


def test_nothing_ran_scores_0_over_the_design():
    card = score_run([], designed=_designed(("A", 15), ("L", 0)))
    assert (card.total, card.total_of_run, card.status) == (0.0, 0.0, "incomplete")
    assert [m.code for m in card.missing] == ["A", "L"]


def test_missing_suites_keep_the_reason_given_and_a_result_is_never_missing():
    results = [_result("A", weight=15, score=100)]
    absent = [
        MissingSuite(code="B", name="Episodic", weight=15, reason=NOT_SELECTED),
        MissingSuite(code="ZX", name="Fake", weight=5, reason=CRASHED, detail="ValueError: no"),
        MissingSuite(code="A", name="A", weight=15, reason=CRASHED),  # it has a result
    ]
    designed = _designed(("A", 15), ("B", 15), ("C", 20))
    assert suites_missing(results, designed=designed, absent=absent) == [
        MissingSuite(code="B", name="Episodic", weight=15, reason=NOT_SELECTED),
        MissingSuite(code="C", name="C", weight=20, reason=NOT_RUN),
        MissingSuite(code="ZX", name="Fake", weight=5, reason=CRASHED, detail="ValueError: no"),
    ]
    card = score_run(results, designed=designed, absent=absent)
    # A crashed suite outside the design still counts 0 with its weight.
    assert card.uncapped_total == 1500 / 55


def test_the_design_is_every_design_suite_registered_or_not_and_every_registered_one():
    designed = {suite.code: suite for suite in designed_suites()}
    assert {"A", "B", "C", "D", "E", "F", "G", "L"} <= set(designed)
    assert designed["L"] == DesignedSuite(
        code="L", name="Ledger integrity", weight=0, registered=True
    )
    with registered(fake_suite("ZQ", weight=3)):
        assert DesignedSuite(code="ZQ", name="Fake ZQ", weight=3, registered=True) in (
            designed_suites()
        )


def test_a_design_suite_no_module_registers_is_still_designed(monkeypatch):
    monkeypatch.setitem(registry.DESIGN_WEIGHTS, "Q", 7)
    assert DesignedSuite(code="Q", name="suite Q", weight=7, registered=False) in (
        designed_suites()
    )


def test_caps_fail_closed_when_no_suite_reports_their_metrics():
    card = _complete([_result("A", weight=15, score=90), _result("L", weight=0, score=100)])
    assert (card.total, card.uncapped_total, card.total_of_run, card.metrics) == (
        70,
        90.0,
        90.0,
        {},
    )
    assert card.gates == [
        Gate(
            name="A pass rate >= 100%",
            kind="suite",
            passed=True,
            detail="4/4 items passed (100.0%)",
        ),
        Gate(
            name="L pass rate >= 100%",
            kind="suite",
            passed=True,
            detail="4/4 items passed (100.0%)",
        ),
        Gate(
            name=CAP_70,
            kind="cap",
            passed=False,
            detail="not reported: current_fact_accuracy, procedure_execution, handover_retention, "
            "so the cap applies (fail closed); total capped at 70",
            fail_closed=True,
        ),
        Gate(
            name=CAP_85,
            kind="cap",
            passed=False,
            detail="not reported: current_fact_accuracy, as_of_accuracy, "
            "cancelled_intention_suppression, negative_transfer_safety, so the cap applies "
            "(fail closed); total capped at 85",
            fail_closed=True,
        ),
    ]
    # Every designed suite ran, yet a cap could not be checked: that is a failure.
    assert (card.complete, card.failed, card.status) == (True, True, "failed")


def test_a_cap_failing_closed_in_an_incomplete_run_leaves_it_incomplete():
    card = score_run([_result("A", weight=15, score=100)], designed=_designed(("A", 15), ("C", 20)))
    assert [(g.kind, g.passed, g.fail_closed) for g in card.gates] == [
        ("suite", True, False),
        ("cap", False, True),
        ("cap", False, True),
    ]
    assert (card.status, card.total, card.total_of_run) == ("incomplete", 1500 / 35, 100.0)


def test_the_70_cap_applies_when_a_first_tier_metric_is_below_60_percent():
    card = _complete(
        [
            _result("C", weight=20, score=95, metrics={"current_fact_accuracy": 0.59}),
            _result("D", weight=20, score=85, metrics={"procedure_execution": 0.9}),
        ]
    )
    assert (card.uncapped_total, card.total, card.total_of_run, card.passed) == (
        90.0,
        70,
        70,
        False,
    )
    assert card.gates[2:] == [
        Gate(
            name=CAP_70,
            kind="cap",
            passed=False,
            detail="current_fact_accuracy 0.59; procedure_execution 0.9; below 0.6: "
            "current_fact_accuracy; not reported: handover_retention, so the cap applies "
            "(fail closed); total capped at 70",
        ),
        Gate(
            name=CAP_85,
            kind="cap",
            passed=False,
            detail="current_fact_accuracy 0.59; below 0.8: current_fact_accuracy; not reported: "
            "as_of_accuracy, cancelled_intention_suppression, negative_transfer_safety, so the "
            "cap applies (fail closed); total capped at 85",
        ),
    ]


def test_the_85_cap_alone_when_second_tier_metrics_sit_between_60_and_80_percent():
    card = _complete(
        [
            _result(
                "C",
                weight=20,
                score=100,
                metrics={"current_fact_accuracy": 0.95, "as_of_accuracy": 0.6},
            ),
            _result("E", weight=20, score=90, metrics={"cancelled_intention_suppression": 0.8}),
            _result("A", weight=15, score=100, metrics={"handover_retention": 0.6}),
            _result(
                "D",
                weight=20,
                score=100,
                metrics={"procedure_execution": 1.0, "negative_transfer_safety": 1.0},
            ),
        ]
    )
    # (20 * 100 + 20 * 90 + 15 * 100 + 20 * 100) / 75 = 7300 / 75
    assert card.uncapped_total == 7300 / 75
    assert card.total == card.total_of_run == 85
    assert [(g.kind, g.passed) for g in card.gates] == [
        ("suite", True),
        ("suite", True),
        ("suite", True),
        ("suite", True),
        ("cap", True),
        ("cap", False),
    ]
    assert card.gates[4].detail == (
        "current_fact_accuracy 0.95; procedure_execution 1; handover_retention 0.6"
    )
    assert card.gates[5].detail == (
        "current_fact_accuracy 0.95; as_of_accuracy 0.6; cancelled_intention_suppression 0.8; "
        "negative_transfer_safety 1; below 0.8: as_of_accuracy; total capped at 85"
    )


def test_a_cap_never_raises_a_lower_total():
    card = _complete([_result("F", weight=5, score=40, metrics={"negative_transfer_safety": 0.1})])
    assert (card.uncapped_total, card.total, card.total_of_run, card.passed) == (
        40.0,
        40.0,
        40.0,
        False,
    )


def test_exactly_on_the_threshold_passes():
    metrics = {**ALL_CAP_METRICS, "current_fact_accuracy": 0.8, "procedure_execution": 0.6}
    card = _complete([_result("C", weight=20, score=100, metrics=metrics)])
    assert (card.total, card.passed, card.status) == (100.0, True, "passed")


def test_when_two_suites_report_one_metric_the_lower_counts():
    card = _complete(
        [
            _result(
                "C", weight=20, score=100, metrics={**ALL_CAP_METRICS, "current_fact_accuracy": 0.9}
            ),
            _result("G", weight=5, score=100, metrics={"current_fact_accuracy": 0.7}),
        ]
    )
    assert card.metrics == {**ALL_CAP_METRICS, "current_fact_accuracy": 0.7}
    assert card.total == 85


def test_a_failed_suite_gate_fails_the_run_without_capping():
    card = _complete(
        [_result("B", weight=15, score=50, items=4, passed=2, gate=0.75, metrics=ALL_CAP_METRICS)]
    )
    assert (card.total, card.passed, card.status) == (50.0, False, "failed")
    assert card.gates[0] == Gate(
        name="B pass rate >= 75%", kind="suite", passed=False, detail="2/4 items passed (50.0%)"
    )
    assert [g.passed for g in card.gates[1:]] == [True, True]


def test_a_failed_gate_fails_an_incomplete_run_too():
    card = score_run(
        [_result("B", weight=15, score=50, items=4, passed=2, gate=0.75)],
        designed=_designed(("B", 15), ("C", 20)),
    )
    assert (card.complete, card.status) == (False, "failed")


def test_the_caps_are_the_ones_design_section_9_names():
    assert [(cap.ceiling, cap.threshold, cap.metrics) for cap in CAPS] == [
        (70, 0.6, ("current_fact_accuracy", "procedure_execution", "handover_retention")),
        (
            85,
            0.8,
            (
                "current_fact_accuracy",
                "as_of_accuracy",
                "cancelled_intention_suppression",
                "negative_transfer_safety",
            ),
        ),
    ]


GATES = (MetricGate("recall", minimum=0.99), MetricGate("stale_rate", maximum=0.005))


def test_a_suite_result_carries_its_suites_metric_gates():
    suite = fake_suite(
        "ZS",
        weight=5,
        gate=0.5,
        summary=SuiteSummary(score=90, metrics={"recall": 0.99, "stale_rate": 0.0}),
    )
    suite.metric_gates = GATES
    result = suite_result(suite=suite, outcomes=[_outcome(True)])
    assert result.metric_gates == GATES
    assert (result.pass_rate_held, result.gate_passed) == (True, True)


@pytest.mark.parametrize(
    ("metrics", "passed", "details"),
    [
        ({"recall": 0.99, "stale_rate": 0.005}, [True, True], ["recall 0.99", "stale_rate 0.005"]),
        ({"recall": 0.9899, "stale_rate": 0.0}, [False, True], ["recall 0.9899", "stale_rate 0"]),
        ({"recall": 1.0, "stale_rate": 0.0051}, [True, False], ["recall 1", "stale_rate 0.0051"]),
        ({"stale_rate": 0.0}, [False, True], ["not reported", "stale_rate 0"]),
    ],
)
def test_metric_gates_are_gates_of_the_run(metrics, passed, details):
    result = dataclasses.replace(
        _result("ZS", weight=5, score=100, metrics={**ALL_CAP_METRICS, **metrics}),
        metric_gates=GATES,
    )
    card = _complete([result])
    assert card.gates[:3] == [
        Gate(
            name="ZS pass rate >= 100%",
            kind="suite",
            passed=True,
            detail="4/4 items passed (100.0%)",
        ),
        Gate(name="ZS recall >= 0.99", kind="metric", passed=passed[0], detail=details[0]),
        Gate(name="ZS stale_rate <= 0.005", kind="metric", passed=passed[1], detail=details[1]),
    ]
    assert card.passed is result.gate_passed is all(passed)
    assert card.total == 100.0  # a metric gate fails the run; it does not cap the score
