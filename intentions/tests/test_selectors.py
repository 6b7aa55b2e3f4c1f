"""Reads that bypass the ORM must give exactly what the ORM path and its serializer give."""

from datetime import UTC, datetime, timedelta

import pytest

from intentions import selectors
from intentions.models import Intention, IntentionStatus, TriggerType
from intentions.serializers import IntentionOutputSerializer
from intentions.services import engine
from intentions.services.lifecycle import intention_fail
from intentions.tests.factories import IntentionFactory, ThreadFactory, in_status
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def agent():
    agent = AgentFactory()
    engine.clock_set(agent=agent, now=T0)
    return agent


@pytest.fixture
def thread(agent):
    return ThreadFactory(agent=agent)


def orm_rendering(intentions) -> list[dict]:
    rows = selectors.with_dependencies(
        list(Intention.objects.filter(pk__in=[i.pk for i in intentions]))
    )
    by_id = {row.pk: row for row in rows}
    return [IntentionOutputSerializer().to_representation(by_id[i.pk]) for i in intentions]


class TestOpenIntentionsRendered:
    def test_equals_the_serializer_field_for_field_in_resume_order(self, agent, thread):
        first = IntentionFactory(agent=agent, thread=thread, priority=1)
        overdue = IntentionFactory(
            agent=agent,
            thread=thread,
            trigger_type=TriggerType.TIME,
            due_at=T0 + timedelta(minutes=5, microseconds=120),
            not_before=T0 + timedelta(minutes=1),
            expires_at=T0 + timedelta(days=3, microseconds=999_999),
            required_context=["ticket", {"n": 1.5}],
            completion_criteria="the report is sent",
            retry_policy={"max_retries": 3, "backoff_seconds": 30},
            escalation_policy={"overdue_seconds": 600},
            source_session="s1",
            dependencies=[first.pk],
            trigger_spec={},
        )
        later = IntentionFactory(
            agent=agent,
            thread=thread,
            trigger_type=TriggerType.TIME,
            due_at=T0 + timedelta(days=2),
            rrule="FREQ=DAILY;COUNT=3",
            priority=5,
        )
        due = in_status(
            agent,
            IntentionStatus.DUE,
            thread=thread,
            escalation_policy={"after_failures": 1, "notify": [], "note": "call Ana"},
        )
        engine.clock_set(agent=agent, now=T0 + timedelta(microseconds=7))
        intention_fail(agent=agent, intention_id=due.pk, reason="no answer")  # escalates it
        in_status(agent, IntentionStatus.COMPLETED, thread=thread)  # not open: not listed
        IntentionFactory(agent=agent, thread=ThreadFactory(agent=agent))  # another thread
        engine.clock_set(agent=agent, now=T0 + timedelta(hours=1))  # `overdue` is now overdue

        rendered = selectors.open_intentions_rendered(
            thread=thread, now=T0 + timedelta(hours=1)
        ).parsed()

        assert rendered == orm_rendering([due, overdue, later, first])
        assert [list(r) for r in rendered] == [
            list(IntentionOutputSerializer().to_representation(due))
        ] * 4
        assert rendered[1]["due_at"] == "2026-03-01T09:05:00.000120Z"
        assert rendered[1]["not_before"] == "2026-03-01T09:01:00Z"
        assert rendered[1]["dependencies"] == [str(first.pk)]
        assert rendered[0]["escalated_at"] == "2026-03-01T09:00:00.000007Z"
        assert rendered[0]["escalation"]["note"] == "call Ana"

    def test_an_empty_thread_renders_an_empty_list(self, thread):
        assert selectors.open_intentions_rendered(thread=thread, now=T0).parsed() == []

    def test_the_agents_intentions_of_no_thread_come_too_most_urgent_first(
        self, agent, thread, monkeypatch
    ):
        mine = IntentionFactory(agent=agent, thread=thread, due_at=T0 + timedelta(days=3))
        unthreaded_due = in_status(agent, IntentionStatus.DUE, thread=None)
        unthreaded_later = IntentionFactory(agent=agent, thread=None, due_at=T0 + timedelta(days=1))
        unthreaded_last = IntentionFactory(agent=agent, thread=None, due_at=T0 + timedelta(days=9))
        IntentionFactory(agent=agent, thread=ThreadFactory(agent=agent))  # another thread's
        IntentionFactory(thread=None)  # another agent's

        def listed():
            rendered = selectors.open_intentions_rendered(thread=thread, now=T0).parsed()
            return [r["id"] for r in rendered]

        ids = [str(i.pk) for i in (unthreaded_due, unthreaded_later, mine, unthreaded_last)]
        assert listed() == ids
        monkeypatch.setattr(selectors, "RESUME_AGENT_INTENTIONS", 2)
        assert listed() == ids[:3]  # the least urgent of no thread left out

    def test_the_predecessors_own_promises_of_no_thread_are_all_listed(
        self, agent, thread, monkeypatch
    ):
        """However many more urgent reminders the agent has, a successor gets every
        open intention of no thread that the session it succeeds made."""
        monkeypatch.setattr(selectors, "RESUME_AGENT_INTENTIONS", 2)
        urgent = [
            IntentionFactory(agent=agent, thread=None, due_at=T0 + timedelta(hours=n))
            for n in range(1, 4)
        ]
        promise = IntentionFactory(
            agent=agent, thread=None, due_at=T0 + timedelta(days=30), source_session="s1"
        )
        IntentionFactory(
            agent=agent, thread=None, due_at=T0 + timedelta(days=31), source_session="s0"
        )

        def listed(session):
            rendered = selectors.open_intentions_rendered(thread=thread, now=T0, session=session)
            return [r["id"] for r in rendered.parsed()]

        assert listed("s1") == [str(urgent[0].pk), str(urgent[1].pk), str(promise.pk)]
        assert listed("") == [str(urgent[0].pk), str(urgent[1].pk)]
