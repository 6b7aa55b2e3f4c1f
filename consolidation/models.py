"""Consolidation (DESIGN.md §8): episodes become candidate facts, traces candidate skills.

A ConsolidationRun reads one agent's episodes (a `skills` run: its skill traces,
and its episode counters count traces) after a cursor — the ledger seq
of the last `episode.recorded` event a run consumed — up to the seq it fixed
when it started, in steps, each step one transaction that moves the cursor
with what it wrote. A worker killed mid-run leaves a `running` run whose
cursor says exactly what is done; the next task resumes it.

What the extractors find becomes a CandidateFact (subject, predicate, value)
with a CandidateEvidence row per supporting episode and its ledger event. A
candidate is asserted through the facts services as `agent_inference` (so a
user's or an operator's word stays above it) once it is trusted enough, or by
an accept; a rejected candidate is final. One ledger event never supports the
same claim twice (a database constraint), so a rejected claim is not proposed
again from the same evidence; nor from the same sources (the services).
Evidence whose episode version is later retracted or corrected is withdrawn
(kept, marked): a candidate left with none is withdrawn, its fact retracted.

Every write appends a `consolidation.*` ledger event in the same transaction.
Foreign keys to episodes and facts are not database constraints: those
projections are dropped and rebuilt from the ledger with the same ids.
"""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

from ledger.models import Event
from piper.ids import uuid7
from piper.tenancy.models import Agent


class RunKind(models.TextChoices):
    FACTS = "facts", "Episodes → candidate facts"
    DUPLICATES = "duplicates", "Near-duplicate episodes → one canonical episode"
    SKILLS = "skills", "Repeated verified traces → candidate skills"


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running (or waiting to be resumed)"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed (see error; its cursor says what was done)"


class ConsolidationRun(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(max_length=10, choices=RunKind.choices, default=RunKind.FACTS)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    from_seq = models.BigIntegerField(
        help_text="It reads the agent's episode events after this ledger seq (exclusive) …"
    )
    to_seq = models.BigIntegerField(help_text="… up to this one (inclusive), fixed at its start.")
    cursor_seq = models.BigIntegerField(
        help_text="Everything up to this seq is done: written in the same step's transaction."
    )
    episodes_read = models.PositiveIntegerField(default=0)
    episodes_excluded = models.PositiveIntegerField(
        default=0,
        help_text="Read but never consolidated: instruction-like, or from a low-trust source "
        "(details says why).",
    )
    statements_found = models.PositiveIntegerField(default=0)
    candidates_proposed = models.PositiveIntegerField(
        default=0, help_text="New candidates, and open ones that gained evidence."
    )
    candidates_asserted = models.PositiveIntegerField(default=0)
    statements_skipped = models.PositiveIntegerField(
        default=0,
        help_text="Statements whose evidence or source already supported the claim "
        "(a rejected one is not proposed again from them).",
    )
    steps = models.PositiveIntegerField(default=0)
    details = models.JSONField(
        default=dict, blank=True, help_text="Counts by reason, extractors used, batch size."
    )
    error = models.TextField(blank=True, default="")
    started_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(
        db_default=Now(), help_text="The last step's commit: a stale running run is resumed."
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.PositiveBigIntegerField(null=True, blank=True)
    source_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", help_text="consolidation.run_started"
    )
    finish_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            # One run at a time per agent and kind: a second task resumes it.
            models.UniqueConstraint(
                fields=["agent", "kind"],
                condition=Q(status="running"),
                name="consolidation_one_running_run",
            ),
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="consolidation_run_status"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=RunKind.values), name="consolidation_run_kind"
            ),
            models.CheckConstraint(
                condition=Q(from_seq__lte=F("cursor_seq"), cursor_seq__lte=F("to_seq")),
                name="consolidation_run_cursor_in_range",
            ),
            models.CheckConstraint(
                condition=Q(status="running", finished_at__isnull=True)
                | (~Q(status="running") & Q(finished_at__isnull=False)),
                name="consolidation_run_finished_iff_done",
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "kind", "-cursor_seq"], name="consolidation_run_cursor"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.status} ({self.from_seq}, {self.to_seq}]"


