"""The hash chain's definition, shared by the writer and the verifier."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from piper.canonical import canonical_json, json_hash, sha256_hex

# Every field an event's hash covers. The payload is covered through
# payload_hash, so a purge can redact the payload and keep the chain intact.
CHAINED_FIELDS = (
    "id",
    "agent_id",
    "seq",
    "event_type",
    "occurred_at",
    "recorded_at",
    "session_id",
    "actor",
    "source_type",
    "source_ref",
    "authority",
    "confidence",
    "payload_hash",
    "parent_event_id",
    "correction_of_id",
    "privacy_class",
    "retention_class",
    "prev_hash",
)


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if value is None or isinstance(value, str | int | float):
        return value
    return str(value)  # UUID


def payload_hash(payload: Any) -> str:
    return json_hash(payload)


def event_hash(event: Any) -> str:
    """SHA-256 over CHAINED_FIELDS of an Event (or anything with those attributes)."""
    return sha256_hex(
        canonical_json({name: _plain(getattr(event, name)) for name in CHAINED_FIELDS})
    )
