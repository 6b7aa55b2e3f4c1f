"""Apps above the ledger react to new evidence without the ledger knowing them.

Each app keeps its listener in its own `hooks.py` and registers it in its
AppConfig.ready(). After every commit that appended events, each listener gets
one `Committed`: the agent, the seq range of that append, and the id and type
of every event in it — so a listener decides, and finds the rows those events
wrote, without reading the ledger back. Listeners run after commit, so they
see the events, and should only enqueue work.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Committed:
    """One committed append: the agent's events first_seq..last_seq."""

    agent_id: uuid.UUID
    first_seq: int
    last_seq: int
    events: tuple[tuple[uuid.UUID, str], ...]  # (id, event_type) of each, in seq order

    @cached_property
    def event_types(self) -> frozenset[str]:
        return frozenset(event_type for _, event_type in self.events)

    def ids_of(self, event_type: str) -> list[uuid.UUID]:
        """The ids of the events of this type, in seq order."""
        return [pk for pk, t in self.events if t == event_type]


Callback = Callable[[Committed], None]
_callbacks: list[Callback] = []


def on_events_committed(callback: Callback) -> Callback:
    if callback not in _callbacks:
        _callbacks.append(callback)
    return callback


def notify(committed: Committed) -> None:
    for callback in list(_callbacks):
        try:
            callback(committed)
        except Exception:  # a listener's failure must not fail the write, already committed
            logger.exception("events-committed listener %r failed", callback)
