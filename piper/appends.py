"""Which ledger events a piece of work appended.

The idempotency store keeps, beside each answer, the ids of the events the
write appended, so an erasure of those events can find the stored answer and
refuse to replay it. The ledger reports its appends here (it depends on the
core, not the other way round); a caller collects them around its work.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_collected: ContextVar[list[uuid.UUID] | None] = ContextVar("piper_appends", default=None)


@contextmanager
def collecting() -> Iterator[list[uuid.UUID]]:
    """Collect the ids of the events appended inside the block ."""
    ids: list[uuid.UUID] = []
    token = _collected.set(ids)
    try:
        yield ids
    finally:
        _collected.reset(token)


def note(event_ids: Iterable[uuid.UUID]) -> None:
    """Called by the ledger with the ids it appended; a no-op when nobody collects."""
    ids = _collected.get()
    if ids is not None:
        ids.extend(event_ids)
