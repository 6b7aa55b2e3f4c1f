"""What a key may read: evidence above its clearance is withheld (DESIGN §3, §8).

Every memory's privacy class is its ledger event's (the claim of a fact, an
episode's record, a document's registration, an intention's creation, a skill
version's definition; a path is as private as its most private fact). An API
key reads up to its clearance (PrivacyClass order: public < internal <
personal < sensitive); recall drops the rest before anything is returned or
traced, and says how many it withheld.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from ledger.models import Event, Source
from piper.provenance import PRIVACY_ORDER

from .results import Evidence


def _events_of(item: Evidence) -> list[uuid.UUID]:
    obj = item.obj
    if item.kind in ("fact", "state"):  # state: a working-state checkpoint
        return [obj.source_event_id]
    if item.kind == "episode":
        return [obj.raw_event_id]
    if item.kind == "intention":
        return [obj.source_event_id]
    if item.kind == "skill":
        return [obj.version.source_event_id]
    if item.kind == "path":
        return [fact.source_event_id for fact in obj.facts]
    return []  # chunks: by their source, below


def privacy_classes(evidence: Sequence[Evidence]) -> dict[int, str]:
    """Each evidence's privacy class (by its position), in two queries."""
    wanted: dict[int, list[uuid.UUID]] = {i: _events_of(e) for i, e in enumerate(evidence)}
    sources = {e.obj.source_id for e in evidence if e.kind == "chunk"}
    registered = (
        dict(Source.objects.filter(pk__in=sources).values_list("pk", "source_event_id"))
        if sources
        else {}
    )
    for i, item in enumerate(evidence):
        if item.kind == "chunk" and item.obj.source_id in registered:
            wanted[i] = [registered[item.obj.source_id]]
    ids = {pk for events in wanted.values() for pk in events}
    classes = (
        dict(Event.objects.filter(pk__in=ids).order_by().values_list("pk", "privacy_class"))
        if ids
        else {}
    )
    return {
        i: max(
            (classes.get(pk, "internal") for pk in events),
            key=PRIVACY_ORDER.index,
            default="internal",
        )
        for i, events in wanted.items()
    }


def cleared(evidence: Sequence[Evidence], clearance: str | None) -> tuple[list[Evidence], int]:
    """The evidence a key of `clearance` may read (each marked with its class in
    memory_status), and how many were withheld. None: no limit (in-process callers)."""
    if not evidence:
        return [], 0
    classes = privacy_classes(evidence)
    limit = PRIVACY_ORDER.index(clearance) if clearance else len(PRIVACY_ORDER) - 1
    kept = []
    for i, item in enumerate(evidence):
        item.memory_status["privacy_class"] = classes[i]
        if PRIVACY_ORDER.index(classes[i]) <= limit:
            kept.append(item)
    return kept, len(evidence) - len(kept)
