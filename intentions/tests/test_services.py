"""intentions.services: working state, succession handover, and an intention's life.

Every rule is stated as the exact rows and ledger events it leaves; every
refusal as the exact error and "nothing written" (every intentions table and
the ledger unchanged). Agents run on a simulated clock (T0) so times are exact.
"""

import dataclasses
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection

from intentions.models import (
    MAX_STATE_BYTES,
    TRANSITIONS,
    Handover,
    Intention,
    IntentionDependency,
    IntentionStatus,
    PendingItem,
    Thread,
    WorkingState,
)
from intentions.services import engine
from intentions.services.lifecycle import (
    intention_cancel,
    intention_complete,
    intention_expire,
    intention_fail,
    intention_fire,
    intention_set_dependencies,
    intention_skip,
    intention_start,
)
from intentions.services.state import (
    STATE_FIELDS,
    ResumePackage,
    handover_start,
    pending_clear,
    thread_acknowledge,
    thread_get_or_create,
    thread_resume,
    working_state_current,
    working_state_write,
)
from intentions.tests.factories import (
    STATUSES,
    T0,
    IntentionFactory,
    ThreadFactory,
    at,
    event_types,
    firings,
    head_seq,
    in_status,
    intentions_state,
    minutes,
    sim_agent,
    status_of,
    timeline,
)
from ledger.models import Event
from piper.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge, Unprocessable
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

ALLOWED = ", ".join(STATE_FIELDS)


@pytest.fixture
def agent():
    return sim_agent("owner")


@pytest.fixture
def thread(agent):
    return ThreadFactory(agent=agent, key="main", session_id="s1")


def refused(error_class, call) -> tuple[str, str, object]:
    """Call; it must raise error_class and write nothing. Returns (code, message, details)."""
    before = intentions_state()
    with pytest.raises(error_class) as raised:
        call()
    assert intentions_state() == before
    return raised.value.code, raised.value.message, raised.value.details


def write(agent, thread, state, based_on, session_id="s1"):
    return working_state_write(
        agent=agent, thread=thread, state=state, based_on=based_on, session_id=session_id
    )


# ------------------------------------------------------------------ working state


class TestThreads:
    def test_created_on_first_use_then_found(self, agent):
        thread, created = thread_get_or_create(agent=agent, key="  main ", session_id="s1")
        again, created_again = thread_get_or_create(agent=agent, key="main", session_id="s2")

        assert (created, created_again) == (True, False)
        assert again.pk == thread.pk
        assert (thread.key, thread.status, thread.session_id, thread.current_version) == (
            "main",
            Thread.Status.ACTIVE,
            "s1",
            0,
        )

    @pytest.mark.parametrize("key", ["", "   ", "x" * 201, None, 7])
    def test_bad_keys(self, agent, key):
        code, message, details = refused(
            InvalidInput, lambda: thread_get_or_create(agent=agent, key=key)
        )

        assert (code, message, details) == (
            "invalid",
            "thread key: 1-200 characters",
            {"key": ["invalid"]},
        )

    def test_same_key_for_two_agents_is_two_threads(self, agent):
        other = AgentFactory()
        mine = ThreadFactory(agent=agent, key="main")
        theirs = ThreadFactory(agent=other, key="main")

        assert mine.pk != theirs.pk


class TestWorkingStateVersions:
    def test_each_write_is_a_new_version_and_a_ledger_event(self, agent, thread):
        first = write(agent, thread, {"goal": "ship v1", "assumptions": ["a"]}, 0)
        second = write(agent, thread, {"goal": "ship v1", "subgoal": "tests"}, 1, "s2")

        assert [(v.version, v.based_on, v.state, v.session_id) for v in (first, second)] == [
            (1, 0, {"goal": "ship v1", "assumptions": ["a"]}, "s1"),
            (2, 1, {"goal": "ship v1", "subgoal": "tests"}, "s2"),
        ]
        assert first.size_bytes == len('{"goal":"ship v1","assumptions":["a"]}')
        assert working_state_current(thread=thread) == second
        assert list(
            WorkingState.objects.filter(thread=thread).values_list("version", flat=True)
        ) == [2, 1]
        thread.refresh_from_db()
        assert (thread.current_version, thread.session_id) == (2, "s2")
        events = list(Event.objects.filter(agent=agent).order_by("seq"))
        assert [(e.event_type, e.session_id, e.payload) for e in events] == [
            ("thread.created", "s1", {"thread_id": str(thread.pk), "thread": "main"}),
            (
                "working_state.written",
                "s1",
                {
                    "thread_id": str(thread.pk),
                    "thread": "main",
                    "version": 1,
                    "state": {"goal": "ship v1", "assumptions": ["a"]},
                    "working_state_id": str(first.pk),
                },
            ),
            (
                "working_state.written",
                "s2",
                {
                    "thread_id": str(thread.pk),
                    "thread": "main",
                    "version": 2,
                    "state": {"goal": "ship v1", "subgoal": "tests"},
                    "working_state_id": str(second.pk),
                },
            ),
        ]
        assert (first.source_event, second.source_event) == tuple(events[1:])

    def test_every_field_of_the_checkpoint_is_kept_exactly(self, agent, thread):
        state = {
            "goal": "migrate the billing service",
            "subgoal": "move invoices",
            "goal_stack": ["migrate", "invoices"],
            "plan": [{"step": 1, "do": "dump"}, {"step": 2, "do": "load"}],
            "assumptions": ["db is read-only at night", "backups exist", "no new tenants"],
            "unresolved_questions": ["who owns the cron job?"],
            "artifacts": [
                {
                    "name": "dump",
                    "ref": "s3://b/dump.sql",
                    "checked_at": "2030-01-07T08:00:00Z",
                    "freshness_seconds": 3600,
                }
            ],
            "tool_handles": [{"name": "psql", "ref": "pid:4242"}],
            "last_action": {"tool": "psql", "args": ["-c", "select 1"]},
            "last_observation": "1 row",
            "blockers": ["waiting for DBA"],
            "decision_points": {"cutover": "after 02:00"},
            "failed_branches": [{"branch": "pg_dump --jobs 8", "reason": "OOM"}],
            "next_action": "load invoices",
            "source_session": "s1",
        }
        assert set(state) == set(STATE_FIELDS)

        write(agent, thread, state, 0)

        assert working_state_current(thread=thread).state == state

    def test_nulls_are_allowed_for_every_field(self, agent, thread):
        state = dict.fromkeys(STATE_FIELDS)

        assert write(agent, thread, state, 0).state == state

    @pytest.mark.parametrize("based_on", [0, 2, 5])
    def test_a_stale_or_future_base_is_a_conflict_and_writes_nothing(self, agent, thread, based_on):
        write(agent, thread, {"goal": "a"}, 0)

        code, message, details = refused(
            Conflict, lambda: write(agent, thread, {"goal": "b"}, based_on)
        )

        assert (code, message, details) == (
            "stale_version",
            f"working state is at version 1, not {based_on}: read it, merge your change, and "
            "write again",
            {"current_version": 1, "based_on": based_on},
        )
        assert working_state_current(thread=thread).state == {"goal": "a"}

    @pytest.mark.parametrize("based_on", [-1, True, "0", 1.0, None])
    def test_based_on_must_be_a_version_number(self, agent, thread, based_on):
        code, message, details = refused(InvalidInput, lambda: write(agent, thread, {}, based_on))

        assert (code, message, details) == (
            "invalid",
            "based_on must be the version you read (0 for a new thread)",
            {"based_on": ["invalid"]},
        )

    def test_another_agents_thread_is_not_found(self, agent):
        theirs = ThreadFactory(agent=AgentFactory())

        code, message, _ = refused(NotFound, lambda: write(agent, theirs, {"goal": "x"}, 0))

        assert (code, message) == ("not_found", f"thread {theirs.pk} not found")


