"""Working state is a projection of the ledger (DESIGN §1): threads, checkpoint
versions and handovers dropped and rebuilt by replaying it come back equal —
and the intentions and pending items that point at the threads survive."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection

from forgetting.services.erasure import Selector, erasure_run
from intentions.models import (
    Handover,
    Intention,
    IntentionStatus,
    PendingItem,
    Thread,
    TriggerType,
    WorkingState,
)
from intentions.services import firing
from intentions.services.rebuild import rebuild_projection
from intentions.services.state import (
    handover_start,
    thread_acknowledge,
    thread_resume,
    working_state_write,
)
from intentions.tests.factories import T0, IntentionFactory, ThreadFactory, at, minutes, sim_agent
from ledger import projections
from ledger.models import Event
from ledger.services import event_append
from piper.provenance import SourceType
from piper.tenancy.clock import now_for

pytestmark = pytest.mark.django_db(transaction=False)

SECRET = "the vault code is 4471-alpha"


def rows(agent) -> dict:
    """Every column of the agent's working state, and what points at its threads."""
    return {
        "threads": list(Thread.objects.filter(agent=agent).order_by("pk").values()),
        "states": list(WorkingState.objects.filter(agent=agent).order_by("pk").values()),
        "handovers": list(Handover.objects.filter(agent=agent).order_by("pk").values()),
        "intentions": list(
            Intention.objects.filter(agent=agent).order_by("pk").values("id", "thread_id")
        ),
        "pending": list(PendingItem.objects.filter(agent=agent).order_by("pk").values()),
    }


def drop_versions(agent) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('piper.rebuild', 'on', true)")
        WorkingState.objects.filter(agent=agent).delete()
        cursor.execute("SELECT set_config('piper.rebuild', 'off', true)")


def write(agent, thread, state, session_id="s1"):
    thread.refresh_from_db()
    return working_state_write(
        agent=agent,
        thread=thread,
        state=state,
        based_on=thread.current_version,
        session_id=session_id,
    )


def working_history(agent) -> dict:
    """Threads with versions, a handover resumed and acknowledged, one resumed
    and one pending, an empty thread; intentions and a pending item on a thread."""
    main = ThreadFactory(agent=agent, key="main", session_id="s1")
    write(agent, main, {"goal": "ship v1"})
    write(agent, main, {"goal": "ship v1", "subgoal": "tests"})
    open_one = IntentionFactory(agent=agent, thread=main, description="tell Ana")
    IntentionFactory(agent=agent, description="no thread")
    fired = IntentionFactory(agent=agent, thread=main, description="page ops")
    firing.fire(intention_id=fired.pk, cause=TriggerType.MANUAL, at=now_for(agent.pk))
    at(agent, T0 + minutes(5))
    handover_start(agent=agent, thread=main, to_session="s2", note="shift ends")
    thread_resume(agent=agent, thread=main, session_id="s2")
    thread_acknowledge(agent=agent, thread=main, session_id="s2")
    write(agent, main, {"goal": "ship v1", "next_action": "tag"}, "s2")

    side = ThreadFactory(agent=agent, key="side", session_id="s1")
    write(agent, side, {"goal": "side quest"})
    handover_start(agent=agent, thread=side, to_session="s3")

    half = ThreadFactory(agent=agent, key="half", session_id="s1")
    write(agent, half, {"goal": "half done"})
    handover_start(agent=agent, thread=half, to_session="s4")
    thread_resume(agent=agent, thread=half, session_id="s4")

    ThreadFactory(agent=agent, key="empty", session_id="s1")
    return {"main": main, "open": open_one}


class TestRebuild:
    def test_registered_as_working_state(self):
        assert projections.get("working_state") is rebuild_projection

    def test_rebuild_gives_the_same_rows_and_intentions_survive(self):
        agent = sim_agent()
        made = working_history(agent)
        before = rows(agent)
        # The history is what it claims to be.
        assert [(h["status"], h["surfaced"] is not None) for h in before["handovers"]] == [
            ("acknowledged", True),
            ("pending", False),
            ("resumed", True),
        ]
        assert {t["key"]: (t["status"], t["current_version"]) for t in before["threads"]} == {
            "main": ("active", 3),
            "side": ("handing_over", 1),
            "half": ("handing_over", 1),
            "empty": ("active", 0),
        }
        assert len(before["pending"]) == 1
        assert str(made["open"].pk) in before["handovers"][0]["surfaced"]

        # 4 threads, 5 versions, 3 handovers started, 2 resumed, 1 acknowledged.
        assert rebuild_projection(agent=agent) == 15
        assert rows(agent) == before

    def test_from_nothing_but_the_ledger(self):
        agent = sim_agent()
        working_history(agent)
        before = rows(agent)
        drop_versions(agent)
        Handover.objects.filter(agent=agent).delete()
        Thread.objects.filter(agent=agent).update(
            status="closed", session_id="junk", current_version=99, created_at=T0, updated_at=T0
        )

        rebuild_projection(agent=agent)

        assert rows(agent) == before

    def test_one_agent_leaves_the_others_alone_and_all_rebuilds_all(self):
        mine, theirs = sim_agent(), sim_agent()
        working_history(mine)
        working_history(theirs)
        before = (rows(mine), rows(theirs))
        drop_versions(theirs)

        rebuild_projection(agent=mine)
        assert rows(mine) == before[0]
        assert WorkingState.objects.filter(agent=theirs).count() == 0

        rebuild_projection()
        assert (rows(mine), rows(theirs)) == before

    def test_the_command(self):
        agent = sim_agent()
        working_history(agent)
        before = rows(agent)
        out = StringIO()

        call_command("rebuild_projection", "working_state", agent=agent.name, stdout=out)

        assert out.getvalue().startswith(
            f"rebuilt working_state for agent {agent.name}: 15 events applied in "
        )
        assert rows(agent) == before

    def test_a_write_after_the_rebuild_continues_the_thread(self):
        agent = sim_agent()
        made = working_history(agent)
        rebuild_projection(agent=agent)

        fourth = write(agent, made["main"], {"goal": "ship v2"}, "s2")

        assert (fourth.version, fourth.based_on) == (4, 3)