class CandidateStatus(models.TextChoices):
    PROPOSED = "proposed", "Proposed (waiting for evidence or a decision)"
    ASSERTED = "asserted", "Asserted as an agent_inference fact"
    REJECTED = "rejected", "Rejected (final)"
    WITHDRAWN = "withdrawn", "Withdrawn (every episode behind it was retracted or corrected)"


class CandidateFact(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(
        ConsolidationRun,
        on_delete=models.PROTECT,
        related_name="candidates",
        help_text="The run that proposed it.",
    )
    subject = models.CharField(max_length=300, help_text="As first read (an entity name).")
    predicate = models.CharField(max_length=100)
    value = models.CharField(max_length=500, help_text="As first read.")
    claim_key = models.CharField(
        max_length=64,
        help_text="sha256 of the normalised subject, predicate and value: one claim.",
    )
    status = models.CharField(
        max_length=10, choices=CandidateStatus.choices, default=CandidateStatus.PROPOSED
    )
    extractor = models.CharField(max_length=100, help_text="Who read it first, e.g. patterns/1.")
    confidence = models.FloatField(
        help_text="1 - Π(1 - c) over its distinct sources, c the best reading of each."
    )
    sources = models.PositiveIntegerField(
        help_text="Distinct sources (source type, actor, session) among its evidence: "
        "one source repeating itself is one piece of evidence."
    )
    valid_from = models.DateTimeField(help_text="The earliest supporting episode's time.")
    evidence_key = models.CharField(
        max_length=64, help_text="sha256 of its supporting event ids, sorted."
    )
    fact_id = models.UUIDField(
        null=True, blank=True, help_text="The fact version the assertion made or confirmed."
    )
    fact_outcome = models.CharField(
        max_length=20,
        blank=True,
        default="",
        help_text="What the facts service did: created, confirmed or contested (a stronger "
        "claim holds).",
    )
    reason = models.TextField(blank=True, default="", help_text="Why rejected.")
    decided_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    decided_at = models.DateTimeField(null=True, blank=True)
    source_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="consolidation.candidate_proposed",
    )
    decision_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "claim_key", "evidence_key"],
                name="consolidation_claim_evidence_once",
            ),
            # Evidence for a claim accumulates on its one live candidate (proposed or
            # asserted); only a rejection closes a claim, and new sources open a new one.
            models.UniqueConstraint(
                fields=["agent", "claim_key"],
                condition=Q(status__in=["proposed", "asserted"]),
                name="consolidation_one_live_candidate",
            ),
            models.CheckConstraint(
                condition=Q(status__in=CandidateStatus.values),
                name="consolidation_candidate_status",
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0.0, confidence__lte=1.0),
                name="consolidation_candidate_confidence_0_1",
            ),
            # Asserted: the fact it made. Rejected after that: still says which it was.
            models.CheckConstraint(
                condition=~Q(status="asserted") | Q(fact_id__isnull=False),
                name="consolidation_asserted_has_fact",
            ),
            models.CheckConstraint(
                condition=~Q(status="proposed") | Q(fact_id__isnull=True),
                name="consolidation_proposed_has_no_fact",
            ),
            models.CheckConstraint(
                condition=Q(status="proposed", decided_at__isnull=True)
                | (~Q(status="proposed") & Q(decided_at__isnull=False)),
                name="consolidation_decided_iff_closed",
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "status", "-id"], name="consolidation_cand_status"),
        ]

    def __str__(self) -> str:
        return f"{self.subject} {self.predicate} {self.value} ({self.status})"


class CandidateEvidence(models.Model):
    """One episode (and its ledger event) supporting a candidate."""

    candidate = models.ForeignKey(CandidateFact, on_delete=models.CASCADE, related_name="evidence")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    claim_key = models.CharField(max_length=64)
    # Episodes are a projection, rebuilt with the same ids: no database constraint.
    episode = models.ForeignKey(
        "episodes.Episode",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        null=True,
        related_name="+",
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    source_key = models.CharField(
        max_length=700, help_text="source type | actor | session (or ref): who said it."
    )
    field = models.CharField(max_length=20, help_text="summary, action or observation.")
    extractor = models.CharField(max_length=100)
    rule = models.CharField(max_length=100, blank=True, default="")
    confidence = models.FloatField()
    occurred_at = models.DateTimeField()
    withdrawn_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When its episode version was retracted or corrected: it supports "
        "nothing any more (kept, so the claim is never proposed again from it).",
    )
    withdrawn_by = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="The episode.retracted or episode.corrected event that withdrew it.",
    )

    class Meta:
        ordering = ["candidate", "occurred_at", "id"]
        verbose_name_plural = "candidate evidence"
        constraints = [
            # A ledger event supports one claim once, ever: a rejected claim is not
            # proposed again from the same evidence.
            models.UniqueConstraint(
                fields=["agent", "claim_key", "event"], name="consolidation_evidence_once"
            ),
        ]
        indexes = [models.Index(fields=["event"], name="consolidation_evidence_event")]

    def __str__(self) -> str:
        return f"{self.event_id} → {self.candidate_id}"


