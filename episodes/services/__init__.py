"""Every write to episodic memory, by topic: recording.py (episodes from their
ledger events), corrections.py (retraction and correction), duplicates.py,
use_marks.py (recall feedback), sources.py (documents and their chunks),
embedding.py (vectors, derived data), rebuild.py (replay of the ledger);
common.py and queueing.py hold what they share. rebuild imports the topics,
corrections imports recording, the rest only common and queueing
(pyproject.toml's import-linter contract). The names below are the package's
API: callers import from `episodes.services`, not from its modules."""

from .common import (
    EPISODE_CORRECTED,
    EPISODE_RECORDED,
    EPISODE_RETRACTED,
    EPISODE_ROW_EVENTS,
    EPISODES_COLLAPSED,
    MAX_BATCH,
    MAX_CONTENT_CHARS,
    MAX_ENTITIES,
    MAX_ENTITY_CHARS,
    MAX_LABEL_CHARS,
    MAX_MEDIA_TYPE_CHARS,
    MAX_REASON_CHARS,
    MAX_RELATED,
    MAX_TEXT_CHARS,
    MAX_TITLE_CHARS,
    MAX_URI_CHARS,
    SOURCE_CHUNKED,
    SOURCE_REGISTERED,
)
from .corrections import episode_correct, episode_retract
from .duplicates import episodes_collapse
from .embedding import (
    chunk_embeddings_store,
    chunks_embed,
    episode_embeddings_store,
    episodes_embed,
)
from .rebuild import rebuild_projection
from .recording import (
    EpisodeDraft,
    episode_from_event,
    episode_payload,
    episode_record,
    episodes_record,
    normalise_entities,
)
from .sources import source_chunk, source_ingest
from .use_marks import USE_OUTCOMES, episodes_mark_used

__all__ = [
    "EPISODES_COLLAPSED",
    "EPISODE_CORRECTED",
    "EPISODE_RECORDED",
    "EPISODE_RETRACTED",
    "EPISODE_ROW_EVENTS",
    "MAX_BATCH",
    "MAX_CONTENT_CHARS",
    "MAX_ENTITIES",
    "MAX_ENTITY_CHARS",
    "MAX_LABEL_CHARS",
    "MAX_MEDIA_TYPE_CHARS",
    "MAX_REASON_CHARS",
    "MAX_RELATED",
    "MAX_TEXT_CHARS",
    "MAX_TITLE_CHARS",
    "MAX_URI_CHARS",
    "SOURCE_CHUNKED",
    "SOURCE_REGISTERED",
    "USE_OUTCOMES",
    "EpisodeDraft",
    "chunk_embeddings_store",
    "chunks_embed",
    "episode_correct",
    "episode_embeddings_store",
    "episode_from_event",
    "episode_payload",
    "episode_record",
    "episode_retract",
    "episodes_collapse",
    "episodes_embed",
    "episodes_mark_used",
    "episodes_record",
    "normalise_entities",
    "rebuild_projection",
    "source_chunk",
    "source_ingest",
]