class TestWorkingStateSize:
    def test_exactly_at_the_limit_is_accepted(self, agent, thread):
        state = {"goal": "x" * (MAX_STATE_BYTES - len('{"goal":""}'))}

        assert write(agent, thread, state, 0).size_bytes == MAX_STATE_BYTES

    @pytest.mark.parametrize(("char", "width"), [("x", 1), ("é", 2), ("€", 3)])
    def test_one_byte_over_is_payload_too_large_counting_utf8_bytes(
        self, agent, thread, char, width
    ):
        room = MAX_STATE_BYTES - len('{"goal":""}')
        text = char * (room // width) + "x" * (room % width + 1)
        size = MAX_STATE_BYTES + 1

        code, message, details = refused(
            PayloadTooLarge, lambda: write(agent, thread, {"goal": text}, 0)
        )

        assert (code, details) == ("state_too_large", {"limit_bytes": 65536, "size_bytes": size})
        assert message == (
            f"working state is {size} bytes; the limit is 65536. Keep the working set (goal, "
            "plan, open questions…) and put transcripts in events or sources."
        )


class TestWorkingStateShape:
    @pytest.mark.parametrize(
        ("state", "details"),
        [
            ("just text", {"state": ["must be a JSON object"]}),
            (["goal"], {"state": ["must be a JSON object"]}),
            ({"transcript": "…"}, {"transcript": [f"unknown field; allowed: {ALLOWED}"]}),
            ({"goal": 5}, {"goal": ["must be text"]}),
            ({"subgoal": ["a"]}, {"subgoal": ["must be text"]}),
            ({"assumptions": "a"}, {"assumptions": ["must be a list of text"]}),
            ({"assumptions": ["a", 1]}, {"assumptions": ["must be a list of text"]}),
            ({"blockers": [None]}, {"blockers": ["must be a list of text"]}),
            ({"artifacts": ["s3://x"]}, {"artifacts": ["must be a list of objects"]}),
            ({"failed_branches": {"b": 1}}, {"failed_branches": ["must be a list of objects"]}),
            (
                {"artifacts": [{"name": "a", "checked_at": "yesterday"}]},
                {"artifacts": ["[0].checked_at: an ISO 8601 time with a zone"]},
            ),
            (
                {"tool_handles": [{}, {"checked_at": "2030-01-07T08:00:00"}]},
                {"tool_handles": ["[1].checked_at: an ISO 8601 time with a zone"]},
            ),
            (
                {"artifacts": [{"checked_at": 1700000000}]},
                {"artifacts": ["[0].checked_at: an ISO 8601 time with a zone"]},
            ),
            (
                {"artifacts": [{"freshness_seconds": -1}]},
                {"artifacts": ["[0].freshness_seconds: a whole number ≥ 0"]},
            ),
            (
                {"artifacts": [{"freshness_seconds": True}]},
                {"artifacts": ["[0].freshness_seconds: a whole number ≥ 0"]},
            ),
            (
                {"artifacts": [{"freshness_seconds": "60"}]},
                {"artifacts": ["[0].freshness_seconds: a whole number ≥ 0"]},
            ),
            (
                {"plan": float("nan")},
                {"state": ["state.plan: numbers must be finite (no NaN or infinity)"]},
            ),
            (
                {"next_action": "a\x00b"},
                {"state": ["state.next_action: text must not contain NUL (\\u0000) characters"]},
            ),
        ],
    )
    def test_refused_with_the_field_named(self, agent, thread, state, details):
        code, message, got = refused(InvalidInput, lambda: write(agent, thread, state, 0))

        name, messages = next(iter(details.items()))
        assert (code, message, got) == ("invalid", f"{name}: {messages[0]}", details)

    def test_every_problem_is_listed_the_first_in_the_message(self, agent, thread):
        state = {"goal": 1, "extra": 2, "artifacts": [{"checked_at": "x", "freshness_seconds": -5}]}

        code, message, details = refused(InvalidInput, lambda: write(agent, thread, state, 0))

        assert (code, message) == ("invalid", "goal: must be text")
        assert details == {
            "goal": ["must be text"],
            "extra": [f"unknown field; allowed: {ALLOWED}"],
            "artifacts": [
                "[0].checked_at: an ISO 8601 time with a zone",
                "[0].freshness_seconds: a whole number ≥ 0",
            ],
        }

    def test_deep_nesting_is_blamed_on_the_state(self, agent, thread):
        plan: list = []
        for _ in range(98):
            plan = [plan]

        code, message, details = refused(
            InvalidInput, lambda: write(agent, thread, {"plan": plan}, 0)
        )

        assert list(details) == ["state"]
        assert message.startswith("state: state.plan")


class TestConcurrentWriters:
    pytestmark = pytest.mark.django_db(transaction=True)

    def test_ten_writers_from_the_same_version_one_wins_the_rest_are_told_stale(self):
        agent = AgentFactory()
        thread = ThreadFactory(agent=agent, key="main")
        write(agent, thread, {"goal": "v1"}, 0)
        start = threading.Barrier(10)

        def attempt(i):
            try:
                start.wait(timeout=30)
                write(agent, thread, {"goal": f"writer {i}"}, 1)
                return "written"
            except Conflict as exc:
                return exc.code
            except Exception:
                return traceback.format_exc(limit=3)
            finally:
                connection.close()

        with ThreadPoolExecutor(10) as pool:
            outcomes = list(pool.map(attempt, range(10)))

        assert sorted(outcomes) == ["stale_version"] * 9 + ["written"]
        assert list(
            WorkingState.objects.filter(thread=thread)
            .order_by("version")
            .values_list("version", "based_on")
        ) == [(1, 0), (2, 1)]
        assert event_types(agent) == ["thread.created"] + ["working_state.written"] * 2


# ------------------------------------------------------------------------ handover


def checkpoint_state(now=T0) -> dict:
    return {
        "goal": "g",
        "artifacts": [
            {
                "name": "report",
                "ref": "s3://r",
                "checked_at": (now - timedelta(hours=2)).isoformat(),
                "freshness_seconds": 3600,
            },
            {
                "name": "fresh",
                "checked_at": (now - timedelta(minutes=10)).isoformat(),
                "freshness_seconds": 3600,
            },
            {
                "name": "exactly at its freshness",
                "checked_at": (now - timedelta(hours=1)).isoformat(),
                "freshness_seconds": 3600,
            },
            {"name": "undeclared", "ref": "file://x"},
        ],
        "tool_handles": [
            {
                "name": "browser",
                "checked_at": (now - timedelta(seconds=61)).isoformat(),
                "freshness_seconds": 60,
            },
            {"name": "shell", "checked_at": now.isoformat(), "freshness_seconds": 0},
        ],
        "failed_branches": [{"branch": "retry the flaky API", "reason": "rate limited"}],
        "next_action": "n",
    }


class TestHandover:
    def test_start_freezes_and_records_the_succession(self, agent, thread):
        write(agent, thread, {"goal": "g"}, 0)

        handover = handover_start(agent=agent, thread=thread, to_session="s2", note="shift ends")

        thread.refresh_from_db()
        assert thread.status == Thread.Status.HANDING_OVER
        assert (
            handover.from_session,
            handover.to_session,
            handover.frozen_version,
            handover.status,
            handover.note,
        ) == ("s1", "s2", 1, Handover.Status.PENDING, "shift ends")
        event = handover.succession_event
        assert (event.event_type, event.session_id, event.payload) == (
            "thread.handover_started",
            "s1",
            {
                "thread_id": str(thread.pk),
                "thread": "main",
                "from_session": "s1",
                "to_session": "s2",
                "frozen_version": 1,
                "note": "shift ends",
                "handover_id": str(handover.pk),
            },
        )

    def test_the_state_is_frozen_until_acknowledged_even_for_the_successor(self, agent, thread):
        write(agent, thread, {"goal": "g"}, 0)
        handover_start(agent=agent, thread=thread, to_session="s2")
        frozen = (
            "thread_frozen",
            "thread 'main' is frozen for a handover; the successor resumes and acknowledges it "
            "first",
            {},
        )

        assert refused(Conflict, lambda: write(agent, thread, {"goal": "x"}, 1)) == frozen
        thread_resume(agent=agent, thread=thread, session_id="s2")
        assert refused(Conflict, lambda: write(agent, thread, {"goal": "x"}, 1, "s2")) == frozen
        thread_acknowledge(agent=agent, thread=thread, session_id="s2")
        assert write(agent, thread, {"goal": "x"}, 1, "s2").version == 2

    @pytest.mark.parametrize("to_session", ["", "   ", None])
    def test_the_successor_must_be_named(self, agent, thread, to_session):
        assert refused(
            InvalidInput, lambda: handover_start(agent=agent, thread=thread, to_session=to_session)
        ) == ("invalid", "name the inheriting session", {"to_session": ["required"]})

    def test_one_handover_at_a_time(self, agent, thread):
        handover_start(agent=agent, thread=thread, to_session="s2")

        assert refused(
            Conflict, lambda: handover_start(agent=agent, thread=thread, to_session="s3")
        ) == ("handover_open", "thread 'main' is already being handed over to 's2'", {})

    def test_only_the_named_successor_resumes(self, agent, thread):
        handover_start(agent=agent, thread=thread, to_session="s2")

        assert refused(
            Conflict, lambda: thread_resume(agent=agent, thread=thread, session_id="s3")
        ) == (
            "not_the_successor",
            "thread 'main' is being handed over to 's2', not 's3'",
            {},
        )

    def test_acknowledge_only_after_resume_and_only_by_the_successor(self, agent, thread):
        assert refused(
            Conflict, lambda: thread_acknowledge(agent=agent, thread=thread, session_id="s2")
        ) == ("no_handover", "thread 'main' has no open handover", {})
        handover_start(agent=agent, thread=thread, to_session="s2")
        assert refused(
            Conflict, lambda: thread_acknowledge(agent=agent, thread=thread, session_id="s2")
        ) == ("not_resumed", "resume the thread before acknowledging the handover", {})
        thread_resume(agent=agent, thread=thread, session_id="s2")
        assert refused(
            Conflict, lambda: thread_acknowledge(agent=agent, thread=thread, session_id="s3")
        ) == ("not_the_successor", "only 's2' can acknowledge this handover", {})

    def test_the_whole_succession_in_the_ledger_and_the_rows(self, agent, thread):
        write(agent, thread, {"goal": "g"}, 0)
        open_one = IntentionFactory(agent=agent, thread=thread)
        done = in_status(agent, IntentionStatus.COMPLETED, thread=thread)
        cancelled = in_status(agent, IntentionStatus.CANCELLED, thread=thread)
        elsewhere = IntentionFactory(agent=agent)
        since = head_seq(agent)

        handover = handover_start(agent=agent, thread=thread, to_session="s2")
        thread_resume(agent=agent, thread=thread, session_id="s2")
        again = thread_resume(agent=agent, thread=thread, session_id="s2")
        acknowledged = thread_acknowledge(agent=agent, thread=thread, session_id="s2")

        assert again.handover.status == Handover.Status.RESUMED
        assert event_types(agent, since) == [
            "thread.handover_started",
            "thread.resumed",
            "thread.handover_acknowledged",
        ]
        resumed, acked = Event.objects.filter(agent=agent, seq__gt=since + 1).order_by("seq")
        # What the successor was shown: the thread's open intention and the agent's
        # threadless one, not the finished ones (suite H's open items that survived).
        surfaced = resumed.payload["surfaced"]
        assert sorted(surfaced) == sorted([str(open_one.pk), str(elsewhere.pk)])
        assert (resumed.session_id, resumed.payload) == (
            "s2",
            {
                "thread_id": str(thread.pk),
                "handover_id": str(handover.pk),
                "session": "s2",
                "surfaced": surfaced,
            },
        )
        assert Handover.objects.get(pk=handover.pk).surfaced == surfaced
        assert (acked.session_id, acked.payload) == (
            "s2",
            {"thread_id": str(thread.pk), "handover_id": str(handover.pk), "session": "s2"},
        )
        assert acknowledged.status == Handover.Status.ACKNOWLEDGED
        assert (acknowledged.resumed_at, acknowledged.acknowledged_at) == (
            resumed.recorded_at,
            acked.recorded_at,
        )
        thread.refresh_from_db()
        assert (thread.status, thread.session_id) == (Thread.Status.ACTIVE, "s2")
        assert {
            i.pk: i.inherited_by
            for i in Intention.objects.filter(
                pk__in=[open_one.pk, done.pk, cancelled.pk, elsewhere.pk]
            )
        } == {open_one.pk: "s2", done.pk: "", cancelled.pk: "", elsewhere.pk: ""}

    def test_a_new_handover_may_start_once_the_last_is_acknowledged(self, agent, thread):
        handover_start(agent=agent, thread=thread, to_session="s2")
        thread_resume(agent=agent, thread=thread, session_id="s2")
        thread_acknowledge(agent=agent, thread=thread, session_id="s2")

        second = handover_start(agent=agent, thread=thread, to_session="s3")

        assert (second.from_session, second.to_session) == ("s2", "s3")

    def test_the_successor_fires_under_its_own_session(self, agent, thread):
        intention = IntentionFactory(agent=agent, thread=thread, source_session="s1")
        handover_start(agent=agent, thread=thread, to_session="s2")
        thread_resume(agent=agent, thread=thread, session_id="s2")
        thread_acknowledge(agent=agent, thread=thread, session_id="s2")

        intention_fire(agent=agent, intention_id=intention.pk)

        assert Event.objects.get(agent=agent, event_type="intention.fired").session_id == "s2"


class TestWatchedDependencies:
    """An artifact that watches a fact is re-checked when the fact's current value
    became true after the artifact's last check — a real change during the
    succession, whatever its freshness window."""

    def _checkpoint(self, agent, thread, checked_at):
        write(
            agent,
            thread,
            {
                "artifacts": [
                    {
                        "name": "release notes",
                        "checked_at": checked_at.isoformat(),
                        "freshness_seconds": 86400,  # a day: no expiry in these tests
                        "watch": {"subject": "api-gateway", "predicate": "version"},
                    }
                ]
            },
            0,
        )

    def _fact(self, agent, value, valid_from):
        from facts.services import ClaimInput, facts_assert

        facts_assert(
            agent=agent,
            claims=[
                ClaimInput(
                    subject="api-gateway", predicate="version", value=value, valid_from=valid_from
                )
            ],
        )

    def test_a_change_after_the_check_is_reported_with_the_new_value(self, agent, thread):
        self._fact(agent, "2.3", T0 - minutes(120))
        self._checkpoint(agent, thread, T0 - minutes(60))
        self._fact(agent, "2.4", T0 - minutes(10))  # changed while the thread was handed over
        handover_start(agent=agent, thread=thread, to_session="s2")
        [item] = thread_resume(agent=agent, thread=thread, session_id="s2").recheck
        assert (item["name"], item["reason"], item["current_value"]) == (
            "release notes",
            "changed",
            ["2.4"],
        )
        assert item["changed_at"] == (T0 - minutes(10)).isoformat()

    def test_no_change_or_a_change_before_the_check_is_not_reported(self, agent, thread):
        self._fact(agent, "2.3", T0 - minutes(120))
        self._checkpoint(agent, thread, T0 - minutes(60))
        assert thread_resume(agent=agent, thread=thread, session_id="s1").recheck == []

    def test_a_fact_never_stated_is_no_change(self, agent, thread):
        self._checkpoint(agent, thread, T0 - minutes(60))
        assert thread_resume(agent=agent, thread=thread, session_id="s1").recheck == []

    @pytest.mark.parametrize(
        ("item", "problem"),
        [
            (
                {"name": "x", "checked_at": "2030-01-07T08:00:00Z", "watch": "api-gateway"},
                "[0].watch: an object with exactly subject and predicate (the fact it depends on)",
            ),
            (
                {
                    "name": "x",
                    "checked_at": "2030-01-07T08:00:00Z",
                    "watch": {"subject": "", "predicate": "v"},
                },
                "[0].watch: subject: 1-200 characters",
            ),
            (
                {"name": "x", "watch": {"subject": "gw", "predicate": "version"}},
                "[0].watch: needs checked_at (a change is one after the last check)",
            ),
        ],
    )
    def test_a_bad_watch_is_refused_naming_the_item(self, agent, thread, item, problem):
        code, _, details = refused(
            InvalidInput, lambda: write(agent, thread, {"artifacts": [item]}, 0)
        )
        assert details == {"artifacts": [problem]}


class TestResumePackage:
    def test_the_package_order(self):
        assert [f.name for f in dataclasses.fields(ResumePackage)] == [
            "thread",
            "handover",
            "checkpoint",
            "intentions",
            "recheck",
            "failed_branches",
            "pending",
            "now",
        ]

    def test_what_the_successor_gets(self, agent, thread):
        write(agent, thread, {"goal": "old"}, 0)
        write(agent, thread, checkpoint_state(), 1)
        later = IntentionFactory(
            agent=agent, thread=thread, trigger_type="time", due_at=T0 + minutes(90)
        )
        sooner = IntentionFactory(
            agent=agent, thread=thread, trigger_type="time", due_at=T0 + minutes(30)
        )
        manual_high = IntentionFactory(agent=agent, thread=thread, priority=5)
        manual_low = IntentionFactory(agent=agent, thread=thread)
        overdue = IntentionFactory(
            agent=agent, thread=thread, trigger_type="time", due_at=T0 - minutes(5)
        )
        blocked = in_status(agent, IntentionStatus.BLOCKED, thread=thread)
        waited_on = Intention.objects.get(agent=agent, thread=None)  # what `blocked` waits for
        executing = in_status(agent, IntentionStatus.EXECUTING, thread=thread)
        due = in_status(agent, IntentionStatus.DUE, thread=thread)
        for status in (
            IntentionStatus.COMPLETED,
            IntentionStatus.CANCELLED,
            IntentionStatus.EXPIRED,
        ):
            in_status(agent, status, thread=thread)
        IntentionFactory(agent=agent, thread=ThreadFactory(agent=agent), trigger_type="manual")
        handover_start(agent=agent, thread=thread, to_session="s2")

        package = thread_resume(agent=agent, thread=thread, session_id="s2")

        assert package.now == T0
        assert package.checkpoint.version == 2
        assert package.checkpoint.state == checkpoint_state()
        assert [i["id"] for i in package.intentions.parsed()] == [
            str(x.pk)
            for x in (
                due,
                executing,
                overdue,
                sooner,
                later,
                manual_high,
                manual_low,
                waited_on,  # the agent's, of no thread: a successor sees it too
                blocked,
            )
        ]
        assert package.recheck == [
            {
                "kind": "artifact",
                "name": "report",
                "ref": "s3://r",
                "checked_at": (T0 - timedelta(hours=2)).isoformat(),
                "freshness_seconds": 3600,
                "age_seconds": 7200,
                "reason": "expired",
            },
            {
                "kind": "tool_handle",
                "name": "browser",
                "checked_at": (T0 - timedelta(seconds=61)).isoformat(),
                "freshness_seconds": 60,
                "age_seconds": 61,
                "reason": "expired",
            },
        ]
        assert package.failed_branches == [
            {"branch": "retry the flaky API", "reason": "rate limited"}
        ]
        assert [(p.intention_id, p.kind, p.occurrence) for p in package.pending] == [
            (executing.pk, PendingItem.Kind.FIRED, 1),
            (due.pk, PendingItem.Kind.FIRED, 1),
        ]

    def test_recheck_follows_the_engine_clock(self, agent, thread):
        write(agent, thread, checkpoint_state(), 0)
        at(agent, T0 + timedelta(hours=1))

        package = thread_resume(agent=agent, thread=thread, session_id="s1")

        assert [(r["name"], r["age_seconds"]) for r in package.recheck] == [
            ("report", 3 * 3600),
            ("fresh", 3600 + 600),
            ("exactly at its freshness", 7200),
            ("browser", 3600 + 61),
            ("shell", 3600),
        ]

    def test_an_empty_thread_resumes_to_an_empty_package(self, agent, thread):
        package = thread_resume(agent=agent, thread=thread, session_id="anyone")

        assert (
            package.handover,
            package.checkpoint,
            package.intentions.parsed(),
            package.recheck,
            package.failed_branches,
            package.pending,
        ) == (None, None, [], [], [], [])

    def test_cleared_pending_items_leave_the_package(self, agent, thread):
        first = in_status(agent, IntentionStatus.DUE, thread=thread)
        second = in_status(agent, IntentionStatus.DUE, thread=thread)
        item = PendingItem.objects.get(intention=first)

        assert pending_clear(agent=agent, thread=thread, item_ids=[item.pk]) == 1
        assert pending_clear(agent=agent, thread=thread, item_ids=[item.pk]) == 0
        package = thread_resume(agent=agent, thread=thread, session_id="s1")
        assert [p.intention_id for p in package.pending] == [second.pk]

    def test_another_agents_thread_is_not_found(self, agent):
        theirs = ThreadFactory(agent=AgentFactory())

        assert refused(
            NotFound, lambda: thread_resume(agent=agent, thread=theirs, session_id="s1")
        ) == ("not_found", f"thread {theirs.pk} not found", {})


# ------------------------------------------------------------------- intentions


class TestCreate:
    def test_the_rows_and_the_ledger_event(self, agent, thread):
        intention = IntentionFactory(
            agent=agent,
            thread=thread,
            description="  water the plants ",
            trigger_type="time",
            due_at=T0 + minutes(60),
            not_before=T0 + minutes(30),
            priority=3,
            source_session="s1",
            required_context=["garden"],
            completion_criteria="soil is wet",
        )

        event = intention.source_event
        assert (event.event_type, event.session_id, event.source_type) == (
            "intention.created",
            "s1",
            "agent_inference",
        )
        assert event.payload == {
            "intention_id": str(intention.pk),
            "description": "water the plants",
            "trigger_type": "time",
            "trigger_spec": {},
            "due_at": "2030-01-07T10:00:00+00:00",
            "not_before": "2030-01-07T09:30:00+00:00",
            "rrule": "",
            "dependencies": [],
            "thread_id": str(thread.pk),
            # The rest of the row, for a rebuild from the ledger.
            "status": "active",
            "priority": 3,
            "expires_at": None,
            "required_context": ["garden"],
            "completion_criteria": "soil is wet",
            "retry_policy": {},
            "escalation_policy": {},
            "at": "2030-01-07T09:00:00+00:00",
        }
        assert (intention.created_at, intention.updated_at) == (event.recorded_at,) * 2
        assert (
            intention.description,
            intention.status,
            intention.occurrence,
            intention.armed_after_seq,
            intention.last_rehearsed_at,
            intention.last_fired_at,
            intention.required_context,
            intention.completion_criteria,
            intention.priority,
        ) == ("water the plants", "active", 1, event.seq, T0, None, ["garden"], "soil is wet", 3)
        assert timeline(intention) == [("", "active", 1, "created")]
        assert intention.transitions.get().at == T0
        assert intention.transitions.get().event == event

    def test_with_dependencies_it_waits_blocked(self, agent):
        first, second = IntentionFactory(agent=agent), IntentionFactory(agent=agent)

        intention = IntentionFactory(
            agent=agent, trigger_type="dependency", dependencies=[first.pk, second.pk, first.pk]
        )

        assert intention.status == IntentionStatus.BLOCKED
        assert intention.source_event.payload["dependencies"] == [str(first.pk), str(second.pk)]
        assert set(
            IntentionDependency.objects.filter(intention=intention).values_list(
                "depends_on", flat=True
            )
        ) == {first.pk, second.pk}
        assert timeline(intention) == [("", "blocked", 1, "created")]

    def test_dependencies_already_complete_fire_at_once(self, agent):
        first = in_status(agent, IntentionStatus.COMPLETED)

        intention = IntentionFactory(
            agent=agent, trigger_type="dependency", dependencies=[first.pk]
        )

        assert intention.status == IntentionStatus.DUE
        assert firings(intention) == [(1, "dependency", T0)]
        # Nothing to wait for: created armed, and fired in the same breath.
        assert timeline(intention) == [
            ("", "active", 1, "created"),
            ("active", "due", 1, "fired by dependency"),
        ]

    def test_a_recurring_intention_is_due_at_its_first_occurrence(self, agent):
        intention = IntentionFactory(
            agent=agent,
            trigger_type="time",
            due_at=T0 + minutes(1),
            rrule="FREQ=DAILY;BYHOUR=17;BYMINUTE=30",
        )

        assert intention.due_at == T0.replace(hour=17, minute=30)
        assert intention.source_event.payload["due_at"] == "2030-01-07T17:30:00+00:00"


SPEC_ERRORS = [
    ("event", "deploy", "must be a JSON object"),
    ("event", {}, "event_type: the event type to wait for (a glob like 'deploy.*' is fine)"),
    (
        "event",
        {"event_type": "  "},
        "event_type: the event type to wait for (a glob like 'deploy.*' is fine)",
    ),
    (
        "event",
        {"event_type": "x", "when": 1},
        "an event trigger has event_type and conditions only",
    ),
    ("event", {"event_type": "x", "conditions": {}}, "conditions: a list of at most 20"),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "a", "value": 1}] * 21},
        "conditions: a list of at most 20",
    ),
    (
        "event",
        {"event_type": "x", "conditions": ["payload.env == prod"]},
        "conditions[0]: a condition is {field, op, value}",
    ),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "a", "value": 1, "unit": "s"}]},
        "conditions[0]: a condition is {field, op, value}",
    ),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "", "value": 1}]},
        "conditions[0].field: a field name, e.g. 'payload.env'",
    ),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "a", "op": "like", "value": 1}]},
        "conditions[0].op: one of eq, ne, gt, gte, lt, lte, in, contains, exists, absent",
    ),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "a", "op": "gt"}]},
        "conditions[0].value: required for op 'gt'",
    ),
    (
        "event",
        {"event_type": "x", "conditions": [{"field": "a", "op": "in", "value": "abc"}]},
        "conditions[0].value: a list for op 'in'",
    ),
    (
        "state",
        {"predicate": "status"},
        "subject: required (an entity name or id; a predicate name)",
    ),
    (
        "state",
        {"subject": "svc", "predicate": ""},
        "predicate: required (an entity name or id; a predicate name)",
    ),
    (
        "state",
        {"subject": "svc", "predicate": "p", "field": "x"},
        "a state trigger has subject, predicate, op and value only",
    ),
    (
        "state",
        {"subject": "svc", "predicate": "p", "op": "matches", "value": 1},
        "state.op: one of eq, ne, gt, gte, lt, lte, in, contains, exists, absent",
    ),
    ("state", {"subject": "svc", "predicate": "p"}, "state.value: required for op 'eq'"),
    ("manual", {"x": 1}, "a manual trigger takes no spec (send {})"),
    ("dependency", {"all": True}, "a dependency trigger takes no spec (send {})"),
]