class TestOlderLedgers:
    """Events written before they carried every id: no thread.created, no
    working_state_id, no handover_id in the start, no surfaced in the resume."""

    def test_rows_are_derived_from_the_events_that_name_them(self):
        agent = sim_agent()
        thread_id, handover_id = uuid.uuid4(), uuid.uuid4()

        def old(event_type, payload, session_id):
            return event_append(
                agent=agent,
                event_type=event_type,
                payload={"thread_id": str(thread_id), **payload},
                session_id=session_id,
                source_type=SourceType.OBSERVATION,
            )

        first = old(
            "working_state.written",
            {"thread": "legacy", "version": 1, "state": {"goal": "g"}},
            "s1",
        )
        started = old(
            "thread.handover_started",
            {
                "thread": "legacy",
                "from_session": "s1",
                "to_session": "s2",
                "frozen_version": 1,
                "note": "",
            },
            "s1",
        )
        resumed = old("thread.resumed", {"handover_id": str(handover_id), "session": "s2"}, "s2")
        acked = old(
            "thread.handover_acknowledged", {"handover_id": str(handover_id), "session": "s2"}, "s2"
        )

        assert rebuild_projection(agent=agent) == 4

        thread = Thread.objects.get(agent=agent)
        assert (
            thread.pk,
            thread.key,
            thread.status,
            thread.session_id,
            thread.current_version,
            thread.created_at,
            thread.updated_at,
        ) == (thread_id, "legacy", "active", "s2", 1, first.recorded_at, acked.recorded_at)
        state = WorkingState.objects.get(agent=agent)
        assert (state.version, state.based_on, state.state, state.source_event_id) == (
            1,
            0,
            {"goal": "g"},
            first.pk,
        )
        handover = Handover.objects.get(agent=agent)
        assert (
            handover.pk,
            handover.status,
            handover.succession_event_id,
            handover.resumed_at,
            handover.acknowledged_at,
            handover.surfaced,
        ) == (
            handover_id,
            "acknowledged",
            started.pk,
            resumed.recorded_at,
            acked.recorded_at,
            None,
        )
        # A second rebuild keeps the ids the first one gave (a version's from its row).
        before = rows(agent)
        rebuild_projection(agent=agent)
        assert rows(agent) == before


class TestAfterErasure:
    """An erasure changes the rows as a rebuild after it would: the two agree."""

    def erase(self, agent, *events):
        erasure_run(
            agent=agent,
            selector=Selector(event_ids=tuple(e.pk for e in events)),
            reason="asked",
            requested_by="ops",
        )

    def test_an_erased_version_the_latest_included(self):
        agent = sim_agent()
        made = working_history(agent)
        versions = WorkingState.objects.filter(thread=made["main"]).order_by("version")
        second, third = versions[1].source_event, versions[2].source_event

        self.erase(agent, second, third)

        before = rows(agent)
        main = Thread.objects.get(pk=made["main"].pk)
        assert main.current_version == 1
        assert (
            main.updated_at
            == Event.objects.get(agent=agent, event_type="thread.handover_acknowledged").recorded_at
        )
        rebuild_projection(agent=agent)
        assert rows(agent) == before

    def test_an_erased_acknowledgement_and_handover(self):
        agent = sim_agent()
        working_history(agent)
        acked = Event.objects.get(agent=agent, event_type="thread.handover_acknowledged")
        pending = Handover.objects.get(agent=agent, status="pending").succession_event

        self.erase(agent, acked, pending)

        before = rows(agent)
        assert sorted(h["status"] for h in before["handovers"]) == ["resumed", "resumed"]
        rebuild_projection(agent=agent)
        assert rows(agent) == before

    def test_a_scrubbed_quote_comes_back_scrubbed(self):
        agent = sim_agent()
        made = working_history(agent)
        said = event_append(
            agent=agent,
            event_type="user.said",
            payload={"text": SECRET},
            session_id="s2",
            source_type=SourceType.USER_STATEMENT,
        )
        write(agent, made["main"], {"goal": "open it", "assumptions": [SECRET]}, "s2")
        write(agent, made["main"], {"goal": "open it", "subgoal": "done"}, "s2")

        self.erase(agent, said)

        before = rows(agent)
        scrubbed = WorkingState.objects.get(thread=made["main"], version=4)
        assert scrubbed.state == {"goal": "open it", "assumptions": ["[erased]"]}
        assert scrubbed.source_event.event_type == "working_state.scrubbed"
        assert rebuild_projection(agent=agent) == 17
        assert rows(agent) == before


def test_intentions_keep_their_thread_through_a_rebuild():
    agent = sim_agent()
    made = working_history(agent)
    thread_intentions = set(
        Intention.objects.filter(thread=made["main"]).values_list("pk", flat=True)
    )

    rebuild_projection(agent=agent)

    assert set(Intention.objects.filter(thread=made["main"]).values_list("pk", flat=True)) == (
        thread_intentions
    )
    assert PendingItem.objects.filter(thread=made["main"]).count() == 1
    assert Intention.objects.get(pk=made["open"].pk).status == IntentionStatus.ACTIVE
