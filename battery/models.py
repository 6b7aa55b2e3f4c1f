"""Stored Memory Battery runs and their per-item results."""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from piper.ids import uuid7

from .taxonomy import FailureCode


class BatteryRun(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        PASSED = "passed", "Passed (every gate)"
        FAILED = "failed", "Failed (a gate)"
        INCOMPLETE = "incomplete", "Incomplete (a designed suite did not run; it counts 0)"
        ERROR = "error", "Error (the run itself broke)"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    started_at = models.DateTimeField(db_default=Now(), verbose_name="started")
    finished_at = models.DateTimeField(null=True, blank=True, verbose_name="finished")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    seed = models.BigIntegerField(help_text="Seed of the deterministic reference agent.")
    suites = ArrayField(
        models.CharField(max_length=4),
        help_text="Suite codes the run set out to run (one that crashed is also in missing_suites).",
    )
    target = models.CharField(
        max_length=500, help_text="'in-process' or the base URL of the service driven over HTTP."
    )
    agent_name = models.CharField(
        max_length=100, blank=True, default="", help_text="The throwaway agent the run used."
    )
    score = models.FloatField(
        null=True,
        blank=True,
        verbose_name="total",
        help_text="The battery's weighted total, 0-100, after caps, over every designed suite: "
        "one that did not run counts 0.",
    )
    uncapped_score = models.FloatField(
        null=True,
        blank=True,
        verbose_name="uncapped total",
        help_text="The weighted total over every designed suite, 0-100, before the caps.",
    )
    score_of_run = models.FloatField(
        null=True,
        blank=True,
        verbose_name="score of the suites that ran",
        help_text="The weighted score of the suites that ran only, 0-100, after the caps their "
        "metrics triggered; not the battery's total when the run is incomplete.",
    )
    missing_suites = models.JSONField(
        default=dict,
        blank=True,
        help_text="Designed suites that did not run, each counted 0: name, weight, reason "
        "(not_selected, not_registered, crashed, nothing_to_measure) and detail.",
    )
    suite_scores = models.JSONField(
        default=dict,
        help_text="Per suite: name, weight, gate, items, passed, pass rate, score, metrics.",
    )
    metrics = models.JSONField(
        default=dict, help_text="Named metrics the suites reported; the caps are gated on these."
    )
    gates = models.JSONField(default=list, help_text="Each gate: name, kind, passed, detail.")
    report_dir = models.CharField(
        max_length=1000,
        blank=True,
        default="",
        help_text="Directory holding report.json and report.html.",
    )
    error = models.TextField(
        blank=True,
        default="",
        help_text="Why the run itself broke (status 'error'), or why a suite crashed.",
    )

    class Meta:
        ordering = ["-started_at"]
        verbose_name = "battery run"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(score__isnull=True) | models.Q(score__gte=0, score__lte=100),
                name="battery_run_score_0_100",
            ),
            models.CheckConstraint(
                condition=models.Q(score_of_run__isnull=True)
                | models.Q(score_of_run__gte=0, score_of_run__lte=100),
                name="battery_run_score_of_run_0_100",
            ),
        ]
        indexes = [models.Index(fields=["status", "-started_at"], name="battery_run_status_idx")]

    def __str__(self) -> str:
        return f"battery {self.started_at:%Y-%m-%d %H:%M} {self.status}"


class ItemResult(models.Model):
    run = models.ForeignKey(BatteryRun, on_delete=models.CASCADE, related_name="items")
    suite = models.CharField(max_length=4, help_text="Suite code, e.g. 'L'.")
    item = models.CharField(max_length=100, help_text="The item's key within its suite.")
    title = models.CharField(max_length=300, help_text="What the item checks, in one line.")
    passed = models.BooleanField()
    failure_code = models.CharField(
        max_length=2,
        choices=FailureCode.choices,
        blank=True,
        default="",
        help_text="Where memory broke (the failure taxonomy); empty when the item passed.",
    )
    metrics = models.JSONField(default=dict, help_text="What the item measured.")
    detail = models.TextField(blank=True, default="", help_text="Why it failed, for a human.")
    duration_ms = models.FloatField(verbose_name="duration (ms)")

    class Meta:
        ordering = ["run", "suite", "id"]
        verbose_name = "item result"
        constraints = [
            models.UniqueConstraint(
                fields=["run", "suite", "item"], name="battery_item_once_per_run"
            ),
            models.CheckConstraint(
                condition=models.Q(passed=True, failure_code="")
                | models.Q(passed=False) & ~models.Q(failure_code=""),
                name="battery_item_failure_code_iff_failed",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.suite}.{self.item}: {'pass' if self.passed else self.failure_code}"