class TestCreateRefusals:
    @pytest.mark.parametrize(("trigger_type", "spec", "problem"), SPEC_ERRORS)
    def test_a_trigger_spec_that_does_not_parse(self, agent, trigger_type, spec, problem):
        extra = {"due_at": T0} if trigger_type == "time" else {}
        extra |= (
            {"dependencies": [IntentionFactory(agent=agent).pk]}
            if trigger_type == "dependency"
            else {}
        )

        assert refused(
            InvalidInput,
            lambda: IntentionFactory(
                agent=agent, trigger_type=trigger_type, trigger_spec=spec, **extra
            ),
        ) == ("invalid_trigger", f"trigger_spec: {problem}", {"trigger_spec": [problem]})

    def test_a_time_trigger_takes_no_spec(self, agent):
        assert (
            refused(
                InvalidInput,
                lambda: IntentionFactory(
                    agent=agent, trigger_type="time", due_at=T0, trigger_spec={"at": 1}
                ),
            )[1]
            == "trigger_spec: a time trigger takes no spec (send {})"
        )

    @pytest.mark.parametrize("trigger_type", ["", "cron", None, "TIME"])
    def test_an_unknown_trigger_type(self, agent, trigger_type):
        assert refused(
            InvalidInput, lambda: IntentionFactory(agent=agent, trigger_type=trigger_type)
        ) == (
            "invalid_trigger",
            "trigger_type must be one of ['time', 'event', 'state', 'dependency', 'manual']",
            {"trigger_type": ["unknown"]},
        )

    @pytest.mark.parametrize("description", ["", "  ", None, 5])
    def test_a_description_is_required(self, agent, description):
        assert refused(
            InvalidInput, lambda: IntentionFactory(agent=agent, description=description)
        ) == ("invalid", "describe what is to be done", {"description": ["required"]})

    @pytest.mark.parametrize(
        ("fields", "details"),
        [
            (
                {"due_at": T0, "not_before": T0 + minutes(1)},
                {"due_at": ["must not be before not_before"]},
            ),
            ({}, {"due_at": ["a time trigger needs due_at (or not_before)"]}),
            (
                {"due_at": T0.replace(tzinfo=None)},
                {"due_at": ["must carry a time zone, e.g. 2026-01-31T09:00:00Z"]},
            ),
            (
                {"due_at": T0, "expires_at": T0.replace(tzinfo=None)},
                {"expires_at": ["must carry a time zone, e.g. 2026-01-31T09:00:00Z"]},
            ),
            (
                {"due_at": T0, "trigger_type": "manual", "rrule": "FREQ=DAILY"},
                {"rrule": ["recurrence applies to time triggers"]},
            ),
        ],
    )
    def test_bad_times(self, agent, fields, details):
        fields = {"trigger_type": "time", **fields}
        name, messages = next(iter(details.items()))

        assert refused(InvalidInput, lambda: IntentionFactory(agent=agent, **fields)) == (
            "invalid",
            f"{name}: {messages[0]}",
            details,
        )

    @pytest.mark.parametrize(
        ("rrule", "problem"),
        [
            ("FREQ=SOMETIMES", "invalid 'FREQ': SOMETIMES"),
            ("hello", "not enough values to unpack (expected 2, got 1)"),
            (
                "FREQ=DAILY;UNTIL=20350101T000000",
                "RRULE UNTIL values must be specified in UTC when DTSTART is timezone-aware",
            ),
        ],
    )
    def test_an_rrule_that_does_not_parse(self, agent, rrule, problem):
        assert refused(
            InvalidInput,
            lambda: IntentionFactory(agent=agent, trigger_type="time", due_at=T0, rrule=rrule),
        ) == ("invalid_rrule", f"rrule: does not parse ({problem})", {"rrule": [problem]})

    @pytest.mark.parametrize(
        "rrule",
        [
            "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30",  # 30 February
            "FREQ=DAILY;UNTIL=20200101T000000Z",  # ended before it starts
            "FREQ=DAILY;COUNT=0",
        ],
    )
    def test_an_rrule_that_never_occurs(self, agent, rrule):
        assert refused(
            InvalidInput,
            lambda: IntentionFactory(agent=agent, trigger_type="time", due_at=T0, rrule=rrule),
        ) == ("invalid_rrule", "rrule: never occurs from its start", {"rrule": ["never occurs"]})

    def test_a_dependency_trigger_needs_dependencies(self, agent):
        assert refused(
            InvalidInput, lambda: IntentionFactory(agent=agent, trigger_type="dependency")
        ) == ("invalid", "a dependency trigger needs dependencies", {"dependencies": ["required"]})

    def test_an_unknown_dependency_or_another_agents_is_unprocessable(self, agent):
        mine = IntentionFactory(agent=agent)
        theirs = IntentionFactory(agent=AgentFactory())

        assert refused(
            Unprocessable,
            lambda: IntentionFactory(
                agent=agent, trigger_type="dependency", dependencies=[mine.pk, theirs.pk]
            ),
        ) == (
            "unknown_intention",
            f"dependency {theirs.pk} does not exist",
            {"dependencies": [str(theirs.pk)]},
        )

    def test_another_agents_thread_is_not_found(self, agent):
        theirs = ThreadFactory(agent=AgentFactory())

        assert refused(NotFound, lambda: IntentionFactory(agent=agent, thread=theirs)) == (
            "not_found",
            f"thread {theirs.pk} not found",
            {},
        )

    def test_unstorable_context(self, agent):
        assert refused(
            InvalidInput,
            lambda: IntentionFactory(agent=agent, required_context=[float("inf")]),
        ) == (
            "invalid",
            "required_context[0]: numbers must be finite (no NaN or infinity)",
            {
                "required_context": [
                    "required_context[0]: numbers must be finite (no NaN or infinity)"
                ]
            },
        )

    def test_an_unstorable_trigger_spec_is_blamed_on_the_spec(self, agent):
        spec = {"event_type": "x", "conditions": [{"field": "payload.n", "value": float("nan")}]}

        code, _, details = refused(
            InvalidInput,
            lambda: IntentionFactory(agent=agent, trigger_type="event", trigger_spec=spec),
        )

        assert (code, list(details)) == ("invalid_trigger", ["trigger_spec"])