class CandidateSkillStatus(models.TextChoices):
    COLLECTING = "collecting", "Collecting (fewer verified traces than it takes)"
    PROPOSED = "proposed", "Proposed (a candidate skill version exists)"
    REJECTED = "rejected", "Rejected (final: never proposed again)"


class CandidateSkill(models.Model):
    """One procedure shape (consolidation.skill_mining.Shape) seen in verified traces.

    It collects traces until CONSOLIDATION_SKILL_MIN_TRACES with different inputs
    support it, then becomes a candidate skill version (skills services) with those
    traces as provenance. One row per shape and agent, ever: a rejected shape is not
    proposed again, whatever new traces say.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(
        ConsolidationRun,
        on_delete=models.PROTECT,
        related_name="skill_candidates",
        help_text="The run that first saw it.",
    )
    shape_key = models.CharField(max_length=64, help_text="sha256 of the procedure's shape.")
    tools = ArrayField(models.CharField(max_length=100), help_text="The tools it calls, in order.")
    task = models.TextField(help_text="The task of the first trace that showed it.")
    status = models.CharField(
        max_length=10,
        choices=CandidateSkillStatus.choices,
        default=CandidateSkillStatus.COLLECTING,
    )
    traces = models.PositiveIntegerField(default=0, help_text="Supporting verified traces.")
    distinct_inputs = models.PositiveIntegerField(
        default=0, help_text="Of which with different inputs: what the threshold counts."
    )
    skill_id = models.UUIDField(null=True, blank=True, help_text="The skill it proposed.")
    version_id = models.UUIDField(null=True, blank=True, help_text="The version it proposed.")
    reason = models.TextField(
        blank=True, default="", help_text="Why it was rejected, or why a proposal failed."
    )
    decided_by = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    decided_at = models.DateTimeField(null=True, blank=True)
    source_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="consolidation.skill_candidate_opened",
    )
    decision_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="consolidation.skill_candidate_proposed or _rejected",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "shape_key"], name="consolidation_skill_shape_once"
            ),
            models.CheckConstraint(
                condition=Q(status__in=CandidateSkillStatus.values),
                name="consolidation_skill_status",
            ),
            models.CheckConstraint(
                condition=~Q(status="proposed") | Q(version_id__isnull=False),
                name="consolidation_skill_proposed_has_version",
            ),
            models.CheckConstraint(
                condition=Q(distinct_inputs__lte=F("traces")),
                name="consolidation_skill_distinct_le_traces",
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "status", "-id"], name="consolidation_skill_by_status"),
        ]

    def __str__(self) -> str:
        return f"{' → '.join(self.tools)} ({self.status})"


class CandidateSkillTrace(models.Model):
    """One verified trace supporting a candidate skill."""

    candidate = models.ForeignKey(CandidateSkill, on_delete=models.CASCADE, related_name="evidence")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    # A trace goes only by an erasure, which takes this row too (consolidation.erasure).
    trace = models.ForeignKey(
        "skills.SkillTrace", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    inputs_key = models.CharField(max_length=64, help_text="sha256 of the trace's inputs.")
    occurred_at = models.DateTimeField()

    class Meta:
        ordering = ["candidate", "occurred_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["candidate", "event"], name="consolidation_skill_trace_once"
            ),
        ]
        indexes = [models.Index(fields=["event"], name="consolidation_sktrace_event")]

    def __str__(self) -> str:
        return f"{self.event_id} → {self.candidate_id}"
