"""What PostgreSQL itself enforces on the ledger (migration 0002), whatever the writer does."""

from datetime import UTC, datetime

import pytest
from django.db import IntegrityError, connection, transaction

from ledger.hashing import event_hash
from ledger.models import GENESIS_HASH, Event
from ledger.selectors import chain_verify
from ledger.services import PURGE_SETTING, event_redact
from ledger.tests.factories import EventFactory
from ledger.tests.helpers import db_clock, db_now
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def run_sql(sql: str, params=()) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


class TestAppendOnly:
    def test_raw_update_is_refused(self):
        event = EventFactory(payload={"x": 1})
        with pytest.raises(
            IntegrityError, match=r"ledger_event is append-only: UPDATE of event .* refused"
        ):
            run_sql(
                "UPDATE ledger_event SET payload = '{\"x\": 2}'::jsonb WHERE id = %s", [event.pk]
            )
        assert Event.objects.get(pk=event.pk).payload == {"x": 1}

    def test_raw_delete_is_refused(self):
        event = EventFactory()
        with pytest.raises(
            IntegrityError, match=f"ledger_event is append-only: DELETE of event {event.pk} refused"
        ):
            run_sql("DELETE FROM ledger_event WHERE id = %s", [event.pk])
        assert Event.objects.filter(pk=event.pk).exists()

    def test_orm_update_and_delete_are_refused(self):
        event = EventFactory()
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
            Event.objects.filter(pk=event.pk).update(actor="someone else")
        with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
            Event.objects.filter(pk=event.pk).delete()
        assert Event.objects.get(pk=event.pk).actor == ""

    def test_purge_setting_still_refuses_any_other_column(self):
        event = EventFactory(payload={"x": 1})
        for assignment in [
            "event_type = 'other.type'",
            "actor = 'forger'",
            "hash = repeat('a', 64)",
            "payload_hash = repeat('b', 64)",
            "occurred_at = now() - interval '1 day'",
            "confidence = 0.5",
        ]:
            with pytest.raises(
                IntegrityError,
                match=f"ledger purge may only redact the payload of event {event.pk}",
            ):
                run_sql(
                    f"SELECT set_config('{PURGE_SETTING}', 'on', true); "
                    f"UPDATE ledger_event SET payload = '{{}}'::jsonb, redacted_at = now(), {assignment} WHERE id = %s",
                    [event.pk],
                )
        row = Event.objects.get(pk=event.pk)
        assert (row.payload, row.redacted_at, row.hash) == ({"x": 1}, None, event.hash)

    def test_purge_setting_requires_stamping_redacted_at(self):
        event = EventFactory(payload={"x": 1})
        with pytest.raises(IntegrityError, match="ledger purge may only redact the payload"):
            run_sql(
                f"SELECT set_config('{PURGE_SETTING}', 'on', true); "
                "UPDATE ledger_event SET payload = '{}'::jsonb WHERE id = %s",
                [event.pk],
            )

    def test_purge_setting_only_empties_the_payload(self):
        event = EventFactory(payload={"x": 1})
        with pytest.raises(
            IntegrityError, match=f"ledger purge may only redact the payload of event {event.pk}"
        ):
            run_sql(
                f"SELECT set_config('{PURGE_SETTING}', 'on', true); "
                "UPDATE ledger_event SET payload = '{\"x\": 2}'::jsonb, redacted_at = now() WHERE id = %s",
                [event.pk],
            )
        assert Event.objects.get(pk=event.pk).payload == {"x": 1}

    def test_purge_setting_cannot_touch_a_purged_event_again(self):
        agent = AgentFactory()
        target = EventFactory(agent=agent, payload={"x": 1})
        event_redact(agent=agent, event_id=target.pk, reason="erasure")
        redacted_at = Event.objects.get(pk=target.pk).redacted_at
        for assignment in [
            "payload = '{\"x\": 1}'::jsonb",
            "redacted_at = now() + interval '1 day'",
        ]:
            with pytest.raises(IntegrityError, match="ledger purge may only redact the payload"):
                run_sql(
                    f"SELECT set_config('{PURGE_SETTING}', 'on', true); "
                    f"UPDATE ledger_event SET {assignment} WHERE id = %s",
                    [target.pk],
                )
        row = Event.objects.get(pk=target.pk)
        assert (row.payload, row.redacted_at) == ({}, redacted_at)

    def test_purge_setting_is_transaction_local(self):
        agent = AgentFactory()
        target = EventFactory(agent=agent, payload={"x": 1})
        event_redact(agent=agent, event_id=target.pk, reason="erasure")
        with pytest.raises(IntegrityError, match="append-only"):
            run_sql("UPDATE ledger_event SET payload = '{}'::jsonb WHERE id = %s", [target.pk])

    def test_tombstoned_event_cannot_be_deleted_either(self):
        agent = AgentFactory()
        target = EventFactory(agent=agent, payload={"x": 1})
        event_redact(agent=agent, event_id=target.pk, reason="erasure")
        with pytest.raises(IntegrityError, match="append-only"):
            run_sql(
                f"SELECT set_config('{PURGE_SETTING}', 'on', true); DELETE FROM ledger_event WHERE id = %s",
                [target.pk],
            )