class TestDependencies:
    def test_a_direct_cycle_is_unprocessable(self, agent):
        first = IntentionFactory(agent=agent)
        second = IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[first.pk])

        assert refused(
            Unprocessable,
            lambda: intention_set_dependencies(
                agent=agent, intention=first, dependencies=[second.pk]
            ),
        ) == (
            "dependency_cycle",
            "these dependencies would make a cycle: an intention would wait for itself",
            {"dependencies": [str(second.pk)]},
        )

    def test_a_transitive_cycle_is_unprocessable(self, agent):
        first = IntentionFactory(agent=agent)
        second = IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[first.pk])
        third = IntentionFactory(agent=agent, trigger_type="dependency", dependencies=[second.pk])
        other = IntentionFactory(agent=agent)

        code, _, details = refused(
            Unprocessable,
            lambda: intention_set_dependencies(
                agent=agent, intention=first, dependencies=[other.pk, third.pk]
            ),
        )

        assert (code, details) == (
            "dependency_cycle",
            {"dependencies": [str(other.pk), str(third.pk)]},
        )

    def test_waiting_for_itself_is_a_cycle(self, agent):
        first = IntentionFactory(agent=agent)

        assert (
            refused(
                Unprocessable,
                lambda: intention_set_dependencies(
                    agent=agent, intention=first, dependencies=[first.pk]
                ),
            )[0]
            == "dependency_cycle"
        )

    def test_an_unknown_dependency(self, agent):
        first = IntentionFactory(agent=agent)
        theirs = IntentionFactory(agent=AgentFactory())

        assert refused(
            Unprocessable,
            lambda: intention_set_dependencies(
                agent=agent, intention=first, dependencies=[theirs.pk]
            ),
        ) == (
            "unknown_intention",
            f"dependency {theirs.pk} does not exist",
            {"dependencies": [str(theirs.pk)]},
        )

    @pytest.mark.parametrize("status", [s for s in STATUSES if s not in ("active", "blocked")])
    def test_only_a_waiting_intention_changes_what_it_waits_for(self, agent, status):
        intention = in_status(agent, status)
        other = IntentionFactory(agent=agent)

        assert refused(
            Conflict,
            lambda: intention_set_dependencies(
                agent=agent, intention=intention, dependencies=[other.pk]
            ),
        ) == (
            "not_armed",
            f"intention is {status}; only a waiting one can change what it waits for",
            {},
        )

    def test_replacing_dependencies_with_completed_ones_fires_a_dependency_trigger(self, agent):
        intention = in_status(agent, IntentionStatus.BLOCKED, trigger_type="dependency")
        done = in_status(agent, IntentionStatus.COMPLETED)
        since = head_seq(agent)

        intention = intention_set_dependencies(
            agent=agent, intention=intention, dependencies=[done.pk]
        )

        assert intention.status == IntentionStatus.DUE
        assert event_types(agent, since) == ["intention.dependencies_set", "intention.fired"]
        assert list(
            IntentionDependency.objects.filter(intention=intention).values_list(
                "depends_on", flat=True
            )
        ) == [done.pk]

    def test_a_dependency_trigger_cannot_be_left_without_dependencies(self, agent):
        intention = in_status(agent, IntentionStatus.BLOCKED, trigger_type="dependency")

        assert refused(
            InvalidInput,
            lambda: intention_set_dependencies(agent=agent, intention=intention, dependencies=[]),
        ) == ("invalid", "a dependency trigger needs dependencies", {"dependencies": ["required"]})

    def test_dependencies_met_rearm_a_blocked_intention_of_another_trigger(self, agent):
        intention = in_status(agent, IntentionStatus.BLOCKED)
        done = in_status(agent, IntentionStatus.COMPLETED)

        intention = intention_set_dependencies(
            agent=agent, intention=intention, dependencies=[done.pk]
        )

        assert intention.status == IntentionStatus.ACTIVE
        assert timeline(intention)[-1] == ("blocked", "active", 1, "dependencies met")

    def test_removing_all_dependencies_rearms_a_blocked_intention(self, agent):
        intention = in_status(agent, IntentionStatus.BLOCKED)

        intention = intention_set_dependencies(agent=agent, intention=intention, dependencies=[])

        assert intention.status == IntentionStatus.ACTIVE


