"""Stored answers for the Idempotency-Key header."""

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models.functions import Now

from piper.tenancy.models import Agent


class IdempotencyRecord(models.Model):
    """The first answer to a write sent with an Idempotency-Key.

    A retry with the same key and the same request gets this answer back and
    writes nothing; the same key with a different request is refused (422).
    The row is written in the same transaction as the write it answers, so a
    failed write leaves no record and the key can be used again. When an
    erasure takes an event the write appended, the answer is dropped and the
    row marked erased: a retry is refused (410), never replayed or run again.
    """

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    request_fingerprint = models.CharField(
        max_length=64,
        help_text="HMAC-SHA-256 (keyed by the secret key) of method, path and JSON body.",
    )
    response_status = models.PositiveSmallIntegerField(null=True)
    response_body = models.JSONField(null=True)
    event_ids = ArrayField(
        models.UUIDField(),
        default=list,
        blank=True,
        help_text="The ledger events the write appended.",
    )
    erased_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When an erasure took the write's events: the answer is gone, and kept "
        "past the time-to-live so a retry is refused rather than run again.",
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "key"], name="idempotency_key_unique_per_agent"
            ),
        ]
        indexes = [models.Index(fields=["created_at"], name="idempotency_created_idx")]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.key}"
