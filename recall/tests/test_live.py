"""Suite H's telemetry and figures: reads traced on every read path, look
decisions, stale feedback, what a successor was shown, and the carry-over
computed from them (recall.live), through the API as an agent works."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from conftest import make_client
from intentions.models import Handover
from piper.reads import TRACE_HEADER
from piper.tenancy.models import Scope
from recall.live import Window, live_agents, live_report
from recall.models import LookDecision, RetrievalTrace

pytestmark = pytest.mark.django_db


def post(client, path: str, body: dict, status: int = 201) -> dict:
    response = client.post(path, body, format="json")
    assert response.status_code == status, response.content
    return response.json()


def get(client, path: str, status: int = 200, **params):
    response = client.get(path, params)
    assert response.status_code == status, response.content
    return response


def window(*, ahead: timedelta = timedelta(0), grace: timedelta = timedelta(hours=1)) -> Window:
    now = timezone.now()
    return Window(start=now - timedelta(days=1), end=now + ahead, grace=grace)


def figures(client, w: Window | None = None):
    [agent_figures] = live_report(window=w or window(), agents=[client.agent]).per_agent
    return agent_figures


def intention(client, description: str, thread: str | None = None) -> str:
    body = {"description": description, "trigger_type": "manual"}
    if thread:
        body["thread"] = thread
    return post(client, "/api/v1/intentions", body)["id"]


def act(client, intention_id: str, action: str) -> None:
    post(client, f"/api/v1/intentions/{intention_id}/{action}", {}, status=200)


def hand_over(client, thread_id: str, to_session: str, *, resume: bool = True) -> dict:
    post(client, f"/api/v1/threads/{thread_id}/handover", {"to_session": to_session})
    if not resume:
        return {}
    return post(
        client, f"/api/v1/threads/{thread_id}/resume", {"session_id": to_session}, status=200
    )


class TestReadsAreTraced:
    def test_each_read_endpoint_answers_with_a_trace_id_that_takes_feedback(self, client_a):
        post(
            client_a,
            "/api/v1/facts",
            {"subject": "billing export", "predicate": "deadline", "value": "March 3"},
        )
        reads = {
            "facts_lookup": get(
                client_a, "/api/v1/facts/current", subject="billing export", predicate="deadline"
            ),
            "episodes_search": get(client_a, "/api/v1/episodes/search", q="billing export"),
            "sources_search": get(client_a, "/api/v1/sources/search", q="billing export"),
        }
        match = client_a.post(
            "/api/v1/skills/match", {"task": "compute a checksum", "context": {}}, format="json"
        )
        assert match.status_code == 200, match.content
        reads["skill_match"] = match
        for route, response in reads.items():
            trace = RetrievalTrace.objects.get(pk=response[TRACE_HEADER])
            assert (trace.agent, trace.route, trace.explicit) == (client_a.agent, route, True)
        fact_trace = RetrievalTrace.objects.get(pk=reads["facts_lookup"][TRACE_HEADER])
        [fact] = reads["facts_lookup"].json()["facts"]
        assert fact_trace.query == "billing export deadline"
        assert fact_trace.returned == [{"kind": "fact", "id": fact["id"], "score": None}]
        assert fact_trace.filters == {"lookup": "current"}
        # The read is a recall for feedback: the agent says it used the fact.
        feedback = post(
            client_a,
            f"/api/v1/recall/{fact_trace.pk}/feedback",
            {"used": [fact["id"]], "outcome": "success"},
        )
        assert (feedback["used"], feedback["stale"]) == ([fact["id"]], False)

    def test_another_agent_cannot_see_or_answer_a_read_trace(self, client_a, client_b):
        response = get(client_a, "/api/v1/episodes/search", q="anything at all")
        trace_id = response[TRACE_HEADER]
        assert client_b.get(f"/api/v1/recall/{trace_id}").status_code == 404
        refused = client_b.post(
            f"/api/v1/recall/{trace_id}/feedback", {"outcome": "success"}, format="json"
        )
        assert refused.status_code == 404

    def test_read_traces_can_be_turned_off(self, client_a, settings):
        settings.PIPER_READ_TRACES = False
        response = get(client_a, "/api/v1/episodes/search", q="billing export")
        assert TRACE_HEADER not in response
        assert not RetrievalTrace.objects.filter(agent=client_a.agent).exists()


class TestLookDecisions:
    def test_a_look_with_its_read_and_a_look_missed(self, client_a):
        read = get(client_a, "/api/v1/episodes/search", q="what failed last night")
        looked = post(
            client_a,
            "/api/v1/recall/decisions",
            {
                "task": "rerun the export",
                "looked": True,
                "needed": True,
                "trace": read[TRACE_HEADER],
                "session_id": "s1",
            },
        )
        assert (looked["looked"], looked["needed"], looked["trace"]) == (
            True,
            True,
            read[TRACE_HEADER],
        )
        post(
            client_a,
            "/api/v1/recall/decisions",
            {"task": "answer Bob", "looked": False, "needed": True},
        )
        post(client_a, "/api/v1/recall/decisions", {"task": "say hello", "looked": False})
        got = figures(client_a)
        assert (got.decisions, got.looked, got.needed, got.missed_looks) == (3, 1, 2, 1)
        assert got.rates()["missed_look_rate"] == 0.5

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"task": "", "looked": True}, "task"),
            ({"task": "x"}, "looked"),
            ({"task": "x", "looked": "maybe"}, "looked"),
            ({"task": "x", "looked": False, "trace": str(uuid.uuid4())}, "trace"),
            ({"task": "x", "looked": True, "why": "?"}, "why"),
        ],
    )
    def test_bad_input_is_a_400_naming_the_field(self, client_a, body, field):
        response = client_a.post("/api/v1/recall/decisions", body, format="json")
        assert response.status_code == 400, response.content
        assert field in str(response.json())
        assert not LookDecision.objects.exists()

    def test_another_agents_trace_is_a_404(self, client_a, client_b):
        trace_id = get(client_b, "/api/v1/episodes/search", q="theirs")[TRACE_HEADER]
        response = client_a.post(
            "/api/v1/recall/decisions",
            {"task": "x", "looked": True, "trace": trace_id},
            format="json",
        )
        assert response.status_code == 404
        assert not LookDecision.objects.exists()


class TestOpenItemsAcrossSuccessions:
    def test_surfaced_and_executed(self, client_a):
        thread = post(client_a, "/api/v1/threads", {"key": "export", "session_id": "s1"})["id"]
        follow_up = intention(client_a, "tell finance the export ran", thread=thread)
        threadless = intention(client_a, "renew the certificate")
        done_before = intention(client_a, "already done", thread=thread)
        act(client_a, done_before, "complete")
        dropped = intention(client_a, "no longer wanted", thread=thread)
        package = hand_over(client_a, thread, "s2")
        shown = {item["id"] for item in package["intentions"]}
        assert shown == {follow_up, threadless, dropped}
        handover = Handover.objects.get(thread_id=thread)
        assert set(handover.surfaced) == shown
        act(client_a, follow_up, "complete")
        act(client_a, dropped, "cancel")
        got = figures(client_a)
        # Three open items at the succession, all shown; the finished one is not open.
        assert (got.successions, got.open_items, got.surfaced) == (1, 3, 3)
        # Executed: the follow-up. Cancelled: a decision, not judged. Threadless: not due.
        assert (got.items_judged, got.executed, got.cancelled, got.not_yet_due) == (1, 1, 1, 1)
        assert got.rates()["open_item_execution_rate"] == 1.0

    def test_a_handover_never_resumed_loses_its_items_after_the_grace(self, client_a):
        thread = post(client_a, "/api/v1/threads", {"key": "lost", "session_id": "s1"})["id"]
        intention(client_a, "call the vendor", thread=thread)
        hand_over(client_a, thread, "s2", resume=False)
        in_flight = figures(client_a)
        assert (in_flight.open_items, in_flight.in_flight) == (0, 1)
        later = figures(client_a, window(ahead=timedelta(hours=2)))
        assert (later.open_items, later.surfaced, later.in_flight) == (1, 0, 0)
        assert later.rates()["open_item_survival_rate"] == 0.0

    def test_an_item_due_past_the_grace_and_not_done_is_not_executed(self, client_a):
        thread = post(client_a, "/api/v1/threads", {"key": "late", "session_id": "s1"})["id"]
        chore = intention(client_a, "rotate the keys", thread=thread)
        hand_over(client_a, thread, "s2")
        act(client_a, chore, "fire")  # due now
        assert figures(client_a).items_judged == 0  # within the grace: not judged
        late = figures(client_a, window(ahead=timedelta(hours=2)))
        assert (late.items_judged, late.executed) == (1, 0)
        assert late.rates()["open_item_execution_rate"] == 0.0

    def test_an_item_being_executed_past_the_grace_is_not_judged(self, client_a):
        thread = post(client_a, "/api/v1/threads", {"key": "slow", "session_id": "s1"})["id"]
        chore = intention(client_a, "migrate the archive", thread=thread)
        hand_over(client_a, thread, "s2")
        act(client_a, chore, "fire")
        act(client_a, chore, "start")  # the successor is at it
        late = figures(client_a, window(ahead=timedelta(hours=2)))
        assert (late.items_judged, late.executed, late.executing) == (0, 0, 1)
        assert late.rates()["open_item_execution_rate"] is None
        act(client_a, chore, "complete")
        done = figures(client_a, window(ahead=timedelta(hours=2)))
        assert (done.items_judged, done.executed, done.executing) == (1, 1, 0)


class TestReadsFeedbackAndSkills:
    def test_retrieval_without_use_and_stale_answers(self, client_a):
        post(client_a, "/api/v1/facts", {"subject": "vpn", "predicate": "status", "value": "up"})
        first = get(client_a, "/api/v1/facts/current", subject="vpn", predicate="status")
        second = get(client_a, "/api/v1/facts/current", subject="vpn", predicate="status")
        get(client_a, "/api/v1/facts/current", subject="vpn", predicate="status")  # no feedback
        fact_id = first.json()["facts"][0]["id"]
        post(
            client_a,
            f"/api/v1/recall/{first[TRACE_HEADER]}/feedback",
            {"used": [fact_id], "outcome": "success"},
        )
        post(
            client_a,
            f"/api/v1/recall/{second[TRACE_HEADER]}/feedback",
            {"used": [], "outcome": "failure", "failure_code": "R3", "stale": True},
        )
        got = figures(client_a)
        assert (got.reads, got.reads_with_feedback, got.reads_unused) == (3, 2, 1)
        assert (got.feedback, got.stale_answers) == (2, 1)
        rates = got.rates()
        assert (rates["retrieval_without_use_rate"], rates["stale_answer_rate"]) == (0.5, 0.5)
        assert rates["feedback_coverage"] == round(2 / 3, 4)

    def test_skill_runs_reuse_and_matches_followed(self, client_a):
        from skills.tests.factories import report, validated

        start = timezone.now()
        version = validated(agent=client_a.agent)  # one verified run, no session
        match = client_a.post(
            "/api/v1/skills/match",
            {"task": "Compute the checksum for invoice 12", "context": {"env": {"os": "linux"}}},
            format="json",
        )
        assert [c["version_id"] for c in match.json()["applicable"]] == [str(version.pk)]
        report(version, succeeded=True, session_id="s1")
        report(version, succeeded=False, session_id="s2")
        got = figures(client_a, Window(start=start, end=timezone.now(), grace=timedelta(hours=1)))
        assert (got.skill_runs, got.skill_runs_succeeded) == (3, 2)
        assert (got.skills_run, got.skills_reused) == (1, 1)
        assert (got.skill_matches, got.skill_matches_followed) == (1, 1)


class TestWhoIsLive:
    def test_the_batterys_agents_and_idle_agents_are_not_live(self, client_a, db):
        battery = make_client("battery-x")
        battery.agent.is_throwaway = True
        battery.agent.save(update_fields=["is_throwaway"])
        idle = make_client("idle")
        get(client_a, "/api/v1/episodes/search", q="something")
        get(battery, "/api/v1/episodes/search", q="something")
        assert [a.name for a in live_agents(window())] == [client_a.agent.name]
        assert idle.agent.name not in [a.name for a in live_agents(window())]


class TestCarryOverApi:
    def test_an_agent_reads_its_own_figures_with_an_admin_key(self, client_a, client_b):
        admin = make_client("ops", scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN))
        get(admin, "/api/v1/episodes/search", q="only mine")
        get(client_b, "/api/v1/episodes/search", q="not mine")
        body = get(admin, "/api/v1/carry-over", window_days=3).json()
        assert body["successions"] == 0
        assert body["rates"]["open_item_execution_rate"] is None
        assert client_a.get("/api/v1/carry-over").status_code == 403
        bad = admin.get("/api/v1/carry-over", {"window_days": 0})
        assert bad.status_code == 400 and "window_days" in str(bad.json())


class TestAdminPage:
    def test_the_page_charts_each_live_agent(self, admin_client, client_a):
        thread = post(client_a, "/api/v1/threads", {"key": "export", "session_id": "s1"})["id"]
        chore = intention(client_a, "tell finance", thread=thread)
        hand_over(client_a, thread, "s2")
        act(client_a, chore, "complete")
        traces = admin_client.get("/admin/recall/retrievaltrace/")
        assert "/admin/recall/retrievaltrace/carry-over/" in traces.content.decode()
        page = admin_client.get("/admin/recall/retrievaltrace/carry-over/", {"days": "2"})
        html = page.content.decode()
        assert page.status_code == 200
        assert "last 2 days" in html and client_a.agent.name in html
        assert "<svg" in html and "open items executed: 100%" in html
        assert "Nothing to measure" not in html

    def test_an_empty_window_says_there_is_nothing_to_measure(self, admin_client):
        page = admin_client.get("/admin/recall/retrievaltrace/carry-over/", {"days": "x"})
        assert page.status_code == 200
        assert "Nothing to measure" in page.content.decode()
