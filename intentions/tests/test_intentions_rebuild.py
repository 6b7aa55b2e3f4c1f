"""The intentions engine is a projection of the ledger (DESIGN §1): intentions,
their dependencies, history, firings, escalations and pending items dropped and
rebuilt by replaying it come back equal — and the rebuild fires, escalates and
sends nothing."""

from __future__ import annotations

import uuid
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from facts.tests.factories import claim
from forgetting.services.erasure import Selector, erasure_run
from intentions.models import (
    Escalation,
    Firing,
    Intention,
    IntentionDependency,
    IntentionStatus,
    OutboxMessage,
    PendingItem,
    Transition,
    TriggerType,
)
from intentions.services import engine, firing, intentions_rebuild
from intentions.services.lifecycle import (
    intention_cancel,
    intention_complete,
    intention_fail,
    intention_set_dependencies,
    intention_set_escalation_policy,
    intention_skip,
    intention_start,
)
from intentions.services.outbox import webhook_set
from intentions.services.state import (
    handover_start,
    pending_clear,
    thread_acknowledge,
    thread_resume,
)
from intentions.tests.factories import T0, IntentionFactory, ThreadFactory, at, minutes, sim_agent
from ledger import projections
from ledger.models import Event
from ledger.services import event_append
from piper.provenance import SourceType

pytestmark = pytest.mark.django_db(transaction=False)

SECRET = "the launch code is 7731-bravo"


def rows(agent, *, serial_ids: bool = True) -> dict:
    """Every column of every row the intentions engine keeps for the agent.

    Dependencies, transitions and pending items are numbered by a sequence, not
    by the ledger: a rebuild keeps the numbers of the rows it finds, and numbers
    the ones it must make anew in chain order (`serial_ids=False` compares
    those rows without their numbers, in their order)."""
    mine = Intention.objects.filter(agent=agent)

    def numbered(qs):
        made = list(qs.order_by("pk").values())
        if not serial_ids:
            for row in made:
                row.pop("id")
        return made

    return {
        "intentions": list(mine.order_by("pk").values()),
        "dependencies": sorted(
            numbered(IntentionDependency.objects.filter(intention__in=mine)),
            key=lambda d: (str(d["intention_id"]), str(d["depends_on_id"])),
        ),
        "transitions": numbered(Transition.objects.filter(intention__in=mine)),
        "firings": list(Firing.objects.filter(agent=agent).order_by("pk").values()),
        "escalations": list(Escalation.objects.filter(agent=agent).order_by("pk").values()),
        "pending": sorted(
            numbered(PendingItem.objects.filter(agent=agent)),
            key=lambda p: (str(p["intention_id"]), p["kind"], p["occurrence"]),
        ),
        "outbox": list(OutboxMessage.objects.filter(agent=agent).order_by("pk").values()),
    }


