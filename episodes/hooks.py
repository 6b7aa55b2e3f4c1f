"""The episodes app's ledger listener: a source registered with content gets chunked."""

from __future__ import annotations

from ledger.hooks import Committed

from .tasks import chunk_source


def events_committed(committed: Committed) -> None:
    """Queue chunking for sources just registered with content.

    A query only for a commit that registered a source, for the sources those
    events wrote; a source chunked in the same transaction — by source_ingest —
    is skipped.
    """
    from .services import SOURCE_REGISTERED

    event_ids = committed.ids_of(SOURCE_REGISTERED)
    if not event_ids:
        return
    from .selectors import sources_registered_unchunked

    for source_id in sources_registered_unchunked(agent_id=committed.agent_id, event_ids=event_ids):
        chunk_source.delay(str(source_id))
