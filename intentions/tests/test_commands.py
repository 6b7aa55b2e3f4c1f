"""Management commands: intentions_sweep and intentions_tick."""

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from intentions.models import Intention
from intentions.services import engine, lifecycle
from intentions.services.lifecycle import (
    intention_cancel,
    intention_complete,
    intention_expire,
    intention_skip,
)
from intentions.tests.factories import (
    T0,
    IntentionFactory,
    event_types,
    head_seq,
    intentions_state,
    sim_agent,
    status_of,
    timeline,
)
from ledger.models import Event
from ledger.selectors import chain_verify
from ledger.services import event_append
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


def run(command: str, *args: str) -> list[str]:
    out = io.StringIO()
    call_command(command, *args, stdout=out, no_color=True)
    return out.getvalue().splitlines()


def waiting_on(agent, *dependencies, trigger_type="dependency"):
    return IntentionFactory(
        agent=agent, trigger_type=trigger_type, dependencies=[d.pk for d in dependencies]
    )


def without_cascade(monkeypatch, end):
    """End an intention the way it ended before the cascade existed: its
    dependents are left blocked."""
    with monkeypatch.context() as patch:
        patch.setattr(lifecycle, "lock_dependents_to_cancel", lambda intention: [])
        end()


def _pk(intention):
    return intention.pk


def line(intention, reason: str) -> str:
    return f"{intention.agent.name}  {intention.pk}  {intention.description[:60]!r}: {reason}"


@pytest.fixture
def agent():
    return sim_agent("sweeper")


@pytest.fixture
def left_blocked(agent, monkeypatch):
    """Blocked intentions left waiting on a cancelled, an expired and a
    skipped-out intention; a chain below one; and blocked ones that must stay."""
    cancelled, expired = IntentionFactory(agent=agent), IntentionFactory(agent=agent)
    daily = IntentionFactory(
        agent=agent, trigger_type="time", due_at=T0, rrule="FREQ=DAILY;COUNT=1"
    )
    on_cancelled = waiting_on(agent, cancelled)
    below = waiting_on(agent, on_cancelled, trigger_type="manual")
    on_expired = waiting_on(agent, expired, trigger_type="manual")
    on_daily = waiting_on(agent, daily)
    active = IntentionFactory(agent=agent)
    still_waiting = waiting_on(agent, active)
    done_once = IntentionFactory(agent=agent, trigger_type="time", due_at=T0, rrule="FREQ=DAILY")
    intention_complete(agent=agent, intention_id=done_once.pk)
    on_done_once = waiting_on(agent, done_once, active)
    without_cascade(monkeypatch, lambda: intention_cancel(agent=agent, intention_id=cancelled.pk))
    without_cascade(monkeypatch, lambda: intention_expire(agent=agent, intention_id=expired.pk))
    without_cascade(monkeypatch, lambda: intention_skip(agent=agent, intention_id=daily.pk))
    intention_cancel(agent=agent, intention_id=done_once.pk)  # done once: dooms nothing
    # Swept per ended dependency in pk order (two made in one millisecond may
    # be in either order), each one's chain below it in the order of the cascade.
    groups = sorted(
        [
            (
                cancelled.pk,
                [
                    (on_cancelled, f"dependency {cancelled.pk} cancelled"),
                    (below, f"dependency {on_cancelled.pk} cancelled"),
                ],
            ),
            (expired.pk, [(on_expired, f"dependency {expired.pk} expired")]),
            (daily.pk, [(on_daily, f"dependency {daily.pk} ended without success")]),
        ],
        key=lambda group: group[0],
    )
    swept = [each for _, group in groups for each in group]
    doomed = [intention for intention, _ in swept]
    assert {status_of(i) for i in [*doomed, still_waiting, on_done_once]} == {"blocked"}
    return {
        "lines": [line(intention, reason) for intention, reason in swept],
        "reasons": [reason for _, reason in swept],
        "doomed": doomed,
        "kept": [still_waiting, on_done_once],
    }


