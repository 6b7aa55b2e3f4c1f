"""ledger.selectors: scoped reads and the chain verifier."""

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from ledger.models import Event
from ledger.selectors import (
    PAYLOAD_ALTERED,
    ChainBreak,
    chain_verify,
    event_get,
    event_list,
    source_get,
    source_list,
)
from ledger.services import EventDraft, event_redact, events_append
from ledger.tests.factories import EventFactory, SourceFactory
from ledger.tests.tampering import behind_the_triggers_back
from piper.errors import NotFound
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

EVENT_ALTERED = "hash does not match the event's fields (event altered)"


@pytest.fixture
def chain():
    """An agent with five events (seq 1..5), and another agent with its own chain."""
    agent = AgentFactory(name="verified")
    events = events_append(
        agent=agent, drafts=[EventDraft(event_type="a.b", payload={"n": n}) for n in range(1, 6)]
    )
    events_append(agent=AgentFactory(name="bystander"), drafts=[EventDraft(event_type="a.b")])
    return agent, events


class TestChainVerify:
    def test_clean_chain(self, chain):
        agent, _ = chain
        report = chain_verify(agent=agent)
        assert (report.ok, report.first_break, report.events_checked) == (True, None, 5)
        assert (report.agent_id, report.agent_name) == (str(agent.pk), "verified")

    def test_empty_chain(self):
        report = chain_verify(agent=AgentFactory())
        assert (report.ok, report.events_checked) == (True, 0)

    def test_small_chunks_walk_the_whole_chain(self, chain):
        agent, _ = chain
        assert chain_verify(agent=agent, chunk_size=2).events_checked == 5

    def test_payload_altered(self, chain):
        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_event SET payload = '{\"n\": 999}'::jsonb WHERE id = %s", [events[2].pk]
        )
        report = chain_verify(agent=agent)
        assert report.first_break == ChainBreak(
            seq=3,
            event_id=str(events[2].pk),
            reason=PAYLOAD_ALTERED[2],
        )
        assert report.events_checked == 3

    def test_hash_altered(self, chain):
        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_event SET hash = repeat('f', 64) WHERE id = %s", [events[1].pk]
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=2,
            event_id=str(events[1].pk),
            reason="hash does not match the event's fields (event altered)",
        )

    @pytest.mark.parametrize(
        ("assignment", "reason"),
        [
            # Labels are covered by the salted payload_hash (scheme 2).
            ("actor = 'forger'", PAYLOAD_ALTERED[2]),
            ("session_id = 'other'", PAYLOAD_ALTERED[2]),
            ("source_ref = 'elsewhere'", PAYLOAD_ALTERED[2]),
            ("event_type = 'other.type'", EVENT_ALTERED),
            ("occurred_at = occurred_at - interval '1 second'", EVENT_ALTERED),
            ("authority = 'operator'", EVENT_ALTERED),
            ("confidence = 0.5", EVENT_ALTERED),
            ("hash_version = 1", PAYLOAD_ALTERED[1]),
            # A forger who rehashes the payload without the salt is caught by the
            # payload check; one who also drops the salt, by the event's hash.
            (
                "payload = '{\"n\": 999}'::jsonb, payload_hash = encode(sha256('{\"n\":999}'::bytea), 'hex')",
                PAYLOAD_ALTERED[2],
            ),
        ],
    )
    def test_any_hashed_field_altered(self, chain, assignment, reason):
        agent, events = chain
        behind_the_triggers_back(
            f"UPDATE ledger_event SET {assignment} WHERE id = %s", [events[3].pk]
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=4, event_id=str(events[3].pk), reason=reason
        )

    def test_prev_hash_altered(self, chain):
        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_event SET prev_hash = repeat('0', 64) WHERE id = %s", [events[4].pk]
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=5,
            event_id=str(events[4].pk),
            reason="prev_hash does not match the previous event's hash",
        )

    def test_event_deleted_from_the_middle(self, chain):
        agent, events = chain
        behind_the_triggers_back("DELETE FROM ledger_event WHERE id = %s", [events[2].pk])
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=4, event_id=str(events[3].pk), reason="seq 4 where 3 was expected (missing event)"
        )

    def test_last_event_deleted(self, chain):
        agent, events = chain
        behind_the_triggers_back("DELETE FROM ledger_event WHERE id = %s", [events[4].pk])
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=5,
            event_id="",
            reason="chain head says seq 5 but the chain ends at 4 (events removed)",
        )

    def test_an_event_written_past_the_head_is_detected(self, chain):
        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_chainhead SET last_seq = 4, last_hash = %s WHERE agent_id = %s",
            [events[3].hash, agent.pk],
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=5,
            event_id=str(events[4].pk),
            reason="seq 5 lies past the chain head (4): not appended through the chain",
        )

    def test_a_redaction_without_tombstone_is_reported_before_a_later_break(self, chain):
        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_event SET payload = '{}'::jsonb, redacted_at = now() WHERE id = %s",
            [events[0].pk],
        )
        behind_the_triggers_back(
            "UPDATE ledger_event SET prev_hash = repeat('0', 64) WHERE id = %s", [events[3].pk]
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=1,
            event_id=str(events[0].pk),
            reason="marked redacted without a purge (payload altered or no tombstone)",
        )

    def test_legitimate_purge_verifies(self, chain):
        agent, events = chain
        event_redact(agent=agent, event_id=events[0].pk, reason="erasure")
        report = chain_verify(agent=agent)
        assert (report.ok, report.events_checked) == (True, 6)

    def test_redaction_without_the_purge_path_is_detected(self, chain):
        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_event SET payload = '{}'::jsonb, redacted_at = now() WHERE id = %s",
            [events[1].pk],
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=2,
            event_id=str(events[1].pk),
            reason="marked redacted without a purge (payload altered or no tombstone)",
        )

    def test_payload_of_a_purged_event_rewritten(self, chain):
        agent, events = chain
        event_redact(agent=agent, event_id=events[1].pk, reason="erasure")
        behind_the_triggers_back(
            "UPDATE ledger_event SET payload = '{\"n\": 2}'::jsonb WHERE id = %s", [events[1].pk]
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=2,
            event_id=str(events[1].pk),
            reason="marked redacted without a purge (payload altered or no tombstone)",
        )

    def test_other_agents_are_unaffected(self, chain):
        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_event SET payload = '{}'::jsonb WHERE id = %s", [events[0].pk]
        )
        assert not chain_verify(agent=agent).ok
        bystander = Event.objects.exclude(agent=agent).get().agent
        assert chain_verify(agent=bystander).ok


