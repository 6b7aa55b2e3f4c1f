"""What the facts services share: provenance, the size limits, and the one way a
write appends its events and applies them, run again when a concurrent writer's
row got in first."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import IntegrityError

from ledger.services import EventDraft, events_append
from piper import safety
from piper.provenance import PrivacyClass, RetentionClass, SourceType
from piper.tenancy.models import Agent
from piper.transactions import RaceLost, run_write

from .. import projection as p

MAX_NAME = 300
MAX_BATCH = 1000
MISSING: Any = object()
T = TypeVar("T")


@dataclass(frozen=True)
class Provenance:
    """Who claims it, how they know, how sure they are (DESIGN §3)."""

    source_type: str = SourceType.AGENT_INFERENCE
    source_ref: str = ""
    authority: str | None = None
    confidence: float = 1.0
    actor: str = ""
    session_id: str = ""
    privacy_class: str = PrivacyClass.INTERNAL
    retention_class: str = RetentionClass.STANDARD

    def draft(self, event_type: str, payload: dict) -> EventDraft:
        return EventDraft(
            event_type=event_type,
            payload=payload,
            source_type=self.source_type,
            source_ref=self.source_ref,
            authority=self.authority,
            confidence=self.confidence,
            actor=self.actor,
            session_id=self.session_id,
            privacy_class=self.privacy_class,
            retention_class=self.retention_class,
        )


OPERATOR = Provenance(source_type=SourceType.OPERATOR)

EntityRef = uuid.UUID | str


def append_and_apply(
    *,
    agent: Agent,
    drafts: Sequence[EventDraft],
    preload: dict[tuple[str, str], datetime] | None = None,
) -> list[p.Applied]:
    """Append the events, apply them through one store, write the net result.
    `preload` names the pairs the events touch, each with the earliest valid
    time asserted for it (older history need not be read)."""
    events = events_append(agent=agent, drafts=drafts)
    store = p.Store()
    if preload:
        store.preload_from(
            agent.pk, {(uuid.UUID(s), uuid.UUID(pr)): at for (s, pr), at in preload.items()}
        )
    applied = [p.apply(event, store) for event in events]
    store.flush()
    return applied


# Constraints a concurrent writer can make us meet; the write run again
# re-plans and then sees the other's row (its version, or the entity it just named).
RETRYABLE_CONSTRAINTS = (
    "facts_one_believed_value_at_a_time",
    "facts_alias_unique_ci",
    "facts_predicate_unique",
)


def run_facts_write(write: Callable[[], T]) -> T:
    """`write` as one write (piper.transactions.run_write); meeting one of
    RETRYABLE_CONSTRAINTS is a lost race, which the outermost run_write runs again
    (and answers Conflict `concurrent_write` if it keeps losing)."""

    def checked() -> T:
        try:
            return write()
        except IntegrityError as exc:
            if not any(name in str(exc) for name in RETRYABLE_CONSTRAINTS):
                raise  # a bug, not a race: let it surface
            raise RaceLost(
                "another write to the same fact kept getting there first; retry the request"
            ) from exc

    return run_write(checked)


def safety_payload(value: Any) -> dict:
    """The safety verdict on a claimed value, for its event's payload (only when flagged):
    the projection reads it from there, so a replay decides as the write did."""
    verdict = safety.screen_value(value)
    return {"safety": verdict.as_dict()} if verdict.instruction_like else {}


def a_or_an(word: str) -> str:
    # 'a user_statement', 'an integer': u mostly sounds like 'you' here.
    return f"{'an' if word[:1] in 'aeio' else 'a'} {word}"
