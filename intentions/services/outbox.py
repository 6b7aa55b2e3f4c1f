"""Webhook delivery of firings and escalations: an outbox with retries and an
HMAC signature.

The message is written in the firing's (or escalation's) transaction; delivery happens after
commit — outside any transaction, under a lease (deliver) — and is retried
with exponential backoff. The receiver verifies
`X-Piper-Signature: sha256=<hex HMAC of the body with the agent's secret>` and
de-duplicates on `X-Piper-Delivery` (the firing's or escalation's id): delivery
is at least once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

import httpx
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from ..models import OutboxMessage, Webhook

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
TIMEOUT_SECONDS = 5
# A claim outlives the delivery task's hard time limit (40 s), so a live worker's
# claim does not lapse under it; one that lapses means the worker is gone.
LEASE_SECONDS = 60


def webhook_set(*, agent, url: str, secret: str) -> Webhook:
    """Deliver this agent's firings to `url` (replacing any earlier webhook).
    The ledger records where, never the secret."""
    from ledger.services import event_append
    from piper.provenance import SourceType

    with transaction.atomic():
        hook, _ = Webhook.objects.update_or_create(
            agent=agent, defaults={"url": url, "secret": secret, "is_active": True}
        )
        event_append(
            agent=agent,
            event_type="webhook.set",
            payload={"url": url},
            source_type=SourceType.OPERATOR,
        )
    return hook


def webhook_delete(*, agent) -> bool:
    """Stop delivering; messages not yet delivered are given up. False if none was set."""
    from ledger.services import event_append
    from piper.provenance import SourceType

    with transaction.atomic():
        hook = Webhook.objects.select_for_update().filter(agent=agent).first()
        if hook is None:
            return False
        OutboxMessage.objects.filter(agent=agent, status=OutboxMessage.Status.PENDING).update(
            status=OutboxMessage.Status.FAILED, last_error="webhook removed", claimed_until=None
        )
        hook.delete()
        event_append(
            agent=agent,
            event_type="webhook.deleted",
            payload={"url": hook.url},
            source_type=SourceType.OPERATOR,
        )
    return True


def sign(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class _Claim:
    """One delivery in flight: what to POST, and the attempt number that fences its outcome."""

    message_id: uuid.UUID
    attempt: int
    url: str
    secret: str
    body: bytes
    delivery_id: str


def deliver(*, message_id: uuid.UUID) -> str:
    """Try one delivery: claim the message, POST it, record the outcome.

    No transaction or row lock is held during the HTTP call: the claim and the
    outcome are two short transactions. The claim is a lease (claimed_until)
    and the attempt number it took; the outcome is written only if that
    attempt is still the message's latest and it is still pending. A worker
    that dies mid-call leaves the claim to lapse, and deliver_due tries the
    message again — at least once, always with the same X-Piper-Delivery id.

    Returns "delivered", "pending" (to be retried after a backoff), "failed"
    (given up, or no active webhook), "skipped" (not pending, or another
    delivery holds the claim) or "superseded" (this claim lapsed and another
    delivery took the message, or the webhook was removed meanwhile: the
    outcome of this call is not recorded). Safe to run twice. Do not call it
    inside a transaction: that would hold the lock through the call again."""
    claim = _claim(message_id)
    if isinstance(claim, str):
        return claim
    try:
        response = httpx.post(
            claim.url,
            content=claim.body,
            headers={
                "Content-Type": "application/json",
                "X-Piper-Signature": sign(claim.secret, claim.body),
                "X-Piper-Delivery": claim.delivery_id,
            },
            timeout=TIMEOUT_SECONDS,
        )
        ok = 200 <= response.status_code < 300
        error = "" if ok else f"HTTP {response.status_code}"
    except httpx.HTTPError as exc:
        ok, error = False, f"{type(exc).__name__}: {exc}"
    return _record(claim, ok=ok, error=error)


def _claim(message_id: uuid.UUID) -> _Claim | str:
    """Take the message for one attempt, or say why not ("skipped", "failed")."""
    now = timezone.now()
    with transaction.atomic():
        message = (
            OutboxMessage.objects.select_for_update(skip_locked=True)
            .filter(pk=message_id, status=OutboxMessage.Status.PENDING)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
            .first()
        )
        if message is None:
            return "skipped"
        hook = Webhook.objects.filter(agent_id=message.agent_id, is_active=True).first()
        if hook is None:
            error = "no active webhook"
        elif message.attempts >= MAX_ATTEMPTS:  # the last one's worker died before its outcome
            error = f"no outcome recorded for attempt {message.attempts} of {MAX_ATTEMPTS}"
        else:
            error = None
        if error is not None:
            message.status, message.last_error = OutboxMessage.Status.FAILED, error
            message.claimed_until = None
            message.save(update_fields=["status", "last_error", "claimed_until"])
            return "failed"
        message.attempts += 1
        message.claimed_until = now + timedelta(seconds=LEASE_SECONDS)
        message.save(update_fields=["attempts", "claimed_until"])
    return _Claim(
        message_id=message.pk,
        attempt=message.attempts,
        url=hook.url,
        secret=hook.secret,
        body=json.dumps(message.payload, separators=(",", ":"), sort_keys=True).encode(),
        delivery_id=message.delivery_id,
    )


def _record(claim: _Claim, *, ok: bool, error: str) -> str:
    """The outcome of `claim`'s attempt, written only if the claim is still the latest."""
    now = timezone.now()
    if ok:
        status = OutboxMessage.Status.DELIVERED
        fields = {"delivered_at": now, "last_error": ""}
    elif claim.attempt >= MAX_ATTEMPTS:
        status, fields = OutboxMessage.Status.FAILED, {"last_error": error}
    else:
        status = OutboxMessage.Status.PENDING
        fields = {
            "last_error": error,
            "next_attempt_at": now + timedelta(seconds=2**claim.attempt),
        }
    changed = OutboxMessage.objects.filter(
        pk=claim.message_id, status=OutboxMessage.Status.PENDING, attempts=claim.attempt
    ).update(status=status, claimed_until=None, **fields)
    return status if changed else "superseded"


def deliver_due(*, limit: int = 200) -> int:
    """Retry what is due (celery-beat), including messages whose claim lapsed (a
    worker died mid-call); returns how many were tried."""
    now = timezone.now()
    ids = list(
        OutboxMessage.objects.filter(status=OutboxMessage.Status.PENDING, next_attempt_at__lte=now)
        .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    for message_id in ids:
        deliver(message_id=message_id)
    return len(ids)