def engine_history(agent) -> dict:
    """One-shot, recurring, event-, state-, dependency-triggered and manual
    intentions: fired, started, completed, skipped, failed and retried,
    escalated (overdue and on failures, through the webhook), cancelled with a
    dependent, expired, rehearsed, handed over; pending items cleared."""
    webhook_set(agent=agent, url="https://hooks.example.com/piper", secret="s3cret")
    main = ThreadFactory(agent=agent, key="main", session_id="s1")
    made = {"main": main}
    made["one_shot"] = IntentionFactory(
        agent=agent,
        thread=main,
        description="send the weekly report",
        trigger_type=TriggerType.TIME,
        due_at=T0 + minutes(10),
        priority=2,
        expires_at=T0 + timedelta(days=3),
        required_context=["report"],
        completion_criteria="report sent",
        escalation_policy={"overdue_seconds": 300, "notify": ["webhook"], "note": "ping"},
        source_session="s1",
    )
    made["recurring"] = IntentionFactory(
        agent=agent,
        thread=main,
        description="water the plants",
        trigger_type=TriggerType.TIME,
        due_at=T0 + minutes(5),
        rrule="FREQ=DAILY;COUNT=3",
        source_session="s1",
    )
    made["failing"] = IntentionFactory(
        agent=agent,
        description="rotate the keys",
        trigger_type=TriggerType.TIME,
        due_at=T0 + minutes(7),
        retry_policy={"max_retries": 1, "backoff_seconds": 60},
        escalation_policy={"after_failures": 1, "notify": ["webhook"]},
    )
    made["on_event"] = IntentionFactory(
        agent=agent,
        thread=main,
        description="tell ops the deploy is out",
        trigger_type=TriggerType.EVENT,
        trigger_spec={"event_type": "deploy.finished"},
    )
    made["on_state"] = IntentionFactory(
        agent=agent,
        description="restart web",
        trigger_type=TriggerType.STATE,
        trigger_spec={"subject": "web", "predicate": "status", "op": "eq", "value": "down"},
    )
    parent = IntentionFactory(agent=agent, description="build")
    made["child"] = IntentionFactory(
        agent=agent,
        description="release",
        trigger_type=TriggerType.DEPENDENCY,
        dependencies=[parent.pk],
    )
    doomed_parent = IntentionFactory(agent=agent, description="ask legal")
    made["doomed"] = IntentionFactory(
        agent=agent, description="publish", dependencies=[doomed_parent.pk]
    )
    made["expiring"] = IntentionFactory(
        agent=agent, thread=main, description="call back", expires_at=T0 + timedelta(hours=1)
    )
    made["rewired"] = IntentionFactory(agent=agent, description="tidy up")
    made["waiting"] = IntentionFactory(agent=agent, thread=main, description="check the backups")

    at(agent, T0 + minutes(8))
    engine.tick(agent=agent)  # recurring #1 and failing fire
    intention_complete(agent=agent, intention_id=made["recurring"].pk, evidence={"wet": True})
    intention_fail(agent=agent, intention_id=made["failing"].pk, reason="vault locked")
    at(agent, T0 + minutes(11))
    engine.tick(agent=agent)  # one_shot fires; failing's retry fires
    event_append(
        agent=agent,
        event_type="deploy.finished",
        payload={"version": "1.2"},
        source_type=SourceType.OBSERVATION,
    )
    engine.match_events(agent_id=agent.pk)
    intention_start(agent=agent, intention_id=made["on_event"].pk)
    claim(agent, "web", "status", "down", T0)
    engine.check_states(agent=agent)
    firing.fire(intention_id=parent.pk, cause=TriggerType.MANUAL, at=T0 + minutes(11))
    intention_complete(agent=agent, intention_id=parent.pk)  # child fires
    intention_cancel(agent=agent, intention_id=doomed_parent.pk, reason="no need")
    intention_set_dependencies(
        agent=agent, intention=made["rewired"], dependencies=[made["child"].pk]
    )
    intention_set_escalation_policy(
        agent=agent, intention_id=made["on_state"].pk, policy={"overdue_seconds": 60}
    )
    at(agent, T0 + minutes(20))
    engine.tick(agent=agent)  # one_shot and on_state overdue: escalated
    at(agent, T0 + timedelta(hours=25))
    engine.tick(agent=agent)  # expiring expires; recurring #2 fires; rehearsals
    intention_skip(agent=agent, intention_id=made["recurring"].pk, reason="rained")
    first = PendingItem.objects.filter(thread=main).order_by("pk").first()
    pending_clear(agent=agent, thread=main, item_ids=[first.pk])
    handover_start(agent=agent, thread=main, to_session="s2")
    thread_resume(agent=agent, thread=main, session_id="s2")
    thread_acknowledge(agent=agent, thread=main, session_id="s2")
    return made


def diff(after: dict, before: dict) -> list:
    """The differing columns, for a readable failure."""
    return [
        (table, i, name, b.get(name), a.get(name))
        for table in before
        for i, (a, b) in enumerate(zip(after[table], before[table], strict=False))
        for name in b
        if a.get(name) != b.get(name)
    ] + [
        (table, len(after[table]), len(before[table]))
        for table in before
        if len(after[table]) != len(before[table])
    ]


def statuses(agent) -> dict[str, tuple]:
    return {
        i.description: (i.status, i.occurrence)
        for i in Intention.objects.filter(agent=agent).order_by("pk")
    }


