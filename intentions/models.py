"""Working state and prospective memory (DESIGN.md §7).

A Thread is one line of an agent's work; its WorkingState is a small,
versioned checkpoint (each write a new version, history kept). Handover
freezes it for a successor session, which resumes and acknowledges.

An Intention is a commitment with a trigger. Firing (services/firing.py)
moves it to *due* exactly once per occurrence: the status change is a
compare-and-set under a row lock, and the Firing row it writes is unique per
(intention, occurrence) — so duplicate deliveries, two beats or a killed
worker cannot fire it twice. PostgreSQL also refuses any status change that
is not in the state machine (migration 0003).
"""

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from ledger.models import Event
from piper.ids import uuid7
from piper.tenancy.models import Agent

MAX_STATE_BYTES = 64 * 1024


class Thread(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        HANDING_OVER = "handing_over", "Handing over (frozen until the successor acknowledges)"
        CLOSED = "closed", "Closed"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    key = models.CharField(max_length=200, help_text="The agent's own name for the thread.")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    session_id = models.CharField(
        max_length=200, blank=True, default="", help_text="The session holding the thread now."
    )
    current_version = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["agent", "key"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "key"], name="intentions_thread_key_unique"),
            models.UniqueConstraint(fields=["agent", "id"], name="intentions_thread_agent_id_uniq"),
        ]

    def __str__(self) -> str:
        return self.key