class TestTombstonesAppendOnly:
    """Migration 0004: the record that a purge happened cannot be edited away."""

    @pytest.mark.parametrize(
        ("sql", "operation"),
        [
            ("UPDATE ledger_tombstone SET reason = 'nothing happened' WHERE id = %s", "UPDATE"),
            ("DELETE FROM ledger_tombstone WHERE id = %s", "DELETE"),
        ],
    )
    def test_update_and_delete_are_refused(self, sql, operation):
        agent = AgentFactory()
        target = EventFactory(agent=agent, payload={"x": 1})
        tombstone = event_redact(agent=agent, event_id=target.pk, reason="erasure")
        with pytest.raises(
            IntegrityError,
            match=f"ledger_tombstone is append-only: {operation} of tombstone {tombstone.pk} refused",
        ):
            run_sql(sql, [tombstone.pk])
        tombstone.refresh_from_db()
        assert tombstone.reason == "erasure"


class TestRecordedAt:
    def test_orm_insert_with_a_bogus_recorded_at_gets_the_database_time(self):
        agent = AgentFactory()
        bogus = datetime(1999, 12, 31, 23, 59, tzinfo=UTC)
        event = Event(
            agent=agent,
            seq=1,
            event_type="a.b",
            occurred_at=bogus,
            recorded_at=bogus,
            source_type="operator",
            authority="operator",
            confidence=1.0,
            payload={},
            payload_hash="0" * 64,
            prev_hash=GENESIS_HASH,
            hash="0" * 64,
        )
        event.save(force_insert=True)
        event.refresh_from_db()
        assert event.recorded_at == db_now()
        assert event.occurred_at == bogus

    def test_raw_insert_with_a_bogus_recorded_at_gets_the_database_time(self):
        agent = AgentFactory()
        run_sql(
            "INSERT INTO ledger_event (id, agent_id, seq, event_type, occurred_at, recorded_at, session_id, actor, "
            "source_type, source_ref, authority, confidence, payload, payload_hash, prev_hash, hash, "
            "privacy_class, retention_class) VALUES (gen_random_uuid(), %s, 1, 'a.b', now(), "
            "'2000-01-01T00:00:00Z', '', '', 'operator', '', 'operator', 1, '{}', %s, %s, %s, 'internal', 'standard')",
            [agent.pk, "0" * 64, GENESIS_HASH, "0" * 64],
        )
        assert Event.objects.get(agent=agent).recorded_at == db_now()

    def test_service_hash_covers_the_time_the_database_stored(self):
        agent = AgentFactory()
        event = EventFactory(agent=agent)
        row = Event.objects.get(pk=event.pk)
        # The database clock when the chain lock was granted: within this transaction.
        assert row.recorded_at == event.recorded_at
        assert db_now() <= row.recorded_at <= db_clock()
        assert event_hash(row) == row.hash

    def test_a_writer_that_waited_for_the_lock_records_after_the_one_it_waited_for(self):
        agent = AgentFactory()
        first = EventFactory(agent=agent)
        second = EventFactory(agent=agent)  # same transaction, later lock
        assert first.recorded_at < second.recorded_at