class TestRebuild:
    def test_registered_as_intentions(self):
        assert projections.get("intentions") is intentions_rebuild.rebuild_projection

    def test_rebuild_gives_the_same_rows_and_sends_nothing(
        self, django_capture_on_commit_callbacks
    ):
        agent = sim_agent()
        made = engine_history(agent)
        before = rows(agent)
        # The history is what it claims to be.
        assert statuses(agent) == {
            "send the weekly report": ("due", 1),
            "water the plants": ("active", 3),
            "rotate the keys": ("due", 2),
            "tell ops the deploy is out": ("executing", 1),
            "restart web": ("due", 1),
            "build": ("completed", 1),
            "release": ("due", 1),
            "ask legal": ("cancelled", 1),
            "publish": ("cancelled", 1),
            "call back": ("expired", 1),
            "tidy up": ("blocked", 1),
            "check the backups": ("active", 1),
        }
        assert sorted(e["reason"] for e in before["escalations"]) == [
            "failures",
            "overdue",
            "overdue",
        ]
        assert len(before["firings"]) == 9
        assert len(before["outbox"]) == 11  # 9 firings, 2 escalations with notify webhook
        assert {p["kind"] for p in before["pending"]} == {"fired", "escalated", "rehearsed"}
        assert sum(p["cleared_at"] is not None for p in before["pending"]) == 1
        one_shot = Intention.objects.get(pk=made["one_shot"].pk)
        assert (one_shot.inherited_by, one_shot.escalated_at) == ("s2", T0 + minutes(20))
        ledger_before = Event.objects.filter(agent=agent).count()

        with django_capture_on_commit_callbacks() as callbacks:
            applied = intentions_rebuild.rebuild_projection(agent=agent)

        assert (
            applied
            == Event.objects.filter(
                agent=agent, event_type__in=intentions_rebuild.EVENT_TYPES
            ).count()
        )
        assert diff(rows(agent), before) == []
        assert rows(agent) == before
        assert callbacks == []  # no webhook delivery queued
        assert Event.objects.filter(agent=agent).count() == ledger_before

    def test_a_rebuild_of_rows_as_the_ledger_makes_them_writes_none(self):
        agent = sim_agent()
        engine_history(agent)

        with CaptureQueriesContext(connection) as queries:
            intentions_rebuild.rebuild_projection(agent=agent)

        writes = [
            q["sql"].split()[:3]
            for q in queries.captured_queries
            if q["sql"].startswith(("UPDATE", "INSERT", "DELETE"))
        ]
        # Only the dependencies are replaced (a handful of rows, no history).
        assert {tuple(w) for w in writes} <= {
            ("DELETE", "FROM", '"intentions_intentiondependency"'),
            ("INSERT", "INTO", '"intentions_intentiondependency"'),
        }

    def test_from_nothing_but_the_ledger(self):
        agent = sim_agent()
        engine_history(agent)
        before = rows(agent, serial_ids=False)
        mine = Intention.objects.filter(agent=agent)
        Transition.objects.filter(intention__in=mine).delete()
        IntentionDependency.objects.filter(intention__in=mine).delete()
        PendingItem.objects.filter(agent=agent).delete()
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('piper.rebuild', 'on', true)")
            mine.update(
                status=IntentionStatus.ACTIVE,
                occurrence=9,
                attempts=0,
                due_at=None,
                last_fired_at=None,
                escalated_at=None,
                escalation=None,
                inherited_by="",
                priority=0,
                created_at=T0,
                updated_at=T0,
            )
            Firing.objects.filter(agent=agent).update(fired_at=T0, cause="manual")
            cursor.execute("SELECT set_config('piper.rebuild', 'off', true)")

        intentions_rebuild.rebuild_projection(agent=agent)

        assert diff(rows(agent, serial_ids=False), before) == []
        assert rows(agent, serial_ids=False) == before

    def test_after_a_rebuild_nothing_fires_or_escalates_again(self):
        agent = sim_agent()
        engine_history(agent)
        intentions_rebuild.rebuild_projection(agent=agent)
        head = Event.objects.filter(agent=agent).count()

        result = engine.tick(agent=agent)

        assert (result["time"], result["events"], result["states"], result["escalated"]) == (
            [],
            [],
            [],
            [],
        )
        assert Firing.objects.filter(agent=agent).count() == 9
        assert not Event.objects.filter(
            agent=agent, seq__gt=head, event_type__in=["intention.fired", "intention.escalated"]
        ).exists()

    def test_one_agent_leaves_the_others_alone_and_all_rebuilds_all(self):
        mine, theirs = sim_agent(), sim_agent()
        engine_history(mine)
        engine_history(theirs)
        before = (rows(mine), rows(theirs, serial_ids=False))
        Transition.objects.filter(intention__agent=theirs).delete()

        intentions_rebuild.rebuild_projection(agent=mine)
        assert rows(mine) == before[0]
        assert not Transition.objects.filter(intention__agent=theirs).exists()

        intentions_rebuild.rebuild_projection()
        assert (rows(mine), rows(theirs, serial_ids=False)) == before

    def test_the_command(self):
        agent = sim_agent()
        engine_history(agent)
        before = rows(agent)
        out = StringIO()

        call_command("rebuild_projection", "intentions", agent=agent.name, stdout=out)

        assert out.getvalue().startswith(f"rebuilt intentions for agent {agent.name}: ")
        assert diff(rows(agent), before) == []
        assert rows(agent) == before

    def test_the_engine_carries_on_after_a_rebuild(self):
        agent = sim_agent()
        made = engine_history(agent)
        intentions_rebuild.rebuild_projection(agent=agent)

        done = intention_complete(agent=agent, intention_id=made["one_shot"].pk)

        assert done.status == IntentionStatus.COMPLETED
        assert Intention.objects.get(pk=made["recurring"].pk).occurrence == 3