class WorkingState(models.Model):
    """One version of a thread's checkpoint. Never changed once written."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    based_on = models.PositiveIntegerField(help_text="The version this write started from.")
    state = models.JSONField(help_text="goal, subgoal, goal_stack, plan, assumptions, …")
    size_bytes = models.PositiveIntegerField()
    session_id = models.CharField(max_length=200, blank=True, default="")
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["thread", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "version"], name="intentions_state_version_unique"
            ),
            models.CheckConstraint(
                condition=Q(size_bytes__lte=MAX_STATE_BYTES), name="intentions_state_size_limit"
            ),
            models.CheckConstraint(
                condition=Q(based_on__lt=models.F("version")),
                name="intentions_state_based_on_earlier",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} v{self.version}"


class Handover(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending (frozen, waiting for the successor)"
        RESUMED = "resumed", "Resumed (the successor has the package)"
        ACKNOWLEDGED = "acknowledged", "Acknowledged (complete)"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="handovers")
    from_session = models.CharField(max_length=200, blank=True, default="")
    to_session = models.CharField(max_length=200)
    frozen_version = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    note = models.TextField(blank=True, default="")
    succession_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(db_default=Now())
    resumed_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    surfaced = models.JSONField(
        null=True,
        blank=True,
        help_text="Ids of the open intentions the successor's first resume showed it "
        "(suite H: open items that survived the succession). Empty until resumed.",
    )

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # At most one open handover per thread.
            models.UniqueConstraint(
                fields=["thread"],
                condition=~Q(status="acknowledged"),
                name="intentions_one_open_handover",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.thread_id} → {self.to_session}"


class TriggerType(models.TextChoices):
    TIME = "time", "Time (due_at / not_before / recurrence)"
    EVENT = "event", "Event (a pattern over ledger events)"
    STATE = "state", "State (a condition over current facts)"
    DEPENDENCY = "dependency", "Dependency (other intentions completed)"
    MANUAL = "manual", "Manual"


class IntentionStatus(models.TextChoices):
    ACTIVE = "active", "Active (waiting for its trigger)"
    BLOCKED = "blocked", "Blocked (waiting for dependencies)"
    DUE = "due", "Due (fired; the agent should act)"
    EXECUTING = "executing", "Executing"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


TERMINAL = (IntentionStatus.COMPLETED, IntentionStatus.CANCELLED, IntentionStatus.EXPIRED)

# from -> allowed targets. The same table is enforced by a trigger (0003).
TRANSITIONS: dict[str, tuple[str, ...]] = {
    IntentionStatus.ACTIVE: ("due", "blocked", "completed", "cancelled", "expired"),
    IntentionStatus.BLOCKED: ("active", "due", "completed", "cancelled", "expired"),
    IntentionStatus.DUE: ("executing", "completed", "active", "cancelled", "expired"),
    IntentionStatus.EXECUTING: ("completed", "due", "active", "cancelled", "expired"),
    IntentionStatus.COMPLETED: ("active",),  # only a recurring one, for its next occurrence
    IntentionStatus.CANCELLED: (),
    IntentionStatus.EXPIRED: (),
}


class Intention(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    thread = models.ForeignKey(
        Thread, on_delete=models.SET_NULL, null=True, blank=True, related_name="intentions"
    )
    description = models.TextField()
    priority = models.SmallIntegerField(default=0, help_text="Higher comes first.")
    trigger_type = models.CharField(max_length=10, choices=TriggerType.choices)
    trigger_spec = models.JSONField(default=dict, blank=True)
    not_before = models.DateTimeField(null=True, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)
    rrule = models.TextField(blank=True, default="", help_text="RFC 5545 recurrence rule.")
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Expiry is explicit.")
    required_context = models.JSONField(default=list, blank=True)
    completion_criteria = models.TextField(blank=True, default="")
    completion_evidence = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=IntentionStatus.choices)
    occurrence = models.PositiveIntegerField(
        default=1, help_text="Which occurrence is pending (recurring intentions count up)."
    )
    armed_after_seq = models.BigIntegerField(
        default=0, help_text="Event triggers match only ledger events after this seq."
    )
    attempts = models.PositiveSmallIntegerField(
        default=0,
        help_text="Failed attempts at the current occurrence (retry_policy counts these).",
    )
    last_fired_at = models.DateTimeField(null=True, blank=True)
    last_rehearsed_at = models.DateTimeField(null=True, blank=True)
    retry_policy = models.JSONField(default=dict, blank=True)
    escalation_policy = models.JSONField(
        default=dict,
        blank=True,
        help_text="When to escalate: after_failures, overdue_seconds, notify, to_session, note "
        "(services/escalation.py; {} for never).",
    )
    escalated_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the engine escalated the pending occurrence (its clock); cleared when "
        "the next occurrence is armed. Set at most once per occurrence.",
    )
    escalation = models.JSONField(
        null=True,
        blank=True,
        help_text="The escalation behind escalated_at: reason, occurrence, attempts, to_session, "
        "note, notify, event_id.",
    )
    source_session = models.CharField(max_length=200, blank=True, default="")
    inherited_by = models.CharField(max_length=200, blank=True, default="")
    source_event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-priority", "due_at", "created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=IntentionStatus.values), name="intentions_status_known"
            ),
            models.CheckConstraint(
                condition=Q(trigger_type__in=TriggerType.values), name="intentions_trigger_known"
            ),
            models.CheckConstraint(
                condition=Q(not_before__isnull=True)
                | Q(due_at__isnull=True)
                | Q(due_at__gte=models.F("not_before")),
                name="intentions_due_not_before_not_before",
            ),
            models.UniqueConstraint(
                fields=["agent", "id"], name="intentions_intention_agent_id_uniq"
            ),
        ]
        indexes = [
            # The time scan: what is due by now, oldest first.
            models.Index(
                fields=["due_at"],
                name="intentions_time_scan_idx",
                condition=Q(status="active", trigger_type="time"),
            ),
            models.Index(
                fields=["agent", "trigger_type"],
                name="intentions_armed_idx",
                condition=Q(status__in=["active", "blocked"]),
            ),
            # expire_due, every engine cycle: without it a scan of every open row.
            models.Index(
                fields=["expires_at"],
                name="intentions_expiry_idx",
                condition=Q(expires_at__isnull=False)
                & Q(status__in=["active", "blocked", "due", "executing"]),
            ),
            # escalate_due, every engine cycle: only open rows with a policy, not yet escalated.
            models.Index(
                fields=["last_fired_at"],
                name="intentions_escalation_idx",
                condition=Q(escalated_at__isnull=True)
                & ~Q(escalation_policy={})
                & Q(status__in=["active", "blocked", "due", "executing"]),
            ),
            models.Index(fields=["agent", "status", "-priority"], name="intentions_by_status_idx"),
            models.Index(fields=["thread", "status"], name="intentions_by_thread_idx"),
        ]

    def __str__(self) -> str:
        return self.description[:60]


class IntentionDependency(models.Model):
    intention = models.ForeignKey(
        Intention, on_delete=models.CASCADE, related_name="dependency_links"
    )
    depends_on = models.ForeignKey(
        Intention, on_delete=models.CASCADE, related_name="dependent_links"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["intention", "depends_on"], name="intentions_dependency_once"
            ),
            models.CheckConstraint(
                condition=~Q(intention=models.F("depends_on")), name="intentions_no_self_dependency"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.intention_id} needs {self.depends_on_id}"


class Transition(models.Model):
    """Append-only history of an intention's status: the admin's timeline."""

    intention = models.ForeignKey(Intention, on_delete=models.CASCADE, related_name="transitions")
    from_status = models.CharField(max_length=10, blank=True, default="")
    to_status = models.CharField(max_length=10)
    occurrence = models.PositiveIntegerField()
    reason = models.CharField(max_length=300, blank=True, default="")
    at = models.DateTimeField(help_text="The engine's clock (simulated for battery agents).")
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+", null=True)
    recorded_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["intention", "id"]

    def __str__(self) -> str:
        return f"{self.from_status or '∅'} → {self.to_status}"


class Firing(models.Model):
    """An intention became due. Unique per occurrence: the exactly-once guarantee."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    intention = models.ForeignKey(Intention, on_delete=models.CASCADE, related_name="firings")
    occurrence = models.PositiveIntegerField()
    fired_at = models.DateTimeField(help_text="The engine's clock when it fired.")
    cause = models.CharField(max_length=10, choices=TriggerType.choices)
    cause_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        null=True,
        blank=True,
        help_text="The ledger event that matched, for event triggers.",
    )
    event = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")
    recorded_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-recorded_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["intention", "occurrence"], name="intentions_fire_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.intention_id} #{self.occurrence}"


