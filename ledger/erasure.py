"""What an erasure carries from app to app while it removes one set of events.

The ledger knows nothing of the apps built on it; the forgetting app drives an
erasure through each of them (DESIGN §8). They share this scope: the events
being erased (the apps may add the events that must go with them), the ids of
every row removed, and the erased words and vectors that the residue check
looks for afterwards. Nothing here is stored: the receipt keeps counts and
ids, never the erased content.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models.expressions import RawSQL

from piper.lookups import uuid_array
from piper.tenancy.models import Agent

# The erased words the residue check searches for: at most this many, the
# longest first, each cut to its first TEXT_PROBE_CHARS characters.
MAX_TEXT_PROBES = 40
TEXT_PROBE_CHARS = 120
# Shorter strings are too common to mean anything when found again ("done", "ok").
MIN_TEXT_PROBE_CHARS = 8
MAX_VECTOR_PROBES = 20
EVENTS_TABLE = "erasure_events"  # temporary, per transaction (stage_events)
_WORDY = re.compile(r"[^\W\d_]{3,}")
# Identifiers, times and enum values are not content: 'success', 'text/plain',
# an id or a timestamp found again proves nothing.
_NOT_CONTENT = re.compile(
    r"[a-z0-9_./:-]+"
    r"|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    r"|\d{4}-\d{2}-\d{2}([T ][0-9:.]+)?(Z|[+-]\d{2}:?\d{2})?"
)


@dataclass
class ErasureScope:
    agent: Agent
    event_ids: set[uuid.UUID]
    # Projection name -> ids of the rows removed (or rewritten), in removal order.
    removed: dict[str, list[Any]] = field(default_factory=dict)
    # Erased words and vectors, taken before the rows and payloads go.
    texts: list[str] = field(default_factory=list)
    vectors: list[tuple[str, list[float]]] = field(default_factory=list)
    # Events appended by the erasure itself (e.g. scrubbed copies), never erased by it.
    own_event_ids: set[uuid.UUID] = field(default_factory=set)
    # The actors whose every episode was erased (a name is too short to be a
    # text probe, and caches and search filters hold names).
    actors: set[str] = field(default_factory=set)
    # Erased fact values and names, however short ('Porto'): searched only where
    # they are rendered (fact texts), where surviving facts can vouch for them.
    values: set[str] = field(default_factory=set)
    # What an app learned while erasing that its residue check needs (e.g. the
    # fact pairs the erased events touched), by the app's own keys.
    notes: dict[str, Any] = field(default_factory=dict)

    def stage_events(self) -> None:
        """Put the erased events' ids in a temporary table of this transaction, so
        every app's statements join against it (erased_events()) instead of each
        carrying thousands of ids."""
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {EVENTS_TABLE} (id uuid PRIMARY KEY) "
                "ON COMMIT DROP"
            )
            cursor.execute(f"DELETE FROM {EVENTS_TABLE}")
            cursor.execute(
                f"INSERT INTO {EVENTS_TABLE} SELECT unnest(%s::uuid[])",
                [uuid_array(self.event_ids)],
            )
        self._staged = True

    def add_events(self, ids: Iterable[uuid.UUID]) -> None:
        """More events to erase, found while erasing (a quote's event, feedback)."""
        from django.db import connection

        new = {i for i in ids if i is not None} - self.event_ids
        self.event_ids |= new
        if new and getattr(self, "_staged", False):
            with connection.cursor() as cursor:
                cursor.execute(
                    f"INSERT INTO {EVENTS_TABLE} SELECT unnest(%s::uuid[]) ON CONFLICT DO NOTHING",
                    [uuid_array(new)],
                )

    @staticmethod
    def erased_events() -> RawSQL:
        """The staged event ids, as a subquery: `source_event_id__in=scope.erased_events()`."""
        return RawSQL(f"SELECT id FROM {EVENTS_TABLE}", ())

    def note_removed(self, projection: str, ids: Iterable[Any]) -> int:
        ids = list(ids)
        self.removed.setdefault(projection, []).extend(ids)
        return len(ids)

    def removed_ids(self, *projections: str) -> list[Any]:
        return [i for name in projections for i in self.removed.get(name, [])]

    def all_removed_ids(self) -> set[str]:
        """Every erased id, as text: events and rows of every projection."""
        ids = {str(i) for i in self.event_ids}
        for values in self.removed.values():
            ids.update(str(v) for v in values)
        return ids

    def add_texts(self, texts: Iterable[str]) -> None:
        seen = set(self.texts)
        for text in texts:
            probe = probe_text(text)
            if probe and probe not in seen:
                self.texts.append(probe)
                seen.add(probe)

    def add_vector(self, table: str, vector: Any) -> None:
        if vector is not None and len(self.vectors) < MAX_VECTOR_PROBES:
            self.vectors.append((table, [float(x) for x in vector]))

    def text_probes(self) -> list[str]:
        """The erased strings worth searching for: the longest first."""
        return sorted(self.texts, key=len, reverse=True)[:MAX_TEXT_PROBES]


def probe_text(text: Any) -> str | None:
    """The part of an erased string the residue check searches for, or None
    when it is too short or holds no words to be told apart from others."""
    if not isinstance(text, str):
        return None
    text = " ".join(text.split())
    if len(text) < MIN_TEXT_PROBE_CHARS or not _WORDY.search(text) or _NOT_CONTENT.fullmatch(text):
        return None
    return text[:TEXT_PROBE_CHARS]


def payload_strings(value: Any) -> Iterable[str]:
    """Every string inside a payload (keys excepted)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from payload_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from payload_strings(item)


# The guards of the apps' history tables (skill versions, validations and
# executions, working-state versions) refuse every change except while this
# transaction-local setting is on: only an erasure sets it, and only for its
# own transaction.
ERASURE_SETTING = "piper.erasure"


def allow_erasure_in_this_transaction() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, 'on', true)", [ERASURE_SETTING])


def finding(projection: str, check: str, qs) -> dict:
    """One check of a residue search: how many rows of `qs` there are, and the first ids."""
    sample = [str(pk) for pk in qs.order_by().values_list("pk", flat=True)[:10]]
    found = len(sample) if len(sample) < 10 else qs.count()
    return {"projection": projection, "check": check, "found": found, "sample": sample}