class TestIntentionsSweep:
    def test_cancels_what_waits_on_an_ended_dependency_as_the_cascade_would(
        self, agent, left_blocked
    ):
        since = head_seq(agent)

        output = run("intentions_sweep")

        assert output == [*left_blocked["lines"], "cancelled 4 blocked intention(s)"]
        assert [status_of(i) for i in left_blocked["doomed"]] == ["cancelled"] * 4
        assert [status_of(i) for i in left_blocked["kept"]] == ["blocked"] * 2
        reasons = left_blocked["reasons"]
        assert [timeline(i)[-1] for i in left_blocked["doomed"]] == [
            ("blocked", "cancelled", 1, reason) for reason in reasons
        ]
        # One intention.cancelled event each, as any cancel writes.
        assert event_types(agent, since) == ["intention.cancelled"] * 4
        assert [
            (e.payload["intention_id"], e.payload["reason"])
            for e in Event.objects.filter(agent=agent, seq__gt=since).order_by("seq")
        ] == [(str(i.pk), r) for i, r in zip(left_blocked["doomed"], reasons, strict=True)]
        assert chain_verify(agent=agent).ok

    def test_a_second_run_does_nothing(self, agent, left_blocked):
        run("intentions_sweep")
        before = intentions_state()

        assert run("intentions_sweep") == ["cancelled 0 blocked intention(s)"]
        assert intentions_state() == before

    def test_dry_run_lists_them_and_writes_nothing(self, agent, left_blocked):
        before = intentions_state()

        output = run("intentions_sweep", "--dry-run")

        assert output == [*left_blocked["lines"], "would cancel 4 blocked intention(s)"]
        assert intentions_state() == before
        assert run("intentions_sweep") == [
            *left_blocked["lines"],
            "cancelled 4 blocked intention(s)",
        ]

    def test_agent_limits_it_by_name_or_id(self, agent, left_blocked, monkeypatch):
        other = sim_agent("other")
        theirs = IntentionFactory(agent=other)
        waiting = waiting_on(other, theirs)
        without_cascade(monkeypatch, lambda: intention_cancel(agent=other, intention_id=theirs.pk))

        assert run("intentions_sweep", "--agent", "other") == [
            line(waiting, f"dependency {theirs.pk} cancelled"),
            "cancelled 1 blocked intention(s)",
        ]
        assert [status_of(i) for i in left_blocked["doomed"]] == ["blocked"] * 4
        assert run("intentions_sweep", "--agent", str(agent.pk))[-1] == (
            "cancelled 4 blocked intention(s)"
        )

    @pytest.mark.parametrize("name", ["nobody", "00000000-0000-0000-0000-000000000000"])
    def test_an_unknown_agent_is_an_error(self, agent, left_blocked, name):
        before = intentions_state()

        with pytest.raises(CommandError, match=f"no agent '{name}'"):
            run("intentions_sweep", "--agent", name)
        assert intentions_state() == before

    @pytest.mark.parametrize("dry_run", [True, False])
    def test_one_waiting_on_two_ended_dependencies_is_swept_once(self, agent, monkeypatch, dry_run):
        first, second = sorted([IntentionFactory(agent=agent) for _ in range(2)], key=_pk)
        both = waiting_on(agent, first, second)
        for each in (first, second):
            without_cascade(
                monkeypatch, lambda each=each: intention_cancel(agent=agent, intention_id=each.pk)
            )

        output = run("intentions_sweep", *(["--dry-run"] if dry_run else []))

        assert output == [
            line(both, f"dependency {first.pk} cancelled"),
            f"{'would cancel' if dry_run else 'cancelled'} 1 blocked intention(s)",
        ]

    def test_nothing_left_blocked_nothing_to_do(self, agent):
        first = IntentionFactory(agent=agent)
        waiting_on(agent, first)
        intention_cancel(agent=agent, intention_id=first.pk)  # the cascade ran

        assert run("intentions_sweep") == ["cancelled 0 blocked intention(s)"]


class TestIntentionsTick:
    def test_fires_what_is_due_for_wall_clock_agents_once(self):
        agent = AgentFactory()
        due = IntentionFactory(
            agent=agent, trigger_type="time", due_at=timezone.now() - timedelta(minutes=1)
        )
        watcher = IntentionFactory(
            agent=agent, trigger_type="event", trigger_spec={"event_type": "deploy.done"}
        )
        later = IntentionFactory(agent=agent, trigger_type="time", due_at=timezone.now() + DAY)
        simulated = sim_agent("simulated")
        IntentionFactory(agent=simulated, trigger_type="time", due_at=T0 - DAY)
        event_append(agent=agent, event_type="deploy.done")  # its post-commit task never ran

        output = run("intentions_tick")

        assert output == [
            f"fired  {due.pk} #1  (time)",
            f"fired  {watcher.pk} #1  (events)",
            "fired 2 intention(s)",
        ]
        assert (status_of(due), status_of(watcher), status_of(later)) == ("due", "due", "active")
        assert run("intentions_tick") == ["fired 0 intention(s)"]

    def test_one_agent_at_its_own_clock(self):
        agent = sim_agent("simulated")
        due = IntentionFactory(agent=agent, trigger_type="time", due_at=T0)
        other = AgentFactory()
        left = IntentionFactory(
            agent=other, trigger_type="time", due_at=timezone.now() - timedelta(minutes=1)
        )

        assert run("intentions_tick", "--agent", "simulated") == [
            f"fired  {due.pk} #1  (time)",
            "fired 1 intention(s), rehearsed 0",
        ]
        assert (status_of(due), status_of(left)) == ("due", "active")
        assert Intention.objects.get(pk=due.pk).last_fired_at == T0
        assert engine.now_for(agent.pk) == T0

    def test_it_prints_what_escalated_once(self):
        agent = sim_agent("simulated")
        due = IntentionFactory(
            agent=agent,
            trigger_type="time",
            due_at=T0,
            escalation_policy={"overdue_seconds": 60},
        )
        run("intentions_tick", "--agent", "simulated")
        engine.clock_set(agent=agent, now=T0 + timedelta(minutes=1))

        assert run("intentions_tick", "--agent", "simulated") == [
            f"escalated  {due.pk} #1  (overdue)",
            "fired 0 intention(s), rehearsed 0, escalated 1",
        ]
        assert run("intentions_tick", "--agent", "simulated") == [
            "fired 0 intention(s), rehearsed 0"
        ]

    def test_an_unknown_agent_is_an_error(self):
        with pytest.raises(CommandError, match="no agent 'nobody'"):
            run("intentions_tick", "--agent", "nobody")