class Escalation(models.Model):
    """The engine escalated an intention (its escalation_policy's condition held).

    Unique per (intention, occurrence), and written under the intention's row
    lock with a compare-and-set on Intention.escalated_at: two workers, a
    repeated sweep or a redelivered task cannot escalate an occurrence twice."""

    class Reason(models.TextChoices):
        FAILURES = "failures", "Failures (attempts reached after_failures)"
        OVERDUE = "overdue", "Overdue (due, not acted on for overdue_seconds)"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    intention = models.ForeignKey(Intention, on_delete=models.CASCADE, related_name="escalations")
    occurrence = models.PositiveIntegerField()
    reason = models.CharField(max_length=10, choices=Reason.choices)
    attempts = models.PositiveSmallIntegerField(help_text="Failed attempts when it escalated.")
    escalated_at = models.DateTimeField(help_text="The engine's clock when it escalated.")
    policy = models.JSONField(help_text="The escalation_policy that escalated it.")
    event = models.ForeignKey(
        Event, on_delete=models.PROTECT, related_name="+", help_text="intention.escalated"
    )
    recorded_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-recorded_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["intention", "occurrence"], name="intentions_escalate_once"
            ),
            models.CheckConstraint(
                condition=Q(reason__in=["failures", "overdue"]),
                name="intentions_escalation_reason_known",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.intention_id} #{self.occurrence} {self.reason}"


class PendingItem(models.Model):
    """An intention put into a thread's working state: fired, or rehearsed.

    Kept beside the checkpoint rather than inside it, so the engine never
    races the agent's own versioned writes."""

    class Kind(models.TextChoices):
        FIRED = "fired", "Fired"
        REHEARSED = "rehearsed", "Rehearsed (long pending)"
        ESCALATED = "escalated", "Escalated (its escalation policy's condition held)"

    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    thread = models.ForeignKey(Thread, on_delete=models.CASCADE, related_name="pending")
    intention = models.ForeignKey(Intention, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    occurrence = models.PositiveIntegerField()
    added_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["added_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["thread", "intention", "kind", "occurrence"], name="intentions_pending_once"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.intention_id}"


class EventCursor(models.Model):
    """How far the event matcher has read each agent's ledger."""

    agent = models.OneToOneField(
        Agent, on_delete=models.PROTECT, primary_key=True, related_name="+"
    )
    last_seq = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.agent_id} @ {self.last_seq}"


class Webhook(models.Model):
    """Where an agent wants firings and escalations delivered (signed with HMAC-SHA256)."""

    agent = models.OneToOneField(
        Agent, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    url = models.URLField(max_length=2000)
    secret = models.CharField(max_length=200)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return self.url


class OutboxMessage(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed (gave up)"

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    firing = models.OneToOneField(
        Firing, on_delete=models.CASCADE, related_name="outbox", null=True, blank=True
    )
    escalation = models.OneToOneField(
        Escalation, on_delete=models.CASCADE, related_name="outbox", null=True, blank=True
    )
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(
        default=0, help_text="Deliveries started (claimed), whatever their outcome."
    )
    next_attempt_at = models.DateTimeField(db_default=Now())
    claimed_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A delivery is in flight until then; after it, the claim has lapsed "
        "(its worker died) and the message is tried again.",
    )
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["next_attempt_at"]
        constraints = [
            # A message delivers one firing or one escalation (its X-Piper-Delivery id).
            models.CheckConstraint(
                condition=Q(firing__isnull=False, escalation__isnull=True)
                | Q(firing__isnull=True, escalation__isnull=False),
                name="intentions_outbox_one_subject",
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                name="intentions_outbox_due_idx",
                condition=Q(status="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.delivery_id} {self.status}"

    @property
    def delivery_id(self) -> str:
        """X-Piper-Delivery: the firing's or the escalation's id, stable across retries."""
        return str(self.firing_id or self.escalation_id)