class TestEventList:
    def test_scoped_to_the_agent(self):
        mine = EventFactory()
        EventFactory()
        assert list(event_list(agent=mine.agent)) == [mine]

    def test_time_bounds_after_inclusive_before_exclusive(self):
        agent = AgentFactory()
        t = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
        early, at, late = (
            EventFactory(agent=agent, occurred_at=t - timedelta(hours=1)),
            EventFactory(agent=agent, occurred_at=t),
            EventFactory(agent=agent, occurred_at=t + timedelta(hours=1)),
        )
        assert list(event_list(agent=agent, occurred_after=t).order_by("seq")) == [at, late]
        assert list(event_list(agent=agent, occurred_before=t).order_by("seq")) == [early]
        # Each append records when it got the chain lock: three distinct record times.
        assert early.recorded_at < at.recorded_at < late.recorded_at
        recorded = at.recorded_at
        after = event_list(agent=agent, recorded_after=recorded).order_by("seq")
        assert list(after) == [at, late]
        assert list(event_list(agent=agent, recorded_before=recorded)) == [early]
        just_after = recorded + timedelta(microseconds=1)
        assert event_list(agent=agent, recorded_before=just_after).count() == 2
        assert list(event_list(agent=agent, recorded_after=just_after)) == [late]


class TestGet:
    def test_event_get_of_another_agents_event_is_not_found(self):
        theirs = EventFactory()
        mine = AgentFactory()
        with pytest.raises(NotFound, match=f"event {theirs.pk} not found"):
            event_get(agent=mine, event_id=theirs.pk)
        assert event_get(agent=theirs.agent, event_id=theirs.pk) == theirs

    def test_source_list_is_newest_first(self):
        agent = AgentFactory()
        first = SourceFactory(agent=agent)
        time.sleep(0.002)  # ids are time-ordered to the millisecond
        second = SourceFactory(agent=agent)
        assert list(source_list(agent=agent)) == [second, first]

    def test_source_get_and_list_are_scoped(self):
        theirs = SourceFactory()
        mine = SourceFactory()
        assert list(source_list(agent=mine.agent)) == [mine]
        with pytest.raises(NotFound, match=f"source {theirs.pk} not found"):
            source_get(agent=mine.agent, source_id=theirs.pk)
        assert source_get(agent=theirs.agent, source_id=theirs.pk) == theirs


