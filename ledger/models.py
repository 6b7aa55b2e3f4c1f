"""The append-only ledger: every observation and action, hash-chained per agent.

PostgreSQL refuses UPDATE and DELETE on events (see migration 0002); the only
exception is the retention purge, which redacts a payload and leaves a
tombstone. Everything else in the service is a projection of these rows.
"""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Now

from piper.ids import uuid7
from piper.provenance import Authority, PrivacyClass, RetentionClass, SourceType
from piper.tenancy.models import Agent

GENESIS_HASH = "0" * 64


class Event(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # Every ledger_event index leads with agent: a single-column one is only
    # one more entry per append.
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+", db_index=False)
    seq = models.BigIntegerField(help_text="Position in this agent's hash chain, from 1.")
    event_type = models.CharField(
        max_length=100, help_text="What happened, e.g. 'tool.called', 'user.said', 'fact.asserted'."
    )
    occurred_at = models.DateTimeField(help_text="Valid time: when it happened, per the caller.")
    recorded_at = models.DateTimeField(
        db_default=Now(),
        help_text="Record time: when the service stored it. Set by PostgreSQL, never by a caller.",
    )
    session_id = models.CharField(max_length=200, blank=True, default="")
    actor = models.CharField(
        max_length=200, blank=True, default="", help_text="Who did or said it."
    )
    source_type = models.CharField(max_length=20, choices=SourceType.choices)
    source_ref = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="Where it came from: a URI, tool call id, …",
    )
    authority = models.CharField(max_length=20, choices=Authority.choices)
    confidence = models.FloatField(validators=[MinValueValidator(0.0), MaxValueValidator(1.0)])
    payload = models.JSONField(default=dict)
    payload_hash = models.CharField(
        max_length=64,
        help_text="Hash of the canonical JSON payload: SHA-256 (hash_version 1), or an "
        "HMAC of the payload and the labels keyed by payload_salt (hash_version 2).",
    )
    payload_salt = models.CharField(
        max_length=32,
        blank=True,
        default="",
        db_default="",
        help_text="The key of payload_hash (hash_version 2); a purge removes it, so an "
        "erased payload cannot be confirmed by guessing.",
    )
    hash_version = models.PositiveSmallIntegerField(
        default=1,
        db_default=1,
        help_text="1: the chain covers the labels (actor, session, source_ref) as written; "
        "2: payload_hash covers them, and a purge removes them with the payload.",
    )
    prev_hash = models.CharField(max_length=64, help_text="hash of this agent's previous event.")
    hash = models.CharField(
        max_length=64, help_text="SHA-256 over this event's fields and prev_hash."
    )
    # Same-agent references: a composite foreign key (agent_id, …) in migration
    # 0002 makes pointing at another agent's event impossible. Most events have
    # neither link: they are indexed where set (Meta.indexes).
    parent_event = models.ForeignKey(
        "self",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="children",
    )
    correction_of = models.ForeignKey(
        "self",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        null=True,
        blank=True,
        related_name="corrections",
    )
    privacy_class = models.CharField(
        max_length=20, choices=PrivacyClass.choices, default=PrivacyClass.INTERNAL
    )
    retention_class = models.CharField(
        max_length=20, choices=RetentionClass.choices, default=RetentionClass.STANDARD
    )
    redacted_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when the retention purge replaced the payload."
    )

    class Meta:
        ordering = ["agent", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "seq"], name="ledger_event_agent_seq_uniq"),
            models.UniqueConstraint(fields=["agent", "id"], name="ledger_event_agent_id_uniq"),
            models.CheckConstraint(
                condition=models.Q(seq__gte=1), name="ledger_event_seq_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(confidence__gte=0.0, confidence__lte=1.0),
                name="ledger_event_confidence_0_1",
            ),
            models.CheckConstraint(
                condition=models.Q(source_type__in=SourceType.values),
                name="ledger_event_source_type",
            ),
            models.CheckConstraint(
                condition=models.Q(authority__in=Authority.values), name="ledger_event_authority"
            ),
            models.CheckConstraint(
                condition=models.Q(privacy_class__in=PrivacyClass.values),
                name="ledger_event_privacy_class",
            ),
            models.CheckConstraint(
                condition=models.Q(retention_class__in=RetentionClass.values),
                name="ledger_event_retention_class",
            ),
            models.CheckConstraint(
                condition=models.Q(hash_version__in=[1, 2]), name="ledger_event_hash_version"
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "event_type", "seq"], name="ledger_event_type_idx"),
            models.Index(fields=["agent", "session_id", "seq"], name="ledger_event_session_idx"),
            models.Index(fields=["agent", "occurred_at"], name="ledger_event_occurred_idx"),
            models.Index(fields=["agent", "recorded_at"], name="ledger_event_recorded_idx"),
            models.Index(
                fields=["parent_event"],
                name="ledger_event_parent_idx",
                condition=models.Q(parent_event__isnull=False),
            ),
            models.Index(
                fields=["correction_of"],
                name="ledger_event_correction_idx",
                condition=models.Q(correction_of__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.event_type}"


class ChainHead(models.Model):
    """The tip of one agent's chain; locking this row serialises appends per agent."""

    agent = models.OneToOneField(
        Agent, on_delete=models.PROTECT, primary_key=True, related_name="+"
    )
    last_seq = models.BigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default=GENESIS_HASH)

    def __str__(self) -> str:
        return f"{self.agent_id} @ {self.last_seq}"


class Tombstone(models.Model):
    """What is left of a purged event: which, when, why, and its hashes (kept in the event)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    event = models.OneToOneField(Event, on_delete=models.PROTECT, related_name="tombstone")
    reason = models.CharField(max_length=500)
    requested_by = models.CharField(max_length=200, blank=True, default="")
    purge_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The ledger event recording the purge (one for every event a purge took).",
    )
    created_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"tombstone of {self.event_id}"


class Source(models.Model):
    """A document held as evidence (DESIGN §5: documents are sources, not episodes)."""

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="+")
    title = models.CharField(max_length=500)
    uri = models.CharField(max_length=2000, blank=True, default="")
    content_hash = models.CharField(max_length=64, help_text="SHA-256 of the document's content.")
    content = models.TextField(
        blank=True, default="", help_text="The text, when the service holds it."
    )
    media_type = models.CharField(max_length=100, blank=True, default="text/plain")
    source_event = models.ForeignKey(
        Event,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The ledger event that registered it.",
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "content_hash"], name="ledger_source_content_uniq"
            ),
            models.CheckConstraint(
                condition=models.Q(content_hash__regex=r"^[0-9a-f]{64}$"),
                name="ledger_source_hash_hex",
            ),
        ]

    def __str__(self) -> str:
        return self.title