class TestSameAgentReferences:
    @pytest.mark.parametrize("field", ["parent_event_id", "correction_of_id"])
    def test_orm_insert_pointing_at_another_agents_event_is_refused(self, field):
        theirs = EventFactory()
        mine = AgentFactory()
        event = Event(
            agent=mine,
            seq=1,
            event_type="a.b",
            occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
            source_type="operator",
            authority="operator",
            confidence=1.0,
            payload={},
            payload_hash="0" * 64,
            prev_hash=GENESIS_HASH,
            hash="0" * 64,
            **{field: theirs.pk},
        )
        constraint = {
            "parent_event_id": "ledger_event_parent_same_agent",
            "correction_of_id": "ledger_event_correction_same_agent",
        }[field]
        with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
            event.save(force_insert=True)
        assert not Event.objects.filter(agent=mine).exists()

    def test_raw_sql_pointing_at_another_agents_event_is_refused(self):
        theirs = EventFactory()
        mine = AgentFactory()
        with pytest.raises(IntegrityError, match="ledger_event_parent_same_agent"):
            run_sql(
                "INSERT INTO ledger_event (id, agent_id, seq, event_type, occurred_at, session_id, actor, "
                "source_type, source_ref, authority, confidence, payload, payload_hash, prev_hash, hash, "
                "privacy_class, retention_class, parent_event_id) VALUES (gen_random_uuid(), %s, 1, 'a.b', now(), "
                "'', '', 'operator', '', 'operator', 1, '{}', %s, %s, %s, 'internal', 'standard', %s)",
                [mine.pk, "0" * 64, GENESIS_HASH, "0" * 64, theirs.pk],
            )

    def test_same_agent_reference_is_accepted(self):
        agent = AgentFactory()
        parent = EventFactory(agent=agent)
        child = EventFactory(agent=agent, parent_event_id=parent.pk)
        assert Event.objects.get(pk=child.pk).parent_event_id == parent.pk
        assert chain_verify(agent=agent).ok


@pytest.mark.parametrize(
    ("column", "value", "constraint"),
    [
        ("seq", 0, "ledger_event_seq_positive"),
        ("confidence", 1.5, "ledger_event_confidence_0_1"),
        ("source_type", "rumour", "ledger_event_source_type"),
        ("authority", "god", "ledger_event_authority"),
        ("privacy_class", "secret", "ledger_event_privacy_class"),
        ("retention_class", "forever", "ledger_event_retention_class"),
    ],
)
def test_check_constraints(column, value, constraint):
    fields = dict(
        agent=AgentFactory(),
        seq=1,
        event_type="a.b",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        source_type="operator",
        authority="operator",
        confidence=1.0,
        payload={},
        payload_hash="0" * 64,
        prev_hash=GENESIS_HASH,
        hash="0" * 64,
    )
    fields[column] = value
    with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
        Event(**fields).save(force_insert=True)


def test_seq_is_unique_per_agent():
    event = EventFactory()
    duplicate = Event(
        agent_id=event.agent_id,
        seq=event.seq,
        event_type="a.b",
        occurred_at=event.occurred_at,
        source_type="operator",
        authority="operator",
        confidence=1.0,
        payload={},
        payload_hash="0" * 64,
        prev_hash=GENESIS_HASH,
        hash="0" * 64,
    )
    with pytest.raises(IntegrityError, match="ledger_event_agent_seq_uniq"), transaction.atomic():
        duplicate.save(force_insert=True)
