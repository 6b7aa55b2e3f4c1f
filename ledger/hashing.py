"""The hash chain's definition, shared by the writer and the verifier.

Two schemes, told apart by an event's `hash_version` (itself chained):

* 1, the first events: `payload_hash` is SHA-256 of the canonical payload,
  and the chain covers the labels (actor, session_id, source_ref) as written.
  A purge can empty the payload, but the labels stay.
* 2, every event written since: `payload_hash` is an HMAC of the canonical
  payload *and* the labels, keyed by a random per-event salt kept beside it.
  The chain covers payload_hash, not the labels. A purge empties payload,
  labels and salt: the hashes still verify, and without the salt nobody can
  confirm a guess of what was erased (a short payload's plain SHA-256 can be
  found by trying the likely texts).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime
from typing import Any

from piper.canonical import canonical_json, json_hash, sha256_hex

HASH_VERSION = 2
# The event's words besides its payload that a purge removes with it (scheme 2).
LABELS = ("actor", "session_id", "source_ref")

# Every field an event's hash covers, by scheme (canonical JSON sorts them).
# The payload is covered through payload_hash, so a purge can redact the
# payload and keep the chain intact.
_COMMON = (
    "id",
    "agent_id",
    "seq",
    "event_type",
    "occurred_at",
    "recorded_at",
    "source_type",
    "authority",
    "confidence",
    "payload_hash",
    "parent_event_id",
    "correction_of_id",
    "privacy_class",
    "retention_class",
    "prev_hash",
)
CHAINED_FIELDS = {1: (*_COMMON, *LABELS), 2: (*_COMMON, "hash_version")}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if value is None or isinstance(value, str | int | float):
        return value
    return str(value)  # UUID


def new_salt() -> str:
    return secrets.token_hex(16)


def payload_hash(payload: Any, *, salt: str = "", labels: dict[str, str] | None = None) -> str:
    """Scheme 1 (no salt): SHA-256 of the canonical payload. Scheme 2: HMAC-SHA-256,
    keyed by the salt, of the canonical {"payload": …, and the labels}."""
    if not salt:
        return json_hash(payload)
    content = canonical_json({"payload": payload, **(labels or {})})
    return hmac.new(bytes.fromhex(salt), content.encode(), hashlib.sha256).hexdigest()


def event_payload_hash(event: Any) -> str:
    """payload_hash as an event's own payload, labels and salt give it."""
    if getattr(event, "hash_version", 1) == 1:
        return payload_hash(event.payload)
    return payload_hash(
        event.payload,
        salt=event.payload_salt,
        labels={name: getattr(event, name) for name in LABELS},
    )


def event_hash(event: Any) -> str:
    """SHA-256 over the chained fields of an Event (or anything with those attributes)."""
    fields = CHAINED_FIELDS[getattr(event, "hash_version", 1)]
    return sha256_hex(canonical_json({name: _plain(getattr(event, name)) for name in fields}))
