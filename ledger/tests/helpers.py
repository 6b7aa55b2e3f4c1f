"""Assertion helpers shared by the ledger, API and tenancy tests."""

from __future__ import annotations

from typing import Any

from ledger.models import ChainHead, Event, Source, Tombstone
from piper.api.models import IdempotencyRecord


def error(code: str, message: str, details: Any = None) -> dict:
    """The body every API error has."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


def ledger_state() -> dict:
    """Everything a write could touch. Bad-input tests assert it did not change."""
    return {
        "events": list(Event.objects.order_by("agent_id", "seq").values_list("id", "hash")),
        "heads": list(
            ChainHead.objects.order_by("agent_id").values_list("agent_id", "last_seq", "last_hash")
        ),
        "idempotency": IdempotencyRecord.objects.count(),
        "sources": Source.objects.count(),
        "tombstones": Tombstone.objects.count(),
    }
