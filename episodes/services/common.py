"""What the episode services share: the ledger event types they write and read,
the size limits of what an episode or a source carries, and the checks on them."""

from __future__ import annotations

from typing import Any

from piper import safety

EPISODE_RECORDED = "episode.recorded"
EPISODES_COLLAPSED = "episode.collapsed"
EPISODE_RETRACTED = "episode.retracted"
EPISODE_CORRECTED = "episode.corrected"
# The events whose payload is a whole episode, each the raw event of one row.
EPISODE_ROW_EVENTS = (EPISODE_RECORDED, EPISODE_CORRECTED)
MAX_REASON_CHARS = 2000
SOURCE_REGISTERED = "source.registered"  # written by ledger.services.source_register
SOURCE_CHUNKED = "source.chunked"
MAX_BATCH = 1000
MAX_TEXT_CHARS = 20_000
MAX_ENTITIES = 100
MAX_ENTITY_CHARS = 300
MAX_RELATED = 100
# Column sizes of the labels an episode carries (Episode / ledger Event).
MAX_LABEL_CHARS = {
    "actor": 200,
    "environment": 200,
    "session_id": 200,
    "goal_id": 200,
    "task_id": 200,
    "source_ref": 500,
}
MAX_TITLE_CHARS = 500
# The registration event carries the uri as its source_ref (500 characters).
MAX_URI_CHARS = 500
MAX_MEDIA_TYPE_CHARS = 100
MAX_CONTENT_CHARS = 5_000_000


def text_error(value: Any, limit: int) -> str | None:
    """Why `value` cannot be stored as a text column of at most `limit` characters."""
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > limit:
        return f"at most {limit:,} characters"
    if "\x00" in value:
        return "must not contain NUL (\\u0000) characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (no lone surrogates)"
    return None


def safety_payload(verdict: safety.Verdict) -> dict[str, Any]:
    """What a payload records of a verdict, under "safety": only a flagged one (an
    event without the key was screened clean, or written before screening existed)."""
    return {"safety": verdict.as_dict()} if verdict.instruction_like else {}


def instruction_like(payload: dict[str, Any]) -> bool:
    """Whether an event's payload (or one chunk's entry) records an instruction-like verdict."""
    return bool((payload.get("safety") or {}).get("instruction_like"))
