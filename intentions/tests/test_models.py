"""What PostgreSQL itself enforces for intentions (migrations 0002 and 0003).

The state machine is checked exhaustively: every (from, to) pair of statuses
is tried as a raw UPDATE, behind every service's back. Intentions are brought
into each starting status through the services, never by writing the status.
"""

import importlib
import itertools
import uuid

import pytest
from django.db import IntegrityError, connection, transaction

from intentions.models import (
    MAX_STATE_BYTES,
    TRANSITIONS,
    Firing,
    Handover,
    Intention,
    IntentionDependency,
    IntentionStatus,
    PendingItem,
    Thread,
    Transition,
    TriggerType,
    WorkingState,
)
from intentions.services.state import handover_start, working_state_write
from intentions.tests.factories import (
    STATUSES,
    IntentionFactory,
    ThreadFactory,
    in_status,
    sim_agent,
    status_of,
)
from ledger.services import event_append
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

MIGRATION = importlib.import_module("intentions.migrations.0003_state_machine_and_history")

ALLOWED_PAIRS = {(str(a), b) for a, targets in TRANSITIONS.items() for b in targets}
REFUSED_PAIRS = [
    (a, b)
    for a, b in itertools.product(STATUSES, STATUSES)
    if a != b and (a, b) not in ALLOWED_PAIRS
]


def raw(sql: str, params=()) -> int:
    """Run SQL in its own savepoint (a refusal must not poison the test's transaction)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def raw_then_undo(sql: str, params=()) -> int:
    """Run SQL that should succeed, then roll it back."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        count = cursor.rowcount
        transaction.set_rollback(True)
    return count


def set_status(intention, status: str) -> int:
    return raw("UPDATE intentions_intention SET status = %s WHERE id = %s", [status, intention.pk])


def check_deferred_now():
    """Deferred constraints (the same-agent foreign keys) are checked at commit;
    the test's transaction never commits, so check them now."""
    raw("SET CONSTRAINTS ALL IMMEDIATE")


@pytest.fixture
def agent():
    return sim_agent("owner")


# ------------------------------------------------------------------ state machine


class TestStateMachineTable:
    def test_the_model_table_is_the_migration_table(self):
        assert {k: tuple(v) for k, v in TRANSITIONS.items()} == MIGRATION.ALLOWED

    def test_every_status_has_a_row_and_targets_are_statuses(self):
        assert set(TRANSITIONS) == set(STATUSES)
        assert all(set(targets) <= set(STATUSES) for targets in TRANSITIONS.values())

    def test_the_final_statuses_lead_nowhere_and_completed_only_back_to_active(self):
        assert TRANSITIONS[IntentionStatus.CANCELLED] == ()
        assert TRANSITIONS[IntentionStatus.EXPIRED] == ()
        assert TRANSITIONS[IntentionStatus.COMPLETED] == ("active",)

    def test_the_database_function_lists_exactly_these_pairs(self):
        with connection.cursor() as cursor:
            cursor.execute("SELECT prosrc FROM pg_proc WHERE proname = 'intentions_status_guard'")
            (source,) = cursor.fetchone()
        assert MIGRATION.PAIRS in source
        assert len(ALLOWED_PAIRS) == 21
        assert len(REFUSED_PAIRS) == 7 * 6 - 21


@pytest.mark.parametrize(("from_status", "to_status"), REFUSED_PAIRS)
def test_the_database_refuses_every_pair_outside_the_machine(agent, from_status, to_status):
    intention = in_status(agent, from_status)

    with pytest.raises(IntegrityError) as refused:
        set_status(intention, to_status)

    assert str(refused.value).splitlines()[0] == (
        f"intention {intention.pk}: {from_status} -> {to_status} is not a transition of the "
        "state machine"
    )
    assert status_of(intention) == from_status


@pytest.mark.parametrize(
    ("from_status", "to_status"),
    sorted(pair for pair in ALLOWED_PAIRS if pair != ("completed", "active")),
)
def test_the_database_allows_every_pair_of_the_machine(agent, from_status, to_status):
    intention = in_status(agent, from_status)

    assert (
        raw_then_undo(
            "UPDATE intentions_intention SET status = %s WHERE id = %s", [to_status, intention.pk]
        )
        == 1
    )


@pytest.mark.parametrize("status", STATUSES)
def test_the_database_allows_staying_in_a_status(agent, status):
    intention = in_status(agent, status)

    assert (
        raw_then_undo(
            "UPDATE intentions_intention SET status = status, description = 'renamed' "
            "WHERE id = %s",
            [intention.pk],
        )
        == 1
    )


