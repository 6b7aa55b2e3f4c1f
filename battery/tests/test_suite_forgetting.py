"""Suite F: the draws are deterministic and cover what they claim, the suite
passes its gates against the real service, and a service that forgets or
consolidates badly — leaves a copy, cites no evidence, hides the flag on
injected text — fails with the right code."""

from __future__ import annotations

import io
import json
import random
from collections import Counter

import pytest
from django.core.management import call_command

from battery.models import BatteryRun
from battery.registry import suites_select
from battery.suites.forgetting import consolidation_draw, draw, skill_draw
from battery.tests.helpers import Faulty
from battery.transport import ApiResponse, InProcessTransport
from piper.celery import app as celery_app


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


def test_the_consolidation_draw_is_seeded_and_keeps_its_vocabulary_apart():
    rng = lambda: random.Random("3:F:consolidation:generate")  # noqa: E731
    first, again = consolidation_draw.generate(rng()), consolidation_draw.generate(rng())
    assert [s.data for s in first] == [s.data for s in again]
    counts = Counter(s.metrics["part"] for s in first)
    assert counts == {"stating": 28, "distractor": 12, "duplicates": 6, "poison": 20}
    # Every part has documented and held-out phrasings, except F4 (no phrasing).
    for part in ("stating", "distractor", "poison"):
        held = [s.metrics["held_out"] for s in first if s.metrics["part"] == part]
        assert 0 < sum(held) < len(held), part
    # No subject is shared between items, so a candidate's item is its subject's.
    subjects = [s.data["truth"][0] if "truth" in s.data else s.data.get("subject") for s in first]
    subjects = [x.lower() for x in subjects if x]
    assert len(subjects) == len(set(subjects))
    # The battery's attribute words are not the extractor's aliases.
    from consolidation import extraction

    for attribute, _ in (
        consolidation_draw.PERSON_ATTRIBUTES + consolidation_draw.SERVICE_ATTRIBUTES
    ):
        assert attribute.replace(" ", "_").replace("-", "_") not in extraction._PREDICATE_ALIASES


def test_the_procedure_draw_is_seeded_and_every_item_is_its_own_procedure():
    from consolidation.skill_mining import shape_of
    from skills import tools

    rng = lambda: random.Random("3:F:consolidation:generate")  # noqa: E731
    first, again = skill_draw.generate(rng()), skill_draw.generate(rng())
    assert [s.data for s in first] == [s.data for s in again]
    ways = Counter(s.metrics["way"] for s in first)
    assert ways == {"learnable": skill_draw.LEARNABLE, **dict.fromkeys(skill_draw.REFUSED_WAYS, 1)}
    learnable = [s for s in first if s.metrics["way"] == "learnable"]
    assert 0 < sum(s.metrics["held_out"] for s in learnable) < len(learnable)
    # No two items share a procedure: each is learned, or refused, on its own traces.
    shapes = [shape_of(**_trace_parts(s.data["traces"][0])).key for s in first]
    assert len(shapes) == len(set(shapes))
    for spec in first:
        for trace in spec.data["traces"]:
            # Every step's result is what the service's own tool gives.
            for step in trace["steps"]:
                assert tools.TOOLS[step["tool"]].run(None, step["args"]) == step["result"]
            assert trace["output"] == trace["steps"][-1]["result"]


def _trace_parts(trace: dict) -> dict:
    return {"inputs": trace["inputs"], "steps": trace["steps"], "output": trace["output"]}


def test_suite_F_is_registered_with_weight_10_and_its_gates():
    suite = suites_select(codes=["F"])[0]
    assert (suite.weight, suite.gate) == (10, 0.75)
    assert [g.name for g in suite.metric_gates] == [
        "erasure_residue <= 0",
        "regenerated <= 0",
        "collateral_loss <= 0",
        "receipts_clean >= 1",
        "consolidation_precision >= 0.95",
        "consolidation_recall >= 0.8",
        "distractors_promoted <= 0",
        "canonical_found >= 1",
        "duplicates_shown <= 0",
        "look_alikes_merged <= 0",
        "poisoned_promoted <= 0",
        "poisoned_current <= 0",
        "skills_learned >= 0.95",
        "skills_misproposed <= 0",
    ]


SMALL = {"stating": 2, "distractor": 1, "duplicates": 1, "injection": 1, "poison": 2}


