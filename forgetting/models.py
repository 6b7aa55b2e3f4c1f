"""Erasure receipts and retention policies (DESIGN §1, the deletion contract; §8).

An erasure removes a set of ledger events and everything made from them, in
every projection, then checks that nothing is left. Its receipt is what stays:
what was asked, by whom, what went where (counts and ids, never content) and
the result of the residue check. A receipt outlives the agent it was about
(a hard delete of an agent leaves one).
"""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.models import Event
from piper.ids import uuid7
from piper.provenance import RetentionClass, SourceType
from piper.tenancy.models import Agent


class ErasureKind(models.TextChoices):
    REQUEST = "request", "Erasure request"
    RETENTION = "retention", "Retention sweep"
    AGENT = "agent_deletion", "Hard delete of an agent"


class ErasureStatus(models.TextChoices):
    COMPLETED = "completed", "Completed, no residue"
    RESIDUE_FOUND = "residue_found", "Completed, but the residue check found something"


class Erasure(models.Model):
    """The receipt of one erasure."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # Kept when the agent is hard-deleted: the receipt of that deletion is about it.
    agent = models.ForeignKey(
        Agent, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    agent_ref = models.UUIDField(help_text="The agent's id (kept after a hard delete).")
    agent_name = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=ErasureKind.choices)
    selector = models.JSONField(help_text="What was asked to be erased, as asked.")
    reason = models.CharField(max_length=500)
    requested_by = models.CharField(
        max_length=200, help_text="The API key (name and prefix) or operator who asked."
    )
    legal_hold_lifted = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="The operator's reason for erasing events under legal hold, if any were.",
    )
    events = models.PositiveIntegerField(help_text="Ledger events erased (now tombstones).")
    counts = models.JSONField(
        default=dict, help_text="Per projection: rows removed (or rewritten, '.scrubbed' etc.)."
    )
    removed = models.JSONField(
        default=dict,
        help_text="Per projection: the ids removed (the first MAX_LISTED of each).",
    )
    residue = models.JSONField(
        default=list, help_text="Each check of the residue search: projection, check, found."
    )
    residue_found = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=20, choices=ErasureStatus.choices)
    purge_event = models.ForeignKey(
        Event,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The ledger event recording the purge (none after an agent's hard delete).",
    )
    duration_ms = models.FloatField(help_text="From the request to the residue check's end.")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=ErasureKind.values), name="forgetting_erasure_kind"
            ),
            models.CheckConstraint(
                condition=Q(status__in=ErasureStatus.values), name="forgetting_erasure_status"
            ),
        ]
        indexes = [models.Index(fields=["agent_ref", "-created_at"], name="forgetting_by_agent")]

    def __str__(self) -> str:
        return f"{self.kind} {self.agent_name} ({self.events} events)"


class RetentionPolicy(models.Model):
    """How long one agent keeps a kind of evidence. The retention sweep
    (celery-beat) erases what is older, in bounded chunks, with receipts."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100, help_text="The agent's own name for the policy.")
    retention_class = models.CharField(
        max_length=20,
        choices=RetentionClass.choices,
        blank=True,
        default="",
        help_text="Only events of this retention class; empty: every class but 'permanent'.",
    )
    event_type = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="Only events of this type, or of a family ending in '.*' (e.g. 'tool.*').",
    )
    source_type = models.CharField(
        max_length=20,
        choices=SourceType.choices,
        blank=True,
        default="",
        help_text="Only events from this kind of source.",
    )
    max_age_days = models.PositiveIntegerField(
        help_text="Events recorded longer ago than this are erased."
    )
    is_active = models.BooleanField(default=True)
    source_event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", help_text="The event that last set it."
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["agent", "name"]
        verbose_name_plural = "retention policies"
        constraints = [
            models.UniqueConstraint(fields=["agent", "name"], name="forgetting_policy_name_uniq"),
            # A legal hold is never swept: 'permanent' cannot be a policy's class.
            models.CheckConstraint(
                condition=~Q(retention_class=RetentionClass.PERMANENT),
                name="forgetting_policy_not_permanent",
            ),
            models.CheckConstraint(condition=Q(max_age_days__gte=1), name="forgetting_policy_age"),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.max_age_days} days"
