"""The episodes app's ledger listener: a source registered with content gets chunked."""

from __future__ import annotations

import uuid

from .tasks import chunk_source


def events_committed(
    agent_id: uuid.UUID, first_seq: int, last_seq: int, event_types: frozenset[str]
) -> None:
    """Queue chunking for sources just registered with content.

    A query only for a commit that registered a source; a source chunked in the
    same transaction — by source_ingest — is skipped.
    """
    from .services import SOURCE_REGISTERED

    if SOURCE_REGISTERED not in event_types:
        return
    from .selectors import sources_registered_unchunked

    for source_id in sources_registered_unchunked(
        agent_id=agent_id, first_seq=first_seq, last_seq=last_seq
    ):
        chunk_source.delay(str(source_id))