def _waiting_on(agent, *dependencies, **fields):
    fields.setdefault("trigger_type", "dependency")
    return IntentionFactory(agent=agent, dependencies=[d.pk for d in dependencies], **fields)


def _ledger_after(agent, since):
    """(event_type, payload without the intention id, intention id) after `since`."""
    return [
        (
            e.event_type,
            {k: v for k, v in e.payload.items() if k != "intention_id"},
            e.payload.get("intention_id"),
        )
        for e in Event.objects.filter(agent=agent, seq__gt=since).order_by("seq")
    ]


class TestDependentsOfAnIntentionThatEndsUndone:
    """Rule: when an intention is cancelled or expires without ever having been
    done (completed, not skipped), each blocked intention that waits on it —
    directly, or through blocked ones cancelled here — is cancelled in the same
    transaction, with the reason "dependency <id> <cancelled|expired>", its own
    transition and intention.cancelled event (the shape of any cancel)."""

    @pytest.mark.parametrize(
        ("end", "how", "reason"),
        [
            (
                lambda a, i: intention_cancel(agent=a, intention_id=i, reason="no need"),
                "cancelled",
                "no need",
            ),
            (
                lambda a, i: intention_expire(agent=a, intention_id=i),
                "expired",
                "expired by request",
            ),
        ],
        ids=["cancel", "expire"],
    )
    def test_a_blocked_dependent_is_cancelled_with_the_reason_and_its_own_event(
        self, agent, end, how, reason
    ):
        first = IntentionFactory(agent=agent)
        dependent = _waiting_on(agent, first)
        since = head_seq(agent)

        end(agent, first.pk)

        assert status_of(dependent) == "cancelled"
        assert timeline(dependent)[-1] == (
            "blocked",
            "cancelled",
            1,
            f"dependency {first.pk} {how}",
        )
        assert _ledger_after(agent, since) == [
            (
                f"intention.{how}",
                {
                    "from": "active",
                    "to": how,
                    "reason": reason,
                    "occurrence": 1,
                    "at": "2030-01-07T09:00:00+00:00",
                    "set": {},
                },
                str(first.pk),
            ),
            (
                "intention.cancelled",
                {
                    "from": "blocked",
                    "to": "cancelled",
                    "reason": f"dependency {first.pk} {how}",
                    "occurrence": 1,
                    "at": "2030-01-07T09:00:00+00:00",
                    "set": {},
                },
                str(dependent.pk),
            ),
        ]
        # Exactly the transition a cancel by request records, event and all.
        transition = dependent.transitions.order_by("id").last()
        assert transition.event.event_type == "intention.cancelled"
        assert transition.at == T0
        assert firings(dependent) == []

    def test_the_cancel_cascades_through_a_chain(self, agent):
        first = IntentionFactory(agent=agent)
        second = _waiting_on(agent, first)
        third = _waiting_on(agent, second, trigger_type="manual")
        fourth = _waiting_on(agent, third)
        since = head_seq(agent)

        intention_cancel(agent=agent, intention_id=first.pk)

        assert [status_of(i) for i in (second, third, fourth)] == ["cancelled"] * 3
        assert [timeline(i)[-1][3] for i in (second, third, fourth)] == [
            f"dependency {first.pk} cancelled",
            f"dependency {second.pk} cancelled",
            f"dependency {third.pk} cancelled",
        ]
        assert event_types(agent, since) == ["intention.cancelled"] * 4
        engine.tick(agent=agent)
        assert [firings(i) for i in (second, third, fourth)] == [[], [], []]

    def test_a_dependent_whose_other_dependency_is_complete_is_still_cancelled(self, agent):
        done, dropped = IntentionFactory(agent=agent), IntentionFactory(agent=agent)
        dependent = _waiting_on(agent, done, dropped)
        intention_complete(agent=agent, intention_id=done.pk)
        assert status_of(dependent) == "blocked"

        intention_cancel(agent=agent, intention_id=dropped.pk)

        assert timeline(dependent)[-1] == (
            "blocked",
            "cancelled",
            1,
            f"dependency {dropped.pk} cancelled",
        )

    def test_a_dependent_waiting_on_two_that_end_is_cancelled_once(self, agent):
        first, second = IntentionFactory(agent=agent), IntentionFactory(agent=agent)
        dependent = _waiting_on(agent, first, second)

        intention_cancel(agent=agent, intention_id=first.pk)
        since = head_seq(agent)
        intention_cancel(agent=agent, intention_id=second.pk)

        assert [t[1] for t in timeline(dependent)] == ["blocked", "cancelled"]
        assert event_types(agent, since) == ["intention.cancelled"]

    def test_a_time_trigger_blocked_on_it_is_cancelled_too(self, agent):
        first = IntentionFactory(agent=agent)
        later = _waiting_on(agent, first, trigger_type="time", due_at=T0 + minutes(30))

        intention_cancel(agent=agent, intention_id=first.pk)
        at(agent, T0 + minutes(31))
        engine.tick(agent=agent)

        assert (status_of(later), firings(later)) == ("cancelled", [])

    @pytest.mark.parametrize("status", ["due", "executing", "completed", "cancelled"])
    def test_dependents_no_longer_blocked_are_left_alone(self, agent, status):
        first = IntentionFactory(agent=agent)
        dependent = _waiting_on(agent, first, trigger_type="manual")
        if status == "cancelled":
            intention_cancel(agent=agent, intention_id=dependent.pk, reason="by hand")
        else:  # fired by hand while still waiting
            intention_fire(agent=agent, intention_id=dependent.pk)
        if status == "executing":
            intention_start(agent=agent, intention_id=dependent.pk)
        if status == "completed":
            intention_complete(agent=agent, intention_id=dependent.pk)
        before = timeline(dependent)
        since = head_seq(agent)

        intention_cancel(agent=agent, intention_id=first.pk)

        assert (status_of(dependent), timeline(dependent)) == (status, before)
        assert event_types(agent, since) == ["intention.cancelled"]

    def test_a_fired_dependent_is_untouched(self, agent):
        first = IntentionFactory(agent=agent)
        dependent = _waiting_on(agent, first)
        intention_complete(agent=agent, intention_id=first.pk)
        assert status_of(dependent) == "due"
        before = timeline(dependent)

        # A completed one cannot be cancelled; the fired dependent stays as it is.
        with pytest.raises(Conflict):
            intention_cancel(agent=agent, intention_id=first.pk)

        assert (status_of(dependent), timeline(dependent)) == ("due", before)

    def test_a_repeated_cancel_is_a_no_op(self, agent):
        first = IntentionFactory(agent=agent)
        dependent = _waiting_on(agent, first)
        intention_cancel(agent=agent, intention_id=first.pk)
        since, before = head_seq(agent), timeline(dependent)

        intention_cancel(agent=agent, intention_id=first.pk)
        intention_cancel(agent=agent, intention_id=dependent.pk)

        assert (event_types(agent, since), timeline(dependent)) == ([], before)

    def test_a_recurring_dependency_done_once_dooms_nothing_when_cancelled(self, agent):
        daily = IntentionFactory(
            agent=agent, trigger_type="time", due_at=T0, rrule="FREQ=DAILY;COUNT=5"
        )
        engine.tick(agent=agent)
        intention_complete(agent=agent, intention_id=daily.pk)
        # Waits on the recurring one (done once: met) and on another.
        other = IntentionFactory(agent=agent)
        dependent = _waiting_on(agent, daily, other)
        assert status_of(dependent) == "blocked"

        intention_cancel(agent=agent, intention_id=daily.pk)

        assert status_of(dependent) == "blocked"
        intention_complete(agent=agent, intention_id=other.pk)
        assert status_of(dependent) == "due"

    def test_a_recurring_dependency_only_ever_skipped_dooms_its_dependent(self, agent):
        daily = IntentionFactory(
            agent=agent, trigger_type="time", due_at=T0, rrule="FREQ=DAILY;COUNT=5"
        )
        dependent = _waiting_on(agent, daily)
        engine.tick(agent=agent)
        intention_skip(agent=agent, intention_id=daily.pk)
        # A skip is not done: the dependent keeps waiting.
        assert status_of(dependent) == "blocked"

        intention_cancel(agent=agent, intention_id=daily.pk)

        assert timeline(dependent)[-1][3] == f"dependency {daily.pk} cancelled"

    def test_a_chain_through_a_once_done_intention_stops_there(self, agent):
        root = IntentionFactory(agent=agent)
        daily = IntentionFactory(
            agent=agent, trigger_type="time", due_at=T0, rrule="FREQ=DAILY;COUNT=5"
        )
        engine.tick(agent=agent)
        intention_complete(agent=agent, intention_id=daily.pk)
        after_daily = _waiting_on(agent, daily, trigger_type="manual")
        intention_set_dependencies(agent=agent, intention=daily, dependencies=[root.pk])
        assert status_of(daily) == "blocked"
        intention_set_dependencies(agent=agent, intention=after_daily, dependencies=[daily.pk])

        intention_cancel(agent=agent, intention_id=root.pk)

        # daily was done once: cancelled with root, it still counts as met.
        assert (status_of(daily), status_of(after_daily)) == ("cancelled", "active")

    def test_another_agents_intentions_are_never_touched(self, agent):
        other = sim_agent("other")
        theirs_first = IntentionFactory(agent=other)
        theirs = _waiting_on(other, theirs_first)
        first = IntentionFactory(agent=agent)
        _waiting_on(agent, first)
        before = head_seq(other)

        intention_cancel(agent=agent, intention_id=first.pk)

        assert (status_of(theirs), head_seq(other)) == ("blocked", before)

    @pytest.mark.parametrize("end", ["cancelled", "expired"])
    def test_waiting_on_one_that_ended_undone_is_refused(self, agent, end):
        ended = in_status(agent, end)
        fine = IntentionFactory(agent=agent)
        message = (
            f"dependency {ended.pk} is {end} and was never completed: "
            "this intention could never have every dependency met"
        )

        assert refused(Unprocessable, lambda: _waiting_on(agent, fine, ended)) == (
            "dependency_ended",
            message,
            {"dependencies": [str(ended.pk)]},
        )
        assert refused(
            Unprocessable,
            lambda: intention_set_dependencies(
                agent=agent, intention=fine, dependencies=[ended.pk]
            ),
        ) == ("dependency_ended", message, {"dependencies": [str(ended.pk)]})


