"""Reads of stored battery runs."""

from __future__ import annotations

import uuid

from django.db.models import Count, QuerySet

from piper.errors import NotFound

from .models import BatteryRun, ItemResult


def run_list() -> QuerySet[BatteryRun]:
    return BatteryRun.objects.order_by("-started_at")


def run_get(*, run_id: uuid.UUID | str) -> BatteryRun:
    run = BatteryRun.objects.filter(pk=run_id).first()
    if run is None:
        raise NotFound(f"battery run {run_id} not found")
    return run


def run_items(*, run: BatteryRun) -> QuerySet[ItemResult]:
    """The run's item results in the order they ran (suite code, then declaration order)."""
    return ItemResult.objects.filter(run=run).order_by("suite", "id")


def run_failure_counts(*, run: BatteryRun) -> dict[str, int]:
    """How many items failed under each failure code, most frequent first."""
    rows = (
        ItemResult.objects.filter(run=run, passed=False)
        .values("failure_code")
        .annotate(count=Count("id"))
        .order_by("-count", "failure_code")
    )
    return {row["failure_code"]: row["count"] for row in rows}
