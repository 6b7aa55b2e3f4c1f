"""Webhook delivery of firings: an outbox with retries and an HMAC signature.

The message is written in the firing's transaction; delivery happens after
commit and is retried with exponential backoff. The receiver verifies
`X-Piper-Signature: sha256=<hex HMAC of the body with the agent's secret>` and
de-duplicates on `X-Piper-Delivery` (the firing id): delivery is at least once.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import uuid
from datetime import timedelta

import httpx
from django.db import transaction
from django.utils import timezone

from ..models import OutboxMessage, Webhook

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
TIMEOUT_SECONDS = 5


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
            status=OutboxMessage.Status.FAILED, last_error="webhook removed"
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


def deliver(*, message_id: uuid.UUID) -> str:
    """Try one delivery. Safe to run twice: a delivered message is left alone."""
    with transaction.atomic():
        message = (
            OutboxMessage.objects.select_for_update(skip_locked=True)
            .filter(pk=message_id, status=OutboxMessage.Status.PENDING)
            .first()
        )
        if message is None:
            return "skipped"
        hook = Webhook.objects.filter(agent_id=message.agent_id, is_active=True).first()
        if hook is None:
            message.status, message.last_error = OutboxMessage.Status.FAILED, "no active webhook"
            message.save(update_fields=["status", "last_error"])
            return "failed"
        body = json.dumps(message.payload, separators=(",", ":"), sort_keys=True).encode()
        message.attempts += 1
        try:
            response = httpx.post(
                hook.url,
                content=body,
                headers={
                    "Content-Type": "application/json",
                    "X-Piper-Signature": sign(hook.secret, body),
                    "X-Piper-Delivery": str(message.firing_id),
                },
                timeout=TIMEOUT_SECONDS,
            )
            ok = 200 <= response.status_code < 300
            error = "" if ok else f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            ok, error = False, f"{type(exc).__name__}: {exc}"
        now = timezone.now()
        if ok:
            message.status, message.delivered_at, message.last_error = (
                OutboxMessage.Status.DELIVERED,
                now,
                "",
            )
        elif message.attempts >= MAX_ATTEMPTS:
            message.status, message.last_error = OutboxMessage.Status.FAILED, error
        else:
            message.last_error = error
            message.next_attempt_at = now + timedelta(seconds=2**message.attempts)
        message.save(
            update_fields=["status", "attempts", "delivered_at", "last_error", "next_attempt_at"]
        )
        return message.status


def deliver_due(*, limit: int = 200) -> int:
    """Retry what is due (celery-beat); returns how many were tried."""
    ids = list(
        OutboxMessage.objects.filter(
            status=OutboxMessage.Status.PENDING, next_attempt_at__lte=timezone.now()
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    for message_id in ids:
        deliver(message_id=message_id)
    return len(ids)