# -------------------------------------------------- the state machine, by service


def _fire(agent, intention):
    intention_fire(agent=agent, intention_id=intention.pk)


def _retrying(agent, status):
    return in_status(
        agent,
        status,
        trigger_type="time",
        due_at=T0,
        retry_policy={"max_retries": 2, "backoff_seconds": 60},
    )


def _blocked_to_due(agent):
    intention = in_status(agent, IntentionStatus.BLOCKED, trigger_type="dependency")
    dependency = intention.dependency_links.get().depends_on
    return intention, lambda: intention_complete(agent=agent, intention_id=dependency.pk)


def _move(service, **kwargs):
    return lambda agent, i: service(agent=agent, intention_id=i.pk, **kwargs)


SERVICE_MOVES = {
    ("active", "due"): (lambda a: in_status(a, "active"), _fire, ["intention.fired"]),
    ("active", "blocked"): (
        lambda a: in_status(a, "active"),
        lambda a, i: intention_set_dependencies(
            agent=a, intention=i, dependencies=[IntentionFactory(agent=a).pk]
        ),
        ["intention.created", "intention.dependencies_set", "intention.blocked"],
    ),
    ("active", "completed"): (
        lambda a: in_status(a, "active"),
        _move(intention_complete),
        ["intention.completed"],
    ),
    ("active", "cancelled"): (
        lambda a: in_status(a, "active"),
        _move(intention_cancel),
        ["intention.cancelled"],
    ),
    ("active", "expired"): (
        lambda a: in_status(a, "active"),
        _move(intention_expire),
        ["intention.expired"],
    ),
    ("blocked", "active"): (
        lambda a: in_status(a, "blocked"),
        lambda a, i: intention_set_dependencies(
            agent=a, intention=i, dependencies=[in_status(a, "completed").pk]
        ),
        [
            "intention.created",
            "intention.completed",
            "intention.dependencies_set",
            "intention.rearmed",
        ],
    ),
    ("blocked", "due"): (
        lambda a: in_status(a, "blocked", trigger_type="dependency"),
        lambda a, i: intention_complete(
            agent=a, intention_id=i.dependency_links.get().depends_on_id
        ),
        ["intention.completed", "intention.fired"],
    ),
    ("blocked", "completed"): (
        lambda a: in_status(a, "blocked"),
        _move(intention_complete),
        ["intention.completed"],
    ),
    ("blocked", "cancelled"): (
        lambda a: in_status(a, "blocked"),
        _move(intention_cancel),
        ["intention.cancelled"],
    ),
    ("blocked", "expired"): (
        lambda a: in_status(a, "blocked"),
        _move(intention_expire),
        ["intention.expired"],
    ),
    ("due", "executing"): (
        lambda a: in_status(a, "due"),
        _move(intention_start),
        ["intention.executing"],
    ),
    ("due", "completed"): (
        lambda a: in_status(a, "due"),
        _move(intention_complete),
        ["intention.completed"],
    ),
    ("due", "active"): (
        lambda a: _retrying(a, "due"),
        _move(intention_fail, reason="timeout"),
        ["intention.rearmed"],
    ),
    ("due", "cancelled"): (
        lambda a: in_status(a, "due"),
        _move(intention_cancel),
        ["intention.cancelled"],
    ),
    ("due", "expired"): (
        lambda a: in_status(a, "due"),
        _move(intention_expire),
        ["intention.expired"],
    ),
    ("executing", "completed"): (
        lambda a: in_status(a, "executing"),
        _move(intention_complete),
        ["intention.completed"],
    ),
    ("executing", "due"): (
        lambda a: in_status(a, "executing"),
        _move(intention_fail, reason="timeout"),
        ["intention.due"],
    ),
    ("executing", "active"): (
        lambda a: _retrying(a, "executing"),
        _move(intention_fail, reason="timeout"),
        ["intention.rearmed"],
    ),
    ("executing", "cancelled"): (
        lambda a: in_status(a, "executing"),
        _move(intention_cancel),
        ["intention.cancelled"],
    ),
    ("executing", "expired"): (
        lambda a: in_status(a, "executing"),
        _move(intention_expire),
        ["intention.expired"],
    ),
    ("completed", "active"): (
        lambda a: in_status(
            a,
            "due",
            trigger_type="time",
            due_at=T0 + minutes(1),
            rrule="FREQ=DAILY;COUNT=2",
        ),
        _move(intention_complete),
        ["intention.completed", "intention.rearmed"],
    ),
}


