"""Suite F: the draw is deterministic and covers what it claims, the suite
passes its gates against the real service, and a service that forgets
badly — leaves a copy, loses a neighbour — fails with the right code."""

from __future__ import annotations

import io
import random
from collections import Counter

import pytest
from django.core.management import call_command

from battery.models import BatteryRun
from battery.registry import suites_select
from battery.suites.forgetting import draw
from battery.tests.helpers import Faulty
from battery.transport import ApiResponse, InProcessTransport


def specs(seed: int = 3):
    return draw.generate(random.Random(f"{seed}:F:forgetting:generate"))


def test_the_draw_is_seeded_and_covers_every_mode_with_twins_sharing_a_name():
    first, again = specs(), specs()
    assert [s.data for s in first] == [s.data for s in again]
    assert Counter(s.metrics["mode"] for s in first) == dict.fromkeys(draw.MODES, 6)
    tokens = [
        t for s in first for who in ("person", "twin") for t in s.data[who]["tokens"].values()
    ]
    assert len(tokens) == len(set(tokens)) == 24 * 8
    for spec in first:
        person, twin = spec.data["person"]["name"].split(), spec.data["twin"]["name"].split()
        assert person != twin and (person[0] == twin[0] or person[1] == twin[1])
    assert 0 < sum(s.metrics["held_out"] for s in first) < len(first)


def test_suite_F_is_registered_with_weight_10_and_its_gates():
    suite = suites_select(codes=["F"])[0]
    assert (suite.weight, suite.gate) == (10, 1.0)
    assert [g.name for g in suite.metric_gates] == [
        "erasure_residue <= 0",
        "regenerated <= 0",
        "collateral_loss <= 0",
        "receipts_clean >= 1",
    ]


def battery(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", *args, stdout=out, no_color=True)
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_F_passes_its_gates_against_the_real_service(tmp_path):
    battery("run", "--suite", "F", "--seed", "5", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    failed = list(run.items.filter(passed=False).values_list("item", "failure_code", "detail")[:5])
    assert (run.status, run.suites) == ("passed", ["F"]), failed
    suite = run.suite_scores["F"]
    assert (suite["items"], suite["passed"], suite["gate_passed"]) == (24, 24, True)
    metrics = suite["metrics"]
    assert {k: metrics[k] for k in ("erasure_residue", "regenerated", "collateral_loss")} == {
        "erasure_residue": 0.0,
        "regenerated": 0.0,
        "collateral_loss": 0.0,
    }
    assert metrics["receipts_clean"] == 1.0
    assert metrics["current_fact_accuracy"] == 1.0
    assert metrics["erasure_residue_held_out"] == 0.0


class ShowsErasedEvents(Faulty):
    """A ledger listing that still shows an erased event's old payload: the
    residue the suite exists to find."""

    def __init__(self, inner):
        super().__init__(inner)
        self.kept: dict[str, str] = {}

    def request(self, method, path, *, body=None, headers=None):
        response = self.inner.request(method, path, body=body, headers=headers)
        if method == "POST" and path.endswith("/episodes") and response.status == 201:
            self.kept[response.body["raw_event_id"]] = response.text
        if method == "GET" and path.startswith("/api/v1/events?") and self.kept:
            extra = "\n".join(self.kept.values())
            return ApiResponse(
                response.status, response.body, response.headers, response.text + extra
            )
        return response


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_service_that_keeps_a_copy_fails_R3(monkeypatch, tmp_path):
    monkeypatch.setattr(draw, "ITEMS_PER_MODE", 1)
    monkeypatch.setattr(
        "battery.services.transport_open", lambda base_url: ShowsErasedEvents(InProcessTransport())
    )
    with pytest.raises(Exception):  # noqa: B017 - the command exits non-zero
        battery("run", "--suite", "F", "--report", str(tmp_path), "--seed", "9")
    run = BatteryRun.objects.get()
    assert run.status == "failed"
    codes = Counter(run.items.values_list("failure_code", flat=True))
    assert codes["R3"] >= 3
    assert run.suite_scores["F"]["metrics"]["erasure_residue"] > 0
