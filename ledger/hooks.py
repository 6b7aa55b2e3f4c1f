"""Apps above the ledger react to new evidence without the ledger knowing them.

An app registers a callback in its AppConfig.ready(); after every commit that
appended events, each callback gets (agent_id, first_seq, last_seq,
event_types): the seq range of one append and the types it held, so a
listener that cares about some types decides without a query. Callbacks run
after commit, so they see the events, and should only enqueue work.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

logger = logging.getLogger(__name__)

Callback = Callable[[uuid.UUID, int, int, frozenset[str]], None]
_callbacks: list[Callback] = []


def on_events_committed(callback: Callback) -> Callback:
    if callback not in _callbacks:
        _callbacks.append(callback)
    return callback


def notify(agent_id: uuid.UUID, first_seq: int, last_seq: int, event_types: frozenset[str]) -> None:
    for callback in list(_callbacks):
        try:
            callback(agent_id, first_seq, last_seq, event_types)
        except Exception:  # a listener's failure must not fail the write, already committed
            logger.exception("events-committed listener %r failed", callback)