def test_every_allowed_transition_has_a_service():
    assert set(SERVICE_MOVES) == {
        (str(a), b) for a, targets in TRANSITIONS.items() for b in targets
    }


@pytest.mark.parametrize(("from_status", "to_status"), sorted(SERVICE_MOVES))
def test_each_allowed_transition_through_its_service(agent, from_status, to_status):
    setup, act, ledger = SERVICE_MOVES[(from_status, to_status)]
    intention = setup(agent)
    since = head_seq(agent)

    act(agent, intention)

    assert status_of(intention) == to_status
    assert event_types(agent, since) == ledger
    assert timeline(intention)[-1][:2] == (from_status, to_status)


REFUSALS = {
    "start": (
        lambda a, i: intention_start(agent=a, intention_id=i.pk),
        {"due"},
        lambda s: ("invalid_transition", f"intention is {s}; it cannot become executing"),
    ),
    "complete": (
        lambda a, i: intention_complete(agent=a, intention_id=i.pk),
        {"active", "blocked", "due", "executing"},
        lambda s: ("invalid_transition", f"intention is {s}; it cannot be completed"),
    ),
    "cancel": (
        lambda a, i: intention_cancel(agent=a, intention_id=i.pk),
        {"active", "blocked", "due", "executing", "cancelled"},
        lambda s: ("invalid_transition", f"intention is {s}; it cannot become cancelled"),
    ),
    "expire": (
        lambda a, i: intention_expire(agent=a, intention_id=i.pk),
        {"active", "blocked", "due", "executing"},
        lambda s: ("invalid_transition", f"intention is {s}; it cannot become expired"),
    ),
    "fire": (
        lambda a, i: intention_fire(agent=a, intention_id=i.pk),
        {"active", "blocked"},
        lambda s: ("not_armed", f"intention is {s}; only an armed one can fire"),
    ),
    "fail": (
        lambda a, i: intention_fail(agent=a, intention_id=i.pk, reason="x"),
        {"due", "executing"},
        lambda s: ("invalid_transition", f"intention is {s}; only a due or executing one can fail"),
    ),
}