class TestWhereABrokenLinkPoints:
    """A forger who recomputes a row's hash breaks the link after it: the verifier
    points at the row itself."""

    def test_a_row_rewritten_with_its_hash_recomputed(self, chain):
        from ledger.hashing import event_hash, event_payload_hash
        from ledger.selectors import PREVIOUS_REWRITTEN

        agent, events = chain
        event = events[2]
        event.payload = {"n": 999}
        event.payload_hash = event_payload_hash(event)
        event.hash = event_hash(event)
        behind_the_triggers_back(
            "UPDATE ledger_event SET payload = '{\"n\": 999}'::jsonb, payload_hash = %s, "
            "hash = %s WHERE id = %s",
            [event.payload_hash, event.hash, event.pk],
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=3, event_id=str(event.pk), reason=PREVIOUS_REWRITTEN
        )

    def test_a_row_inserted_with_a_valid_hash(self, chain):
        from ledger.hashing import event_hash, event_payload_hash, new_salt
        from ledger.selectors import PREVIOUS_INSERTED

        agent, events = chain
        behind_the_triggers_back(
            "UPDATE ledger_event SET seq = seq + 100 WHERE agent_id = %s AND seq >= 3", [agent.pk]
        )
        behind_the_triggers_back(
            "UPDATE ledger_event SET seq = seq - 99 WHERE agent_id = %s AND seq >= 100", [agent.pk]
        )
        forged = Event(
            agent=agent,
            seq=3,
            event_type="a.b",
            occurred_at=events[1].occurred_at,
            recorded_at=events[1].recorded_at,
            source_type=events[1].source_type,
            authority=events[1].authority,
            confidence=1.0,
            payload={"forged": True},
            payload_salt=new_salt(),
            hash_version=2,
            prev_hash=events[1].hash,
        )
        forged.payload_hash = event_payload_hash(forged)
        forged.hash = event_hash(forged)
        with transaction.atomic(), connection.cursor() as cursor:
            # Triggers off, as a forger would have them (one stamps the record time).
            cursor.execute("SELECT set_config('session_replication_role', 'replica', true)")
            Event.objects.bulk_create([forged])
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=3, event_id=str(forged.pk), reason=PREVIOUS_INSERTED
        )

    def test_the_last_row_rewritten_with_its_hash_recomputed(self, chain):
        from ledger.hashing import event_hash

        agent, events = chain
        event = events[4]
        event.confidence = 0.5
        behind_the_triggers_back(
            "UPDATE ledger_event SET confidence = 0.5, hash = %s WHERE id = %s",
            [event_hash(event), event.pk],
        )
        report = chain_verify(agent=agent)
        assert (report.first_break.seq, report.first_break.event_id) == (5, str(event.pk))
        assert "this event was rewritten" in report.first_break.reason

    def test_a_tombstone_must_be_named_by_its_purge(self, chain):
        agent, events = chain
        real = event_redact(agent=agent, event_id=events[0].pk, reason="erasure")
        behind_the_triggers_back(
            "UPDATE ledger_event SET payload = '{}'::jsonb, payload_salt = '', actor = '', "
            "session_id = '', source_ref = '', redacted_at = now() WHERE id = %s",
            [events[3].pk],
        )
        behind_the_triggers_back(
            "INSERT INTO ledger_tombstone (id, agent_id, event_id, reason, requested_by, "
            "purge_event_id, created_at) VALUES (gen_random_uuid(), %s, %s, 'x', '', %s, now())",
            [agent.pk, events[3].pk, real.purge_event_id],
        )
        assert chain_verify(agent=agent).first_break == ChainBreak(
            seq=4,
            event_id=str(events[3].pk),
            reason="marked redacted without a purge (payload altered or no tombstone)",
        )
