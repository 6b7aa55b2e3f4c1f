"""A stored run as report.json and a self-contained report.html (inline CSS and SVG).

Both are built from the stored rows, so a report always shows what the
database holds, and can be rebuilt for any past run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.template.loader import render_to_string

from piper.admin_display import bar_chart

from .models import BatteryRun
from .scoring import MISSING_REASONS
from .selectors import run_failure_counts, run_items
from .taxonomy import FailureCode


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def report_data(*, run: BatteryRun) -> dict[str, Any]:
    run.refresh_from_db()
    duration = (run.finished_at - run.started_at).total_seconds() if run.finished_at else None
    return {
        "id": str(run.pk),
        "status": run.status,
        # The battery's total, over every designed suite (one that did not run counts 0).
        "score": run.score,
        "uncapped_score": run.uncapped_score,
        # Over the suites that ran only: not the battery's total when the run is incomplete.
        "score_of_run": run.score_of_run,
        "missing_suites": {code: run.missing_suites[code] for code in sorted(run.missing_suites)},
        "seed": run.seed,
        "target": run.target,
        "agent": run.agent_name,
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "duration_s": round(duration, 3) if duration is not None else None,
        "error": run.error,
        "suites": {code: run.suite_scores[code] for code in sorted(run.suite_scores)},
        "gates": run.gates,
        "metrics": run.metrics,
        "failure_codes": run_failure_counts(run=run),
        "items": [
            {
                "suite": item.suite,
                "item": item.item,
                "title": item.title,
                "passed": item.passed,
                "failure_code": item.failure_code,
                "detail": item.detail,
                "metrics": item.metrics,
                "duration_ms": item.duration_ms,
            }
            for item in run_items(run=run)
        ],
    }


def report_html(*, data: dict[str, Any]) -> str:
    suites = [{"code": code, "ran": True, **suite} for code, suite in data["suites"].items()]
    missing = [
        {
            "code": code,
            "ran": False,
            "reason_text": MISSING_REASONS.get(suite["reason"], suite["reason"]),
            **suite,
        }
        for code, suite in data.get("missing_suites", {}).items()
    ]
    score_chart = bar_chart(
        [
            {
                "label": f"{s['code']} {s['name']}",
                "value": s["score"] if s["ran"] else 0,
                "text": f"{s['score']:.1f}" if s["ran"] else f"0 (did not run: {s['reason_text']})",
                "css": "pass" if s["ran"] and s["gate_passed"] else "fail",
            }
            for s in sorted(suites + missing, key=lambda s: s["code"])
        ],
        maximum=100,
    )
    failure_chart = bar_chart(
        [
            {"label": code, "value": count, "text": str(count), "css": "fail"}
            for code, count in data["failure_codes"].items()
        ],
        maximum=max(data["failure_codes"].values(), default=0),
    )
    rows = [
        {
            **item,
            "metrics_json": json.dumps(item["metrics"], sort_keys=True) if item["metrics"] else "",
        }
        for item in data["items"]
    ]
    for suite in suites:
        suite["rows"] = [row for row in rows if row["suite"] == suite["code"]]
    return render_to_string(
        "battery/report.html",
        {
            "run": data,
            "suites": suites,
            "missing_suites": missing,
            "score_chart": score_chart,
            "failure_chart": failure_chart,
            "failure_rows": [
                {"code": code, "count": count, "label": FailureCode(code).label}
                for code, count in data["failure_codes"].items()
            ],
        },
    )


def report_write(*, run: BatteryRun, directory: Path) -> Path:
    """Write report.json and report.html into directory (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = report_data(run=run)
    (directory / "report.json").write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    (directory / "report.html").write_text(report_html(data=data))
    return directory
