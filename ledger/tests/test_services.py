"""ledger.services: the only writer of events, sources and tombstones."""

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ledger.hashing import event_hash, event_payload_hash, payload_hash
from ledger.models import GENESIS_HASH, ChainHead, Event, Source, Tombstone
from ledger.selectors import chain_verify
from ledger.services import (
    EventDraft,
    event_append,
    event_redact,
    events_append,
    events_redact,
    source_register,
)
from ledger.tests.factories import EventFactory
from ledger.tests.helpers import db_clock, db_now, ledger_state
from ledger.tests.tampering import as_scheme_1
from piper.canonical import sha256_hex
from piper.errors import Conflict, InvalidInput, NotFound, Unprocessable
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

EVENT_TYPE_RULE = "use lower-case words joined by '.', ':', '/' or '-', e.g. 'tool.called' (at most 100 characters)"


class TestEventsAppend:
    def test_chain_runs_from_genesis_with_linked_hashes(self):
        agent = AgentFactory()
        events_append(
            agent=agent, drafts=[EventDraft(event_type="a.one"), EventDraft(event_type="a.two")]
        )
        event_append(agent=agent, event_type="a.three", payload={"k": [1, 2.5, "x", None, True]})

        stored = list(Event.objects.filter(agent=agent).order_by("seq"))
        assert [e.seq for e in stored] == [1, 2, 3]
        assert [e.event_type for e in stored] == ["a.one", "a.two", "a.three"]
        assert stored[0].prev_hash == GENESIS_HASH == "0" * 64
        assert [e.prev_hash for e in stored[1:]] == [e.hash for e in stored[:-1]]
        assert [event_hash(e) for e in stored] == [e.hash for e in stored]
        assert stored[2].payload == {"k": [1, 2.5, "x", None, True]}
        assert stored[2].payload_hash == payload_hash(
            {"k": [1, 2.5, "x", None, True]},
            salt=stored[2].payload_salt,
            labels={"actor": "", "session_id": "", "source_ref": ""},
        )
        assert len({e.payload_salt for e in stored}) == 3  # a salt of its own each
        head = ChainHead.objects.get(agent=agent)
        assert (head.last_seq, head.last_hash) == (3, stored[2].hash)
        assert chain_verify(agent=agent).ok

    def test_returned_events_equal_the_stored_rows(self):
        agent = AgentFactory()
        returned = events_append(
            agent=agent, drafts=[EventDraft(event_type="a.b", payload={"n": i}) for i in range(3)]
        )
        stored = {e.pk: e for e in Event.objects.filter(agent=agent)}
        for event in returned:
            row = stored[event.pk]
            assert (
                row.seq,
                row.hash,
                row.prev_hash,
                row.recorded_at,
                row.occurred_at,
                row.payload,
            ) == (
                event.seq,
                event.hash,
                event.prev_hash,
                event.recorded_at,
                event.occurred_at,
                event.payload,
            )

    def test_defaults(self):
        agent = AgentFactory()
        event = event_append(agent=agent, event_type="a.b")
        event.refresh_from_db()
        assert event.source_type == "agent_inference"
        assert event.authority == "agent_inference"
        assert event.confidence == 1.0
        assert event.payload == {}
        assert event.occurred_at == event.recorded_at
        assert db_now() <= event.recorded_at <= db_clock()
        assert (event.session_id, event.actor, event.source_ref) == ("", "", "")
        assert (event.privacy_class, event.retention_class) == ("internal", "standard")
        assert (event.parent_event_id, event.correction_of_id, event.redacted_at) == (
            None,
            None,
            None,
        )

    @pytest.mark.parametrize(
        ("source_type", "authority"),
        [
            ("operator", "operator"),
            ("observation", "system_observation"),
            ("user_statement", "user_statement"),
            ("tool_result", "tool_result"),
            ("agent_inference", "agent_inference"),
            ("third_party", "third_party"),
            ("document", "third_party"),
        ],
    )
    def test_authority_defaults_from_source_type(self, source_type, authority):
        event = event_append(agent=AgentFactory(), event_type="a.b", source_type=source_type)
        assert Event.objects.get(pk=event.pk).authority == authority

    def test_explicit_authority_wins(self):
        event = event_append(
            agent=AgentFactory(), event_type="a.b", source_type="third_party", authority="operator"
        )
        assert Event.objects.get(pk=event.pk).authority == "operator"

    def test_recorded_at_is_the_database_clock_not_the_writer(self):
        agent = AgentFactory()
        occurred = datetime(2020, 5, 1, 12, 0, tzinfo=UTC)
        event = event_append(agent=agent, event_type="a.b", occurred_at=occurred)
        event.refresh_from_db()
        assert event.occurred_at == occurred
        assert db_now() <= event.recorded_at <= db_clock()

    def test_empty_drafts_write_nothing(self):
        agent = AgentFactory()
        before = ledger_state()
        assert events_append(agent=agent, drafts=[]) == []
        assert ledger_state() == before

    def test_references_to_own_events(self):
        agent = AgentFactory()
        first = event_append(agent=agent, event_type="a.b")
        second = event_append(
            agent=agent, event_type="a.c", parent_event_id=first.pk, correction_of_id=first.pk
        )
        row = Event.objects.get(pk=second.pk)
        assert (row.parent_event_id, row.correction_of_id) == (first.pk, first.pk)
        assert chain_verify(agent=agent).ok

    @pytest.mark.parametrize("field", ["parent_event_id", "correction_of_id"])
    def test_reference_to_another_agents_event_is_unknown(self, field):
        theirs = EventFactory()
        mine = AgentFactory()
        event_append(agent=mine, event_type="a.b")
        before = ledger_state()
        with pytest.raises(Unprocessable) as caught:
            event_append(agent=mine, event_type="a.c", **{field: theirs.pk})
        assert caught.value.code == "unknown_event_reference"
        assert caught.value.message == f"referenced event {theirs.pk} does not exist"
        assert caught.value.details == {"missing_event_ids": [str(theirs.pk)]}
        assert ledger_state() == before

    def test_missing_reference_looks_like_another_agents(self):
        agent = AgentFactory()
        missing = uuid.uuid4()
        with pytest.raises(Unprocessable) as caught:
            event_append(agent=agent, event_type="a.c", parent_event_id=missing)
        assert (caught.value.code, caught.value.message, caught.value.details) == (
            "unknown_event_reference",
            f"referenced event {missing} does not exist",
            {"missing_event_ids": [str(missing)]},
        )

    @pytest.mark.parametrize(
        ("fields", "errors"),
        [
            ({"event_type": "Tool Called"}, {"event_type": [EVENT_TYPE_RULE]}),
            ({"event_type": "tool.called\n"}, {"event_type": [EVENT_TYPE_RULE]}),
            ({"event_type": "a" * 101}, {"event_type": [EVENT_TYPE_RULE]}),
            ({"payload": ["not", "an", "object"]}, {"payload": ["must be a JSON object"]}),
            (
                {"source_type": "rumour"},
                {
                    "source_type": [
                        "must be one of ['user_statement', 'tool_result', 'observation', 'operator', "
                        "'agent_inference', 'third_party', 'document']"
                    ]
                },
            ),
            (
                {"authority": "god"},
                {
                    "authority": [
                        "must be one of ['operator', 'system_observation', 'user_statement', 'tool_result', "
                        "'agent_inference', 'third_party']"
                    ]
                },
            ),
            ({"confidence": 1.01}, {"confidence": ["must be between 0 and 1"]}),
            ({"confidence": -0.1}, {"confidence": ["must be between 0 and 1"]}),
            (
                {"privacy_class": "secret"},
                {
                    "privacy_class": [
                        "must be one of ['public', 'internal', 'personal', 'sensitive']"
                    ]
                },
            ),
            (
                {"retention_class": "forever"},
                {
                    "retention_class": [
                        "must be one of ['ephemeral', 'standard', 'long_term', 'permanent']"
                    ]
                },
            ),
            (
                {"occurred_at": datetime(2026, 1, 1)},
                {"occurred_at": ["must carry a time zone, e.g. 2026-01-31T09:00:00Z"]},
            ),
            (
                {"payload": {"x": float("nan")}},
                {"payload": ["payload.x: numbers must be finite (no NaN or infinity)"]},
            ),
            (
                {"payload": {"a": [1, {"b": float("inf")}]}},
                {"payload": ["payload.a[1].b: numbers must be finite (no NaN or infinity)"]},
            ),
            (
                {"payload": {"x": "a\x00b"}},
                {"payload": ["payload.x: text must not contain NUL (\\u0000) characters"]},
            ),
            (
                {"payload": {"x\x00": 1}},
                {"payload": ["payload: text must not contain NUL (\\u0000) characters"]},
            ),
            (
                {"payload": {"x": "\ud800"}},
                {"payload": ["payload.x: text must be valid Unicode (no lone surrogates)"]},
            ),
        ],
    )
    def test_bad_draft_raises_and_writes_nothing(self, fields, errors):
        agent = AgentFactory()
        event_append(agent=agent, event_type="a.b")
        before = ledger_state()
        draft = {"event_type": "a.b", **fields}
        with pytest.raises(InvalidInput) as caught:
            events_append(agent=agent, drafts=[EventDraft(**draft)])
        name, messages = next(iter(errors.items()))
        assert (caught.value.code, caught.value.message, caught.value.details) == (
            "invalid",
            f"{name}: {messages[0]}",
            errors,
        )
        assert ledger_state() == before

    def test_bad_draft_in_a_batch_names_its_index_and_nothing_is_written(self):
        agent = AgentFactory()
        before = ledger_state()
        drafts = [
            EventDraft(event_type="a.b"),
            EventDraft(event_type="a.b"),
            EventDraft(event_type="BAD", confidence=2.0),
        ]
        with pytest.raises(InvalidInput) as caught:
            events_append(agent=agent, drafts=drafts)
        assert caught.value.message == f"event 2: event_type: {EVENT_TYPE_RULE}"
        assert caught.value.details == {
            "events": {
                "2": {"event_type": [EVENT_TYPE_RULE], "confidence": ["must be between 0 and 1"]}
            }
        }
        assert ledger_state() == before

    @pytest.mark.parametrize(
        ("written", "read_back"),
        [
            (1e16, 10000000000000000),
            (-1.5e20, -150000000000000000000),
            (1e23, 100000000000000000000000),
            (-0.0, 0.0),
            (1e-7, 1e-7),
            (0.1, 0.1),
            (2.5, 2.5),
            (10**30, 10**30),
        ],
    )
    def test_payload_is_hashed_as_postgresql_stores_it(self, written, read_back):
        """jsonb prints numbers without exponents: the hash must cover what a read gives back."""
        agent = AgentFactory()
        event = event_append(
            agent=agent, event_type="a.b", payload={"x": written, "nested": [written]}
        )
        row = Event.objects.get(pk=event.pk)
        assert row.payload == event.payload == {"x": read_back, "nested": [read_back]}
        assert type(row.payload["x"]) is type(read_back)
        assert row.payload_hash == event_payload_hash(row)
        assert chain_verify(agent=agent).ok