def battery(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", *args, stdout=out, no_color=True)
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_F_passes_its_gates_against_the_real_service(tmp_path, monkeypatch):
    # Consolidation runs in a worker: here, in this process, as each request commits.
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    battery("run", "--suite", "F", "--seed", "5", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    failed = list(run.items.filter(passed=False).values_list("item", "failure_code", "detail"))
    suite = run.suite_scores["F"]
    print(suite["metrics"], *failed, sep="\n")  # the held-out figures, for the reader
    assert (run.status, run.suites) == ("incomplete", ["F"]), failed
    assert (suite["items"], suite["gate_passed"]) == (105, True)
    metrics = suite["metrics"]
    # F1, F2: every erasure complete, nothing back, nothing else lost.
    assert {k: metrics[k] for k in ("erasure_residue", "regenerated", "collateral_loss")} == {
        "erasure_residue": 0.0,
        "regenerated": 0.0,
        "collateral_loss": 0.0,
    }
    assert metrics["receipts_clean"] == 1.0
    assert metrics["erasure_residue_held_out"] == 0.0
    # F3-F5 on the documented phrasings: everything stated found with its evidence.
    for name in ("consolidation_precision", "consolidation_recall", "evidence_linked"):
        assert metrics[name] == 1.0, name
    assert metrics["sources_counted"] == 1.0
    assert metrics["duplicates_collapsed"] == metrics["canonical_found"] == 1.0
    assert metrics["instruction_flagged"] == 1.0
    # F6: every verified procedure learned and replayed, nothing from the rest.
    assert (metrics["skills_learned"], metrics["skills_replayed"]) == (1.0, 1.0)
    assert metrics["skills_learned_held_out"] == 1.0
    assert metrics["skills_misproposed"] == metrics["skills_misproposed_held_out"] == 0.0
    # Held out, reported: only items whose phrasing no rule reads are missed.
    assert "consolidation_recall_held_out" in metrics
    assert metrics["poisoned_promoted_held_out"] <= 1
    assert not [f for f in failed if not f[0].startswith(("f3_state_", "f5_inject_"))]


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
    monkeypatch.setattr(consolidation_draw, "COUNTS", SMALL)
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    monkeypatch.setattr(
        "battery.services.transport_open",
        lambda base_url, via=None: ShowsErasedEvents(InProcessTransport()),
    )
    with pytest.raises(Exception):  # noqa: B017 - the command exits non-zero
        battery("run", "--suite", "F", "--report", str(tmp_path), "--seed", "9")
    run = BatteryRun.objects.get()
    assert run.status == "failed"
    codes = Counter(run.items.values_list("failure_code", flat=True))
    assert codes["R3"] >= 3
    assert run.suite_scores["F"]["metrics"]["erasure_residue"] > 0


class CitesNoEvidence(Faulty):
    """Candidates listed without their evidence, and injected text shown unflagged:
    what the suite's F3 and F5 checks must catch."""

    def request(self, method, path, *, body=None, headers=None):
        response = self.inner.request(method, path, body=body, headers=headers)
        if method != "GET" or response.status != 200 or not isinstance(response.body, dict):
            return response
        if path.startswith("/api/v1/consolidation/candidates"):
            results = [{**row, "evidence": []} for row in response.body.get("results", [])]
            body = {**response.body, "results": results}
        elif path.startswith("/api/v1/episodes/") and "instruction_like" in response.body:
            body = {**response.body, "instruction_like": False}
        else:
            return response
        return ApiResponse(response.status, body, response.headers, json.dumps(body))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_service_whose_candidates_cite_nothing_fails_W1(monkeypatch, tmp_path):
    monkeypatch.setattr(draw, "ITEMS_PER_MODE", 1)
    monkeypatch.setattr(consolidation_draw, "COUNTS", SMALL)
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    monkeypatch.setattr(
        "battery.services.transport_open",
        lambda base_url, via=None: CitesNoEvidence(InProcessTransport()),
    )
    with pytest.raises(Exception):  # noqa: B017 - the command exits non-zero
        battery("run", "--suite", "F", "--report", str(tmp_path), "--seed", "9")
    run = BatteryRun.objects.get()
    failed = dict(run.items.filter(passed=False).values_list("item", "failure_code"))
    assert {key: code for key, code in failed.items() if key.startswith("f3_state_")} == {
        "f3_state_00": "W1",
        "f3_state_01": "W1",
    }
    assert failed["f5_inject_00"] == "W0"  # stored without its instruction_like flag
    metrics = run.suite_scores["F"]["metrics"]
    assert metrics["consolidation_recall"] == 0.0
    assert metrics["instruction_flagged"] == 0.0


class VerifiesEverything(Faulty):
    """A service that takes every trace as a verified success: what F6's refused
    items exist to catch (an unverified or failed procedure proposed as a skill)."""

    def request(self, method, path, *, body=None, headers=None):
        if method == "POST" and path == "/api/v1/skills/traces" and isinstance(body, dict):
            body = {
                **body,
                "succeeded": True,
                "verified": True,
                "verification": {"by": "nobody"},
            }
        return self.inner.request(method, path, body=body, headers=headers)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_service_that_learns_from_unverified_traces_fails_W1(monkeypatch, tmp_path):
    monkeypatch.setattr(draw, "ITEMS_PER_MODE", 1)
    monkeypatch.setattr(consolidation_draw, "COUNTS", SMALL)
    monkeypatch.setattr(skill_draw, "LEARNABLE", 1)
    monkeypatch.setattr(skill_draw, "REFUSED_WAYS", ("unverified", "failed"))
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    monkeypatch.setattr(
        "battery.services.transport_open",
        lambda base_url, via=None: VerifiesEverything(InProcessTransport()),
    )
    with pytest.raises(Exception):  # noqa: B017 - the command exits non-zero
        battery("run", "--suite", "F", "--report", str(tmp_path), "--seed", "9")
    run = BatteryRun.objects.get()
    failed = dict(run.items.filter(passed=False).values_list("item", "failure_code"))
    assert {key: code for key, code in failed.items() if key.startswith("f6_")} == {
        "f6_unverified_01": "W1",
        "f6_failed_02": "W1",
    }
    metrics = run.suite_scores["F"]["metrics"]
    # One item of each phrasing: one counted in the gated figure, one held out.
    assert (metrics["skills_misproposed"], metrics["skills_misproposed_held_out"]) == (1.0, 1.0)
    assert metrics["skills_learned"] == 1.0
