"""Procedural memory (DESIGN.md §6): versioned skills, their validations and executions.

A Skill is an agent's named procedure; each SkillVersion is immutable once
written (PostgreSQL refuses an UPDATE of its content, migration 0003) — only
its lifecycle status moves, along STATUS_TRANSITIONS (also a trigger), and
every move is a VersionTransition row plus a ledger event.

How good a version is — successes, failures, success rate, recent success
rate, last used, last validated, transfer — is never typed in: it is derived
from its Validation and Execution rows (skills.selectors.version_stats).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from pgvector.django import VectorField

from ledger.models import Event
from piper.ids import uuid7
from piper.provenance import SourceType
from piper.tenancy.models import Agent

MAX_SOURCE_BYTES = 64 * 1024


class VersionStatus(models.TextChoices):
    CANDIDATE = "candidate", "Candidate (written; its examples not yet passed)"
    EXPERIMENTAL = "experimental", "Experimental (examples pass; gathering outcome evidence)"
    VALIDATED = "validated", "Validated (outcome evidence; offered by match)"
    DEPRECATED = "deprecated", "Deprecated (superseded or failing; not offered)"
    RETIRED = "retired", "Retired (never to be used again)"


# from -> allowed targets. The same table is enforced by a trigger (0003).
STATUS_TRANSITIONS: dict[str, tuple[str, ...]] = {
    VersionStatus.CANDIDATE: ("experimental", "deprecated", "retired"),
    VersionStatus.EXPERIMENTAL: ("validated", "deprecated", "retired"),
    VersionStatus.VALIDATED: ("deprecated", "retired"),
    # A deprecated version may be tried again, and must then earn validation anew.
    VersionStatus.DEPRECATED: ("experimental", "retired"),
    VersionStatus.RETIRED: (),
}


class Skill(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(
        max_length=200, help_text="The agent's own name for the skill (unique per agent)."
    )
    source_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", help_text="The skill.created event."
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["agent", "name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="skills_skill_name_unique"),
            models.UniqueConstraint(fields=["agent", "id"], name="skills_skill_agent_id_uniq"),
            models.CheckConstraint(condition=~Q(name=""), name="skills_skill_name_not_empty"),
        ]

    def __str__(self) -> str:
        return self.name


class SkillVersion(models.Model):
    """One immutable version of a skill: what it is for, when it applies, its code."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    skill = models.ForeignKey(Skill, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField(help_text="1, 2, … within the skill.")
    purpose = models.TextField(help_text="What the skill achieves, in a sentence or two.")
    scope = models.CharField(
        max_length=500, blank=True, default="", help_text="Where it applies (free text)."
    )
    trigger = models.JSONField(
        help_text='{"regex": "…", "keywords": ["…"], "min_keywords": 1}: the task text must '
        "match the regex, or contain at least min_keywords of the keywords."
    )
    intent_embedding = VectorField(
        dimensions=settings.PIPER_EMBEDDING_DIM,
        help_text="Embedding of purpose + trigger text (piper.embeddings).",
    )
    preconditions = models.JSONField(
        default=list, blank=True, help_text="Conditions over the match context; all must hold."
    )
    contraindications = models.JSONField(
        default=list,
        blank=True,
        help_text="Conditions over the context, or task keywords; any one holding rejects it.",
    )
    required_tools = ArrayField(
        models.CharField(max_length=100), default=list, blank=True, help_text="skills.tools names."
    )
    required_permissions = ArrayField(
        models.CharField(max_length=10),
        default=list,
        blank=True,
        help_text="API key scopes an executing key must hold.",
    )
    parameter_schema = models.JSONField(help_text="JSON Schema the parameters must satisfy.")
    procedure = models.TextField(help_text="Python source defining entry_point(params, tools).")
    entry_point = models.CharField(max_length=100, default="run")
    validator = models.TextField(
        blank=True, default="", help_text="Python source defining validate(params, result, tools)."
    )
    rollback = models.TextField(
        blank=True, default="", help_text="Python source defining rollback(params, tools)."
    )
    examples = models.JSONField(
        default=list, blank=True, help_text="[{params, expected?}]: pass them to be experimental."
    )
    holdout = models.JSONField(
        default=list,
        blank=True,
        help_text="[{params, expected?}] replayed as hold-out cases (never shown as examples).",
    )
    provenance_episodes = models.JSONField(
        default=list, blank=True, help_text="Episode references it was distilled from."
    )
    supersedes = models.ForeignKey(
        "self",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="superseded_by",
        help_text="The version of the same skill this one replaces.",
    )
    status = models.CharField(
        max_length=12, choices=VersionStatus.choices, default=VersionStatus.CANDIDATE
    )
    status_changed_at = models.DateTimeField(db_default=Now())
    source_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The skill.version_created event.",
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["skill", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["skill", "number"], name="skills_version_number_uniq"),
            models.UniqueConstraint(fields=["agent", "id"], name="skills_version_agent_id_uniq"),
            models.UniqueConstraint(fields=["skill", "id"], name="skills_version_skill_id_uniq"),
            models.CheckConstraint(
                condition=Q(status__in=VersionStatus.values), name="skills_version_status_known"
            ),
            models.CheckConstraint(condition=Q(number__gte=1), name="skills_version_number_pos"),
            models.CheckConstraint(
                condition=~Q(supersedes=models.F("id")), name="skills_version_not_self"
            ),
            models.CheckConstraint(
                condition=~Q(purpose="") & ~Q(procedure=""), name="skills_version_has_content"
            ),
            models.CheckConstraint(
                condition=Q(required_permissions__contained_by=["read", "write", "admin"]),
                name="skills_version_permissions_known",
            ),
        ]
        indexes = [
            # Matching ranks an agent's validated versions by exact cosine distance.
            # (An HNSW index would be approximate *before* the agent filter: with
            # many agents it could return fewer matches than exist.)
            models.Index(fields=["agent", "status"], name="skills_version_status_idx"),
            # What the exact scan reads, and nothing else: the matcher ranks an
            # agent's versions of some statuses by distance with an index-only
            # scan (1.5 KB an entry instead of the whole row), then fetches the
            # few rows it examines. Fits a B-tree entry up to ~640 dimensions.
            models.Index(
                fields=["agent", "status", "id"],
                include=["intent_embedding"],
                name="skills_version_match_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.skill_id} v{self.number}"


class VersionProvenance(models.Model):
    """A ledger event (trace) a version was distilled from: same agent, enforced by 0003."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    version = models.ForeignKey(SkillVersion, on_delete=models.CASCADE, related_name="provenance")
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["version", "id"]
        constraints = [
            models.UniqueConstraint(fields=["version", "event"], name="skills_provenance_once"),
        ]

    def __str__(self) -> str:
        return f"{self.version_id} ← {self.event_id}"


class VersionTransition(models.Model):
    """Append-only history of a version's status, each with its reason and ledger event."""

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    version = models.ForeignKey(SkillVersion, on_delete=models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=12, blank=True, default="")
    to_status = models.CharField(max_length=12)
    reason = models.CharField(max_length=500)
    actor = models.CharField(max_length=200, blank=True, default="")
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["version", "id"]

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.to_status}"


class ValidationKind(models.TextChoices):
    EXAMPLES = "examples", "Examples (candidate → experimental)"
    HOLDOUT = "holdout", "Hold-out replay"
    DRAWN = "drawn", "Drawn replay (inputs the service drew, judged by the validator)"


class ValidationStatus(models.TextChoices):
    QUEUED = "queued", "Queued (waiting for a sandbox worker)"
    PASSED = "passed", "Passed (every case)"
    FAILED = "failed", "Failed (a case did not pass)"
    ERROR = "error", "Error (the sandbox could not run it)"


class Validation(models.Model):
    """One sandbox run of a version's examples or hold-out cases."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    version = models.ForeignKey(SkillVersion, on_delete=models.CASCADE, related_name="validations")
    kind = models.CharField(max_length=10, choices=ValidationKind.choices)
    status = models.CharField(
        max_length=10, choices=ValidationStatus.choices, default=ValidationStatus.QUEUED
    )
    cases_total = models.PositiveIntegerField(default=0)
    cases_passed = models.PositiveIntegerField(default=0)
    drawn_cases = models.JSONField(
        null=True,
        blank=True,
        help_text="A drawn replay's cases ({params}), drawn by the service when it was "
        "requested; empty for examples and hold-out (the version holds those).",
    )
    error = models.TextField(blank=True, default="")
    requested_by = models.CharField(max_length=200, blank=True, default="")
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    finish_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=ValidationKind.values), name="skills_validation_kind_known"
            ),
            models.CheckConstraint(
                condition=Q(status__in=ValidationStatus.values),
                name="skills_validation_status_known",
            ),
            models.CheckConstraint(
                condition=Q(cases_passed__lte=models.F("cases_total")),
                name="skills_validation_passed_le_total",
            ),
            models.CheckConstraint(
                condition=Q(status="queued", finished_at__isnull=True)
                | (~Q(status="queued") & Q(finished_at__isnull=False)),
                name="skills_validation_finished_iff_done",
            ),
        ]
        indexes = [
            models.Index(fields=["version", "kind", "-id"], name="skills_validation_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.status}"


class ValidationCase(models.Model):
    """One example or hold-out case as the sandbox ran it."""

    validation = models.ForeignKey(Validation, on_delete=models.CASCADE, related_name="cases")
    index = models.PositiveIntegerField()
    params = models.JSONField()
    expected = models.JSONField(null=True, blank=True)
    has_expected = models.BooleanField(default=False)
    outcome = models.CharField(max_length=20, help_text="The sandbox outcome (ok, timeout, …).")
    passed = models.BooleanField()
    result = models.JSONField(null=True, blank=True)
    verdict = models.JSONField(null=True, blank=True, help_text="The validator's verdict.")
    error = models.TextField(blank=True, default="")
    stdout = models.TextField(blank=True, default="")
    stderr = models.TextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["validation", "index"]
        constraints = [
            models.UniqueConstraint(fields=["validation", "index"], name="skills_case_once"),
        ]

    def __str__(self) -> str:
        return f"case {self.index}: {self.outcome}"


class ExecutionSource(models.TextChoices):
    SANDBOX = "sandbox", "Sandbox (run by the service)"
    REPORTED = "reported", "Reported (run by the agent itself)"


class ExecutionStatus(models.TextChoices):
    QUEUED = "queued", "Queued (waiting for a sandbox worker)"
    FINISHED = "finished", "Finished"


class Execution(models.Model):
    """Every run of a version, in the sandbox or reported by the agent. Final once finished."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    version = models.ForeignKey(SkillVersion, on_delete=models.PROTECT, related_name="executions")
    source = models.CharField(max_length=10, choices=ExecutionSource.choices)
    status = models.CharField(
        max_length=10, choices=ExecutionStatus.choices, default=ExecutionStatus.QUEUED
    )
    version_status = models.CharField(
        max_length=12,
        choices=VersionStatus.choices,
        help_text="The version's status when the run was asked for (obsolete runs are visible).",
    )
    params = models.JSONField()
    novel_params = models.BooleanField(
        help_text="The parameters are none of the version's examples (counts for transfer)."
    )
    task = models.TextField(blank=True, default="")
    context = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=20, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    verdict = models.JSONField(null=True, blank=True, help_text="The validator's verdict.")
    validator_passed = models.BooleanField(null=True, blank=True)
    succeeded = models.BooleanField(null=True, blank=True)
    externally_verified = models.BooleanField(default=False)
    evidence = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    stdout = models.TextField(blank=True, default="")
    stderr = models.TextField(blank=True, default="")
    tool_calls = models.JSONField(default=list, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    session_id = models.CharField(max_length=200, blank=True, default="")
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    finish_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", null=True, blank=True
    )
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "id"], name="skills_execution_agent_id_uniq"),
            models.CheckConstraint(
                condition=Q(source__in=ExecutionSource.values), name="skills_execution_source"
            ),
            models.CheckConstraint(
                condition=Q(status="queued", finished_at__isnull=True, succeeded__isnull=True)
                | Q(status="finished", finished_at__isnull=False, succeeded__isnull=False),
                name="skills_execution_finished_iff_done",
            ),
            models.CheckConstraint(
                condition=Q(source="sandbox") | Q(status="finished"),
                name="skills_execution_reported_finished",
            ),
            models.CheckConstraint(
                condition=Q(externally_verified=False) | Q(evidence__isnull=False),
                name="skills_execution_verified_has_evidence",
            ),
        ]
        indexes = [
            models.Index(fields=["version", "-id"], name="skills_execution_recent_idx"),
            models.Index(fields=["agent", "-id"], name="skills_execution_agent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.outcome or self.status}"


class SkillTrace(models.Model):
    """A procedure the agent performed without a skill, step by step, with its outcome.

    Each step is a call of one of skills.tools (the only tools a skill can call),
    so a trace can be replayed in the sandbox. Consolidation reads verified,
    successful traces and, when enough of them with different inputs share one
    step sequence, proposes a candidate skill version with those traces as its
    provenance (consolidation.skill_mining). Final once written.
    """

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    task = models.TextField(help_text="What the agent was doing, in its own words.")
    inputs = models.JSONField(help_text="The values the procedure started from: {name: value}.")
    steps = models.JSONField(help_text="[{tool, args, result}] in the order they ran.")
    output = models.JSONField(null=True, blank=True, help_text="What the procedure produced.")
    succeeded = models.BooleanField(help_text="Did it achieve its purpose?")
    verified = models.BooleanField(
        default=False, help_text="A check outside the agent's own say-so confirmed the outcome."
    )
    verification = models.JSONField(
        null=True, blank=True, help_text="What checked it: {by, evidence} (required if verified)."
    )
    source_type = models.CharField(
        max_length=20,
        choices=SourceType.choices,
        default=SourceType.AGENT_INFERENCE,
        help_text="Where the trace came from: a third party's or a document's procedure is "
        "kept, never mined.",
    )
    instruction_like = models.BooleanField(
        default=False,
        help_text="Its text tries to act as an instruction (piper.safety): kept as evidence, "
        "never mined into a skill.",
    )
    session_id = models.CharField(max_length=200, blank=True, default="")
    task_id = models.CharField(max_length=200, blank=True, default="")
    source_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", help_text="skill.trace_recorded"
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(verified=False) | Q(verification__isnull=False),
                name="skills_trace_verified_has_evidence",
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "-id"], name="skills_trace_agent_idx"),
            models.Index(fields=["source_event"], name="skills_trace_event_idx"),
        ]

    def __str__(self) -> str:
        return f"trace {self.pk} ({'ok' if self.succeeded else 'failed'})"