class TestOlderLedgers:
    def test_a_creation_without_the_later_fields_keeps_what_the_row_says(self):
        """Events written before they carried every column: the row's value stands,
        and an intention only the ledger still knows comes back with defaults."""
        agent = sim_agent()
        intention_id = uuid.uuid4()
        created = event_append(
            agent=agent,
            event_type="intention.created",
            payload={
                "intention_id": str(intention_id),
                "description": "an old promise",
                "trigger_type": "manual",
                "trigger_spec": {},
                "due_at": None,
                "not_before": None,
                "rrule": "",
                "dependencies": [],
                "thread_id": None,
            },
            session_id="s0",
            source_type=SourceType.AGENT_INFERENCE,
        )
        fired = event_append(
            agent=agent,
            event_type="intention.fired",
            payload={
                "intention_id": str(intention_id),
                "occurrence": 1,
                "cause": "manual",
                "cause_event_id": None,
                "fired_at": (T0 + minutes(1)).isoformat(),
            },
            source_type=SourceType.OBSERVATION,
        )

        assert intentions_rebuild.rebuild_projection(agent=agent) == 2

        intention = Intention.objects.get(pk=intention_id)
        assert (
            intention.status,
            intention.source_session,
            intention.armed_after_seq,
            intention.last_fired_at,
            intention.created_at,
            intention.updated_at,
        ) == (
            "due",
            "s0",
            created.seq,
            T0 + minutes(1),
            created.recorded_at,
            fired.recorded_at,
        )
        firing = Firing.objects.get(intention=intention)
        assert (firing.event_id, firing.occurrence) == (fired.pk, 1)
        # A second rebuild keeps the ids and columns the first one gave.
        before = rows(agent)
        intentions_rebuild.rebuild_projection(agent=agent)
        assert diff(rows(agent), before) == []
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

    def test_an_erased_intention_stays_gone(self):
        agent = sim_agent()
        made = engine_history(agent)
        one_shot = Intention.objects.get(pk=made["one_shot"].pk)

        self.erase(agent, one_shot.source_event)

        before = rows(agent)
        assert not Intention.objects.filter(pk=one_shot.pk).exists()
        intentions_rebuild.rebuild_projection(agent=agent)
        assert diff(rows(agent), before) == []
        assert rows(agent) == before

    def test_a_scrubbed_quote_comes_back_scrubbed(self):
        agent = sim_agent()
        made = engine_history(agent)
        said = event_append(
            agent=agent,
            event_type="user.said",
            payload={"text": SECRET},
            session_id="s2",
            source_type=SourceType.USER_STATEMENT,
        )
        quoting = IntentionFactory(
            agent=agent,
            thread=made["main"],
            description=f"remember {SECRET}",
            trigger_type=TriggerType.TIME,
            due_at=T0 + timedelta(hours=26),
        )
        at(agent, T0 + timedelta(hours=27))
        engine.tick(agent=agent)

        self.erase(agent, said)

        before = rows(agent)
        scrubbed = Intention.objects.get(pk=quoting.pk)
        assert (scrubbed.description, scrubbed.status) == ("remember [erased]", "due")
        assert scrubbed.source_event.event_type == "intention.scrubbed"
        # Its firing quoted the description: erased too, and it still stands.
        firing = Firing.objects.get(intention=scrubbed)
        assert firing.event.redacted_at is not None
        assert scrubbed.source_event.payload["fired"][str(firing.event_id)]["description"] == (
            "remember [erased]"
        )
        assert not [
            e.event_type
            for e in Event.objects.filter(agent=agent, redacted_at__isnull=True)
            if "7731-bravo" in str(e.payload)
        ]
        intentions_rebuild.rebuild_projection(agent=agent)
        assert diff(rows(agent), before) == []
        assert rows(agent) == before

    def test_an_erased_firing_and_move_leave_the_rows_a_rebuild_makes(self):
        agent = sim_agent()
        made = engine_history(agent)
        fired = Firing.objects.get(intention=made["one_shot"]).event
        started = Transition.objects.get(intention=made["on_event"], to_status="executing").event

        self.erase(agent, fired, started)

        before = rows(agent)
        one_shot = Intention.objects.get(pk=made["one_shot"].pk)
        # What the ledger still says: never fired (its escalation, a later event,
        # stands); the firing quoted its description, so that is scrubbed too.
        assert (one_shot.status, one_shot.last_fired_at) == ("active", None)
        assert (one_shot.description, one_shot.source_session) == ("[erased]", "s1")
        assert not Firing.objects.filter(intention=one_shot).exists()
        assert Intention.objects.get(pk=made["on_event"].pk).status == "due"
        intentions_rebuild.rebuild_projection(agent=agent)
        assert diff(rows(agent), before) == []
        assert rows(agent) == before
