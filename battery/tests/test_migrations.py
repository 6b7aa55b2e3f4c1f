import importlib

import pytest
from django.apps import apps

from battery.models import BatteryRun, ItemResult
from battery.taxonomy import FailureCode

remap = importlib.import_module("battery.migrations.0003_failure_codes_design_meanings")


def test_each_old_code_goes_to_the_code_of_its_meaning_today():
    assert {code: remap.code_remap(code) for code in FailureCode.values} == {
        "W0": "W0",
        "W1": "W1",
        "R0": "R2",  # exists but not found: not among the candidates
        "R1": "R3",  # a wrong or stale memory returned: outranked by a stale or irrelevant one
        "R2": "R3",  # ranked below noise: outranked
        "R3": "R3",  # returned what must not be: a stale or irrelevant memory
        "A0": "A0",
        "U0": "U0",
        "P0": "P0",
        "P1": "P1",
        "S0": "S1",  # not executed or failed: selected but not followed
        "S1": "S2",  # applied where it does not fit: negative transfer
        "S2": "S2",  # no old code was S2
        "I0": "I0",
    }
    assert remap.code_remap("") == ""
    assert set(remap.CODE_MAP.values()) <= set(FailureCode.values)


def test_the_misses_and_the_detail_of_an_item_are_remapped():
    metrics = {
        "planned": {"current": 3},
        "misses": [{"q": "current x", "code": "R1", "stale": True}, {"q": "as_of y", "code": "R0"}],
    }
    assert remap.misses_remap(metrics) == {
        "planned": {"current": 3},
        "misses": [{"q": "current x", "code": "R3", "stale": True}, {"q": "as_of y", "code": "R2"}],
    }
    assert remap.misses_remap({"misses": [{"q": "z", "code": "W0"}]}) is None
    assert remap.misses_remap({"planned": {}}) is None
    assert (
        remap.detail_remap("current x: expected 1, got 2 (and 2 more: R0, S1)")
        == "current x: expected 1, got 2 (and 2 more: R2, S2)"
    )
    assert remap.detail_remap("R0 in the text stays (as written)") == (
        "R0 in the text stays (as written)"
    )


@pytest.fixture
def run(db) -> BatteryRun:
    return BatteryRun.objects.create(seed=1, suites=["C"], target="in-process")


def _item(run, key: str, code: str, **fields) -> ItemResult:
    return ItemResult.objects.create(
        run=run, suite="C", item=key, title=key, passed=not code, failure_code=code,
        duration_ms=1, **fields,
    )  # fmt: skip


def test_the_migration_rewrites_stored_codes_once(run):
    for code in ("R0", "R1", "R2", "R3", "S0", "S1", "W0", ""):
        _item(run, f"plain_{code.lower() or 'passed'}", code)
    _item(
        run,
        "with_misses",
        "R1",
        metrics={"misses": [{"q": "a", "code": "R1"}, {"q": "b", "code": "R0"}], "stale": 1},
        detail="a: expected 1, got 2 (and 1 more: R0)",
    )

    remap.codes_remap(apps, None)

    codes = dict(ItemResult.objects.values_list("item", "failure_code"))
    # R0 became R2 and was not taken on to R3 with the old R2s: every code is mapped once.
    assert codes == {
        "plain_r0": "R2",
        "plain_r1": "R3",
        "plain_r2": "R3",
        "plain_r3": "R3",
        "plain_s0": "S1",
        "plain_s1": "S2",
        "plain_w0": "W0",
        "plain_passed": "",
        "with_misses": "R3",
    }
    item = ItemResult.objects.get(item="with_misses")
    assert item.metrics == {
        "misses": [{"q": "a", "code": "R3"}, {"q": "b", "code": "R2"}],
        "stale": 1,
    }
    assert item.detail == "a: expected 1, got 2 (and 1 more: R2)"


def test_the_taxonomy_has_design_section_9s_codes_and_one_for_negative_transfer():
    assert FailureCode.values == [
        "W0", "W1", "R0", "R1", "R2", "R3", "A0", "U0", "P0", "P1", "S0", "S1", "S2", "I0",
    ]  # fmt: skip
    assert FailureCode.R0.label.startswith("R0 retrieval: the need to look was not detected")
    assert FailureCode.S2.label == (
        "S2 skill: negative transfer, a skill applied where it does not fit"
    )
