"""Assertion helpers shared by the ledger, API and tenancy tests."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection

from ledger.models import ChainHead, Event, Source, Tombstone
from piper.api.models import IdempotencyRecord


def error(code: str, message: str, details: Any = None) -> dict:
    """The body every API error has."""
    return {"error": {"code": code, "message": message, "details": details or {}}}


def ledger_state() -> dict:
    """Everything a write could touch. Bad-input tests assert it did not change."""
    return {
        "events": list(
            Event.objects.order_by("agent_id", "seq").values_list("id", "hash", "redacted_at")
        ),
        "heads": list(
            ChainHead.objects.order_by("agent_id").values_list("agent_id", "last_seq", "last_hash")
        ),
        "idempotency": IdempotencyRecord.objects.count(),
        "sources": Source.objects.count(),
        "tombstones": Tombstone.objects.count(),
    }


def db_now() -> datetime:
    """The transaction's start time."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def db_clock() -> datetime:
    """The database clock right now (record times fall between the two)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]