class TestEventRedact:
    def test_redacts_payload_and_labels_keeps_hashes_and_leaves_a_tombstone(self):
        agent = AgentFactory()
        target = event_append(
            agent=agent,
            event_type="user.said",
            payload={"text": "my card is 4111"},
            actor="alice@example.com",
            session_id="alice-chat",
            source_ref="msg-17",
        )
        event_append(agent=agent, event_type="a.after")
        tombstone = event_redact(
            agent=agent, event_id=target.pk, reason="GDPR erasure", requested_by="ops@example"
        )

        row = Event.objects.get(pk=target.pk)
        assert (row.payload, row.payload_salt, row.actor, row.session_id, row.source_ref) == (
            {},
            "",
            "",
            "",
            "",
        )
        assert row.redacted_at == db_now()
        assert (row.payload_hash, row.hash, row.prev_hash, row.event_type) == (
            target.payload_hash,
            target.hash,
            target.prev_hash,
            "user.said",
        )
        assert (
            tombstone.agent_id,
            tombstone.event_id,
            tombstone.reason,
            tombstone.requested_by,
        ) == (agent.pk, target.pk, "GDPR erasure", "ops@example")
        purge = Event.objects.get(pk=tombstone.purge_event_id)
        assert (purge.seq, purge.event_type, purge.actor, purge.source_type, purge.authority) == (
            3,
            "ledger.events_redacted",
            "ops@example",
            "operator",
            "operator",
        )
        # Ids, positions and the reason: nothing of what was erased.
        assert purge.payload == {
            "event_ids": [str(target.pk)],
            "seqs": [1],
            "reason": "GDPR erasure",
        }
        report = chain_verify(agent=agent)
        assert (report.ok, report.events_checked) == (True, 3)

    def test_the_kept_hash_confirms_no_guess_of_the_erased_payload(self):
        """A short payload's plain SHA-256 is found by trying the likely texts;
        the salted hash cannot be checked once the salt is gone."""
        agent = AgentFactory()
        target = event_append(agent=agent, event_type="user.said", payload={"answer": "yes"})
        salt = target.payload_salt
        event_redact(agent=agent, event_id=target.pk, reason="erasure")
        row = Event.objects.get(pk=target.pk)
        labels = {"actor": "", "session_id": "", "source_ref": ""}
        guesses = [{"answer": word} for word in ("yes", "no", "maybe")]
        assert row.payload_hash not in {payload_hash(g) for g in guesses}
        assert row.payload_hash not in {payload_hash(g, salt="", labels=labels) for g in guesses}
        # Only the salt, now gone, made it checkable.
        assert row.payload_hash == payload_hash(guesses[0], salt=salt, labels=labels)

    def test_many_events_in_one_purge_one_event_and_a_tombstone_each(self):
        agent = AgentFactory()
        events = events_append(
            agent=agent,
            drafts=[EventDraft(event_type="a.b", payload={"n": n}) for n in range(4)],
        )
        purge = events_redact(
            agent=agent, event_ids=[events[2].pk, events[0].pk], reason="retention"
        )
        assert (purge.purged, purge.skipped) == ([events[0].pk, events[2].pk], 0)
        tombstones = purge.tombstones()
        assert [t.event_id for t in tombstones] == [events[0].pk, events[2].pk]
        assert {t.purge_event_id for t in tombstones} == {purge.purge_event_id}
        purge = Event.objects.get(pk=purge.purge_event_id)
        assert purge.payload == {
            "event_ids": [str(events[0].pk), str(events[2].pk)],
            "seqs": [1, 3],
            "reason": "retention",
        }
        payloads = dict(Event.objects.filter(agent=agent, seq__lte=4).values_list("seq", "payload"))
        assert payloads == {1: {}, 2: {"n": 1}, 3: {}, 4: {"n": 3}}
        assert chain_verify(agent=agent).ok

    def test_a_scheme_1_event_keeps_its_labels_which_its_hash_covers(self):
        """Events written before the salted scheme: the chain covers their labels."""
        agent = AgentFactory()
        target = event_append(agent=agent, event_type="a.b", payload={"x": 1}, actor="bob")
        as_scheme_1(target)
        event_redact(agent=agent, event_id=target.pk, reason="erasure")
        row = Event.objects.get(pk=target.pk)
        assert (row.payload, row.actor, row.hash_version) == ({}, "bob", 1)
        assert chain_verify(agent=agent).ok

    def test_legal_hold_refuses_until_an_operator_lifts_it_with_a_reason(self):
        agent = AgentFactory()
        held = event_append(
            agent=agent, event_type="a.b", payload={"x": 1}, retention_class="permanent"
        )
        free = event_append(agent=agent, event_type="a.b", payload={"x": 2})
        before = ledger_state()
        with pytest.raises(Conflict) as caught:
            events_redact(agent=agent, event_ids=[free.pk, held.pk], reason="erasure")
        assert (caught.value.code, caught.value.details) == (
            "legal_hold",
            {"held_event_ids": [str(held.pk)], "held": 1},
        )
        assert ledger_state() == before
        done = events_redact(
            agent=agent,
            event_ids=[free.pk, held.pk],
            reason="erasure",
            legal_hold_lifted="court order 42 ended the hold",
        )
        purge = Event.objects.get(pk=done.purge_event_id)
        assert purge.payload["legal_hold_lifted"] == {
            "reason": "court order 42 ended the hold",
            "event_ids": [str(held.pk)],
        }
        assert Event.objects.get(pk=held.pk).payload == {}

    def test_second_purge_is_a_no_op_returning_the_first_tombstone(self):
        agent = AgentFactory()
        target = event_append(agent=agent, event_type="a.b", payload={"x": 1})
        first = event_redact(agent=agent, event_id=target.pk, reason="erasure")
        before = ledger_state()
        second = event_redact(agent=agent, event_id=target.pk, reason="another reason")
        assert second.pk == first.pk
        assert second.reason == "erasure"
        assert ledger_state() == before
        assert Tombstone.objects.filter(event=target).count() == 1

    def test_needs_a_reason(self):
        agent = AgentFactory()
        target = event_append(agent=agent, event_type="a.b", payload={"x": 1})
        before = ledger_state()
        with pytest.raises(InvalidInput) as caught:
            event_redact(agent=agent, event_id=target.pk, reason="  ")
        assert (caught.value.message, caught.value.details) == (
            "a purge needs a reason",
            {"reason": ["required"]},
        )
        assert ledger_state() == before
        assert Event.objects.get(pk=target.pk).payload == {"x": 1}

    def test_another_agents_event_is_not_found(self):
        theirs = EventFactory(payload={"x": 1})
        mine = AgentFactory()
        before = ledger_state()
        with pytest.raises(NotFound) as caught:
            event_redact(agent=mine, event_id=theirs.pk, reason="erasure")
        assert caught.value.message == f"event {theirs.pk} not found"
        assert caught.value.details == {"missing_event_ids": [str(theirs.pk)]}
        assert ledger_state() == before
        assert Event.objects.get(pk=theirs.pk).payload == {"x": 1}


