"""One agent's memories of every kind, made through each app's services, for erasure tests.

Maria Lopez's story: episodes that name her (one links to another), a document
about her, facts about her and about Bob, a working state and an intention
that quote an episode, a recall that returned her episode with feedback on it.
Two agents may hold the very same words (isolation tests).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from episodes.models import Episode
from episodes.services import EpisodeDraft, episodes_embed, episodes_record, source_ingest
from facts.fact_texts import fact_texts_refresh
from facts.tests.factories import at, claim
from intentions.services.lifecycle import IntentionInput, intention_create
from intentions.services.state import thread_get_or_create, working_state_write
from ledger.models import Source
from piper.provenance import Authority
from recall.services.dispatch import recall
from recall.services.feedback import recall_feedback

MOVED = "Maria Lopez moved the payroll export to the Lisbon cluster on Friday night"
BACKUP = "The nightly backup of the billing database finished in twelve minutes"
VERIFIED = "Follow-up: the payroll export on the Lisbon cluster was verified by the auditors"
DOCUMENT = (
    "Onboarding notes for Maria Lopez. She prefers morning standups and reviews "
    "payroll changes herself. Her badge number is 7741-ALPHA and her desk is on floor nine."
)
US = Authority.USER_STATEMENT


@dataclass
class World:
    agent: object
    moved: Episode
    backup: Episode
    verified: Episode
    source: Source
    thread: object
    intention: object
    trace_id: object


def build(agent, *, embed: bool = True, with_recall: bool = True) -> World:
    moved, backup = episodes_record(
        agent=agent,
        drafts=[
            EpisodeDraft(
                occurred_at=datetime(2026, 11, 6, 23, 0, tzinfo=UTC),
                summary=MOVED,
                actor="maria",
                session_id="payroll-1",
                entities=["Maria Lopez", "payroll export"],
            ),
            EpisodeDraft(
                occurred_at=datetime(2026, 11, 7, 3, 0, tzinfo=UTC),
                summary=BACKUP,
                actor="backup-bot",
                session_id="nightly",
            ),
        ],
    )
    [verified] = episodes_record(
        agent=agent,
        drafts=[
            EpisodeDraft(
                occurred_at=datetime(2026, 11, 9, 10, 0, tzinfo=UTC),
                summary=VERIFIED,
                actor="auditor",
                session_id="audit",
                related_ids=[moved.pk],
            )
        ],
    )
    source, _ = source_ingest(agent=agent, title="Maria Lopez onboarding", content=DOCUMENT)
    claim(agent, "Maria Lopez", "lives_in", "Lisbon", at(2024), authority=US)
    claim(agent, "Maria Lopez", "lives_in", "Porto", at(2025), authority=US)
    claim(agent, "Bob", "lives_in", "Oslo", at(2024), authority=US)
    fact_texts_refresh(agent_id=agent.pk, embed="now" if embed else "never")
    if embed:
        episodes_embed(episode_ids=[moved.pk, backup.pk, verified.pk])
    thread, _ = thread_get_or_create(agent=agent, key="payroll")
    working_state_write(
        agent=agent,
        thread=thread,
        based_on=0,
        state={"goal": "close the payroll migration", "last_observation": MOVED},
    )
    intention = intention_create(
        agent=agent,
        data=IntentionInput(
            description=f"Tell finance: {MOVED}",
            trigger_type="manual",
        ),
    )
    trace_id = None
    if with_recall:
        result = recall(
            agent=agent,
            query="Where did Maria Lopez move the payroll export?",
            route="what_happened",
        )
        trace_id = result.trace.pk
        returned = [e.id for e in result.evidence]
        recall_feedback(
            agent=agent,
            trace_id=trace_id,
            used=returned[:1],
            outcome="success",
        )
    return World(agent, moved, backup, verified, source, thread, intention, trace_id)