@pytest.mark.parametrize(
    ("service", "status"),
    [(name, s) for name, (_, ok, _) in REFUSALS.items() for s in STATUSES if s not in ok],
)
def test_services_refuse_moves_outside_the_machine(agent, service, status):
    call, _, expected = REFUSALS[service]
    intention = in_status(agent, status)

    code, message, _ = refused(Conflict, lambda: call(agent, intention))

    assert (code, message) == expected(status)


class TestComplete:
    def test_completing_a_cancelled_intention_is_a_conflict(self, agent):
        intention = in_status(agent, IntentionStatus.CANCELLED)

        assert refused(
            Conflict, lambda: intention_complete(agent=agent, intention_id=intention.pk)
        ) == (
            "invalid_transition",
            "intention is cancelled; it cannot be completed",
            {"status": "cancelled", "to": "completed"},
        )

    def test_evidence_is_kept_and_recorded(self, agent):
        intention = in_status(agent, IntentionStatus.DUE)

        done = intention_complete(agent=agent, intention_id=intention.pk, evidence={"pr": 42})

        assert (done.status, done.completion_evidence) == ("completed", {"pr": 42})
        event = Event.objects.filter(agent=agent).order_by("-seq").first()
        assert (event.event_type, event.payload) == (
            "intention.completed",
            {
                "intention_id": str(intention.pk),
                "from": "due",
                "to": "completed",
                "reason": "completed",
                "occurrence": 1,
                "at": "2030-01-07T09:00:00+00:00",
                "set": {"completion_evidence": {"pr": 42}},
            },
        )

    def test_unstorable_evidence_writes_nothing(self, agent):
        intention = in_status(agent, IntentionStatus.DUE)

        assert (
            refused(
                InvalidInput,
                lambda: intention_complete(
                    agent=agent, intention_id=intention.pk, evidence={"x": float("nan")}
                ),
            )[1]
            == "evidence.x: numbers must be finite (no NaN or infinity)"
        )

    def test_another_agents_intention_is_not_found(self, agent):
        theirs = IntentionFactory(agent=AgentFactory())

        assert refused(
            NotFound, lambda: intention_complete(agent=agent, intention_id=theirs.pk)
        ) == ("not_found", f"intention {theirs.pk} not found", {})

    def test_cancel_twice_writes_once(self, agent):
        intention = in_status(agent, IntentionStatus.CANCELLED)
        before = intentions_state()

        assert intention_cancel(agent=agent, intention_id=intention.pk).status == "cancelled"
        assert intentions_state() == before


class TestRecurringAndSkip:
    def test_skip_is_only_for_recurring_intentions(self, agent):
        intention = in_status(agent, IntentionStatus.DUE)

        assert refused(
            Conflict, lambda: intention_skip(agent=agent, intention_id=intention.pk)
        ) == (
            "not_recurring",
            "only a recurring intention can skip an occurrence; cancel a one-shot",
            {},
        )

    def test_skip_moves_to_the_next_occurrence_without_releasing_dependents(self, agent):
        recurring = IntentionFactory(
            agent=agent, trigger_type="time", due_at=T0 + minutes(10), rrule="FREQ=HOURLY;COUNT=3"
        )
        since = head_seq(agent)

        skipped = intention_skip(agent=agent, intention_id=recurring.pk, reason="holiday")

        assert (skipped.status, skipped.occurrence, skipped.due_at) == (
            "active",
            2,
            T0 + minutes(70),
        )
        assert skipped.completion_evidence is None
        assert event_types(agent, since) == ["intention.completed", "intention.rearmed"]
        assert timeline(skipped)[1:] == [
            ("active", "completed", 1, "skipped"),
            ("completed", "active", 1, "next occurrence"),
        ]

    def test_count_exhausted_ends_it(self, agent):
        recurring = IntentionFactory(
            agent=agent, trigger_type="time", due_at=T0, rrule="FREQ=HOURLY;COUNT=2"
        )

        first = intention_complete(agent=agent, intention_id=recurring.pk)
        last = intention_complete(agent=agent, intention_id=recurring.pk)

        assert (first.status, first.occurrence) == ("active", 2)
        assert (last.status, last.occurrence, last.due_at) == ("completed", 2, T0 + minutes(60))

    def test_an_occurrence_at_or_after_expires_at_is_not_scheduled(self, agent):
        recurring = IntentionFactory(
            agent=agent,
            trigger_type="time",
            due_at=T0,
            rrule="FREQ=HOURLY",
            expires_at=T0 + minutes(60),
        )

        assert intention_complete(agent=agent, intention_id=recurring.pk).status == "completed"


class TestFail:
    def test_a_retry_is_a_new_occurrence_after_backoff(self, agent):
        intention = _retrying(agent, IntentionStatus.DUE)
        at(agent, T0 + minutes(3))

        retried = intention_fail(agent=agent, intention_id=intention.pk, reason="timeout")

        assert (retried.status, retried.occurrence, retried.due_at) == (
            "active",
            2,
            T0 + minutes(4),
        )
        assert timeline(retried)[-1] == ("due", "active", 1, "failed: timeout; retry 1")

    def test_without_retries_a_due_one_stays_due_and_is_escalated_in_the_ledger(self, agent):
        intention = in_status(
            agent,
            IntentionStatus.DUE,
            escalation_policy={"after_failures": 5, "notify": ["webhook"]},
        )
        since = head_seq(agent)

        failed = intention_fail(agent=agent, intention_id=intention.pk, reason="broken")

        assert failed.status == IntentionStatus.DUE
        event = Event.objects.get(agent=agent, seq__gt=since)
        assert (event.event_type, event.payload) == (
            "intention.failed",
            {
                "intention_id": str(intention.pk),
                "reason": "broken",
                "escalate": {"after_failures": 5, "notify": ["webhook"]},
                "attempts": 1,
                "at": "2030-01-07T09:00:00+00:00",
            },
        )

    def test_an_executing_one_goes_back_to_due_for_escalation(self, agent):
        intention = in_status(agent, IntentionStatus.EXECUTING)

        failed = intention_fail(agent=agent, intention_id=intention.pk, reason="broken")

        assert failed.status == IntentionStatus.DUE
        assert timeline(failed)[-1] == ("executing", "due", 1, "failed: broken; escalate")

    def test_retries_stop_at_max_retries_with_growing_backoff(self, agent):
        intention = in_status(
            agent,
            IntentionStatus.DUE,
            trigger_type="time",
            due_at=T0,
            retry_policy={"max_retries": 2, "backoff_seconds": 60},
        )
        due_ats = []
        for _ in range(3):
            failed = intention_fail(agent=agent, intention_id=intention.pk, reason="timeout")
            if failed.status != IntentionStatus.ACTIVE:
                break
            due_ats.append(failed.due_at)
            at(agent, failed.due_at)
            engine.tick(agent=agent)

        assert due_ats == [T0 + minutes(1), T0 + minutes(1) + minutes(2)]
        assert (failed.status, failed.occurrence) == (IntentionStatus.DUE, 3)