class TestCompletedNeverComesBack:
    def test_a_completed_one_shot_cannot_return_to_active(self, agent):
        intention = in_status(agent, IntentionStatus.COMPLETED)

        with pytest.raises(IntegrityError) as refused:
            set_status(intention, IntentionStatus.ACTIVE)

        assert str(refused.value).splitlines()[0] == (
            f"intention {intention.pk}: a completed one-shot intention cannot come back"
        )
        assert status_of(intention) == IntentionStatus.COMPLETED

    def test_nor_by_clearing_its_rrule_in_the_same_update(self, agent):
        intention = in_status(agent, IntentionStatus.COMPLETED, recurring=True)

        with pytest.raises(IntegrityError, match="a completed one-shot intention cannot come back"):
            raw(
                "UPDATE intentions_intention SET status = 'active', rrule = '' WHERE id = %s",
                [intention.pk],
            )

    def test_a_completed_recurring_one_can_be_rearmed(self, agent):
        intention = in_status(agent, IntentionStatus.COMPLETED, recurring=True)

        assert raw_then_undo(
            "UPDATE intentions_intention SET status = 'active' WHERE id = %s", [intention.pk]
        )

    def test_the_orm_is_refused_too(self, agent):
        intention = in_status(agent, IntentionStatus.CANCELLED)
        intention.status = IntentionStatus.ACTIVE

        with pytest.raises(IntegrityError), transaction.atomic():
            intention.save()
        with pytest.raises(IntegrityError), transaction.atomic():
            Intention.objects.filter(pk=intention.pk).update(status=IntentionStatus.DUE)

        assert status_of(intention) == IntentionStatus.CANCELLED

    @pytest.mark.parametrize("status", [IntentionStatus.CANCELLED, IntentionStatus.EXPIRED])
    def test_cancelled_and_expired_are_final(self, agent, status):
        intention = in_status(agent, status)

        for target in STATUSES:
            if target == status:
                continue
            with pytest.raises(IntegrityError):
                set_status(intention, target)

        assert status_of(intention) == status


# ------------------------------------------------------------------------ history


class TestHistoryIsAppendOnly:
    def test_working_state_versions_refuse_update_and_delete(self, agent):
        thread = ThreadFactory(agent=agent)
        version = working_state_write(agent=agent, thread=thread, state={"goal": "g"}, based_on=0)

        with pytest.raises(IntegrityError, match="intentions_workingstate is history: UPDATE"):
            raw(
                'UPDATE intentions_workingstate SET state = \'{"goal": "x"}\' WHERE id = %s',
                [version.pk],
            )
        with pytest.raises(IntegrityError, match="intentions_workingstate is history: DELETE"):
            raw("DELETE FROM intentions_workingstate WHERE id = %s", [version.pk])
        with pytest.raises(IntegrityError, match="history: UPDATE"), transaction.atomic():
            WorkingState.objects.filter(pk=version.pk).update(session_id="other")

        version.refresh_from_db()
        assert (version.state, version.session_id) == ({"goal": "g"}, "")

    def test_firings_refuse_update(self, agent):
        intention = in_status(agent, IntentionStatus.DUE)
        firing = Firing.objects.get(intention=intention)

        with pytest.raises(IntegrityError, match="intentions_firing is history: UPDATE"):
            raw("UPDATE intentions_firing SET occurrence = 2 WHERE id = %s", [firing.pk])

        assert Firing.objects.get(pk=firing.pk).occurrence == 1

    def test_transitions_refuse_update(self, agent):
        intention = in_status(agent, IntentionStatus.DUE)
        first = Transition.objects.filter(intention=intention).order_by("id").first()

        with pytest.raises(IntegrityError, match="intentions_transition is history: UPDATE"):
            raw("UPDATE intentions_transition SET reason = 'rewritten' WHERE id = %s", [first.pk])

        assert Transition.objects.get(pk=first.pk).reason == "created"


# -------------------------------------------------------------------- constraints