class TestSourceRegister:
    def test_with_content_computes_the_hash_and_records_an_event(self):
        agent = AgentFactory()
        source, created = source_register(
            agent=agent,
            title="Runbook",
            uri="https://example.com/runbook",
            content="Restart the worker.",
            actor="reader",
        )
        assert created is True
        assert source.content_hash == sha256_hex("Restart the worker.")
        event = Event.objects.get(pk=source.source_event_id)
        assert (
            event.agent_id,
            event.event_type,
            event.source_type,
            event.authority,
            event.source_ref,
            event.actor,
        ) == (
            agent.pk,
            "source.registered",
            "document",
            "third_party",
            "https://example.com/runbook",
            "reader",
        )
        assert event.payload == {
            "title": "Runbook",
            "uri": "https://example.com/runbook",
            "content_hash": sha256_hex("Restart the worker."),
            "media_type": "text/plain",
        }

    def test_same_content_returns_the_first_source_and_writes_nothing(self):
        agent = AgentFactory()
        first, _ = source_register(agent=agent, title="A", content="same text")
        before = ledger_state()
        again, created = source_register(agent=agent, title="B", content="same text")
        assert (again.pk, created) == (first.pk, False)
        assert ledger_state() == before

    def test_by_hash_only(self):
        digest = sha256_hex("held elsewhere")
        source, created = source_register(
            agent=AgentFactory(), title="External", content_hash=digest
        )
        assert (source.content_hash, source.content, created) == (digest, "", True)

    def test_a_uri_longer_than_an_event_source_ref_is_kept_whole_on_the_source(self):
        uri = "https://example.com/" + "a" * 1500
        source, created = source_register(agent=AgentFactory(), title="Long", content="x", uri=uri)
        assert (created, source.uri, source.source_event.payload["uri"]) == (True, uri, uri)
        assert source.source_event.source_ref == ""

    def test_same_content_for_two_agents_is_two_sources(self):
        a, b = AgentFactory(), AgentFactory()
        first, _ = source_register(agent=a, title="A", content="shared")
        second, created = source_register(agent=b, title="B", content="shared")
        assert created is True
        assert second.pk != first.pk
        assert Source.objects.count() == 2

    @pytest.mark.parametrize(
        ("fields", "message", "details"),
        [
            (
                {"content": "text", "content_hash": "0" * 64},
                "content_hash does not match the SHA-256 of content",
                {"content_hash": [f"expected {sha256_hex('text')}"]},
            ),
            (
                {},
                "send the document's content, or its content_hash as 64 lower-case hex characters",
                {"content_hash": ["required when content is empty"]},
            ),
            (
                {"content_hash": "A" * 64},
                "send the document's content, or its content_hash as 64 lower-case hex characters",
                {"content_hash": ["required when content is empty"]},
            ),
        ],
    )
    def test_bad_input_writes_nothing(self, fields, message, details):
        agent = AgentFactory()
        before = ledger_state()
        with pytest.raises(InvalidInput) as caught:
            source_register(agent=agent, title="T", **fields)
        assert (caught.value.message, caught.value.details) == (message, details)
        assert ledger_state() == before


def test_occurred_at_keeps_the_callers_instant_in_any_zone():
    agent = AgentFactory()
    plus_two = datetime(2026, 1, 31, 11, 0, tzinfo=timezone(timedelta(hours=2)))
    event = event_append(agent=agent, event_type="a.b", occurred_at=plus_two)
    row = Event.objects.get(pk=event.pk)
    assert row.occurred_at == datetime(2026, 1, 31, 9, 0, tzinfo=UTC)
    assert event_hash(row) == row.hash == event.hash