class TestConstraints:
    def test_one_firing_per_intention_and_occurrence(self, agent):
        intention = in_status(agent, IntentionStatus.DUE)
        firing = Firing.objects.get(intention=intention)

        with pytest.raises(IntegrityError, match="intentions_fire_once"), transaction.atomic():
            Firing.objects.create(
                agent=agent,
                intention=intention,
                occurrence=1,
                fired_at=firing.fired_at,
                cause=TriggerType.MANUAL,
                event=firing.event,
            )
        assert Firing.objects.filter(intention=intention).count() == 1

    def test_due_at_may_not_be_before_not_before(self, agent):
        intention = IntentionFactory(agent=agent)

        with pytest.raises(IntegrityError, match="intentions_due_not_before_not_before"):
            raw(
                "UPDATE intentions_intention SET not_before = '2030-01-02T00:00Z', "
                "due_at = '2030-01-01T00:00Z' WHERE id = %s",
                [intention.pk],
            )

    @pytest.mark.parametrize(
        ("field", "value", "constraint"),
        [
            ("status", "sleeping", "intentions_status_known"),
            ("trigger_type", "whim", "intentions_trigger_known"),
        ],
    )
    def test_unknown_status_or_trigger_type(self, agent, field, value, constraint):
        event = event_append(agent=agent, event_type="note.added", payload={})
        row = {"status": "active", "trigger_type": "manual", field: value}

        with pytest.raises(IntegrityError, match=constraint), transaction.atomic():
            Intention.objects.create(agent=agent, description="x", source_event=event, **row)

    def test_no_self_dependency_and_no_duplicate_dependency(self, agent):
        first = IntentionFactory(agent=agent)
        second = IntentionFactory(agent=agent, dependencies=[first.pk])

        with (
            pytest.raises(IntegrityError, match="intentions_no_self_dependency"),
            transaction.atomic(),
        ):
            IntentionDependency.objects.create(intention=first, depends_on=first)
        with (
            pytest.raises(IntegrityError, match="intentions_dependency_once"),
            transaction.atomic(),
        ):
            IntentionDependency.objects.create(intention=second, depends_on=first)

    def test_working_state_size_limit_and_versions_move_forward(self, agent):
        thread = ThreadFactory(agent=agent)
        version = working_state_write(agent=agent, thread=thread, state={}, based_on=0)

        def insert(**overrides):
            row = {
                "id": uuid.uuid4(),
                "version": 2,
                "based_on": 1,
                "size_bytes": 2,
                **overrides,
            }
            raw(
                "INSERT INTO intentions_workingstate (id, agent_id, thread_id, version, based_on, "
                "state, size_bytes, session_id, source_event_id, created_at) "
                "VALUES (%s, %s, %s, %s, %s, '{}', %s, '', %s, now())",
                [
                    row["id"],
                    agent.pk,
                    thread.pk,
                    row["version"],
                    row["based_on"],
                    row["size_bytes"],
                    version.source_event_id,
                ],
            )

        with pytest.raises(IntegrityError, match="intentions_state_size_limit"):
            insert(size_bytes=MAX_STATE_BYTES + 1)
        with pytest.raises(IntegrityError, match="intentions_state_based_on_earlier"):
            insert(version=2, based_on=2)
        with pytest.raises(IntegrityError, match="intentions_state_version_unique"):
            insert(version=1, based_on=0)

    def test_one_open_handover_per_thread(self, agent):
        thread = ThreadFactory(agent=agent)
        handover = handover_start(agent=agent, thread=thread, to_session="next")

        with (
            pytest.raises(IntegrityError, match="intentions_one_open_handover"),
            transaction.atomic(),
        ):
            Handover.objects.create(
                agent=agent,
                thread=thread,
                to_session="another",
                frozen_version=0,
                succession_event=handover.succession_event,
            )

    def test_thread_key_unique_per_agent_only(self, agent):
        ThreadFactory(agent=agent, key="main")
        other = AgentFactory()

        with (
            pytest.raises(IntegrityError, match="intentions_thread_key_unique"),
            transaction.atomic(),
        ):
            Thread.objects.create(agent=agent, key="main")
        assert ThreadFactory(agent=other, key="main").agent_id == other.pk

    def test_one_pending_item_per_thread_intention_kind_and_occurrence(self, agent):
        thread = ThreadFactory(agent=agent)
        intention = in_status(agent, IntentionStatus.DUE, thread=thread)
        item = PendingItem.objects.get(intention=intention)

        with pytest.raises(IntegrityError, match="intentions_pending_once"), transaction.atomic():
            PendingItem.objects.create(
                agent=agent,
                thread=thread,
                intention=intention,
                kind=item.kind,
                occurrence=1,
                added_at=item.added_at,
            )


class TestRowsBelongToOneAgent:
    """Composite foreign keys: a row of agent A never points at agent B's thread or intention."""

    @pytest.fixture
    def other(self):
        return AgentFactory(name="other")

    def test_a_working_state_on_another_agents_thread(self, agent, other):
        thread = ThreadFactory(agent=other)
        event = event_append(agent=agent, event_type="note.added", payload={})

        with (
            pytest.raises(IntegrityError, match="intentions_state_same_agent"),
            transaction.atomic(),
        ):
            WorkingState.objects.create(
                agent=agent,
                thread=thread,
                version=1,
                based_on=0,
                state={},
                size_bytes=2,
                source_event=event,
            )
            check_deferred_now()

    def test_an_intention_on_another_agents_thread(self, agent, other):
        thread = ThreadFactory(agent=other)
        intention = IntentionFactory(agent=agent)

        with (
            pytest.raises(IntegrityError, match="intentions_intention_thread_same_agent"),
            transaction.atomic(),
        ):
            Intention.objects.filter(pk=intention.pk).update(thread=thread)
            check_deferred_now()

    def test_a_pending_item_on_another_agents_thread(self, agent, other):
        thread = ThreadFactory(agent=other)
        intention = in_status(agent, IntentionStatus.DUE)

        with (
            pytest.raises(IntegrityError, match="intentions_pending_same_agent"),
            transaction.atomic(),
        ):
            PendingItem.objects.create(
                agent=agent,
                thread=thread,
                intention=intention,
                kind=PendingItem.Kind.FIRED,
                occurrence=1,
                added_at=intention.last_fired_at,
            )
            check_deferred_now()

    def test_a_firing_filed_under_another_agent(self, agent, other):
        intention = IntentionFactory(agent=agent)
        event = event_append(agent=other, event_type="note.added", payload={})

        with (
            pytest.raises(IntegrityError, match="intentions_firing_same_agent"),
            transaction.atomic(),
        ):
            Firing.objects.create(
                agent=other,
                intention=intention,
                occurrence=1,
                fired_at=event.recorded_at,
                cause=TriggerType.MANUAL,
                event=event,
            )
            check_deferred_now()
