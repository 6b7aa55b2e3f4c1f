"""Working state and intentions in the admin: every page renders without a query per
row, nothing is edited behind the services' back, and the operator cancels or
completes intentions through actions that call the lifecycle services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from intentions.models import (
    Escalation,
    EventCursor,
    Firing,
    Handover,
    Intention,
    OutboxMessage,
    Thread,
    Transition,
    Webhook,
    WorkingState,
)
from intentions.services import engine, lifecycle, state
from intentions.services.lifecycle import IntentionInput
from intentions.tests.test_apis import intentions_state
from ledger.models import Event
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


def make(agent, description: str, **fields) -> Intention:
    fields.setdefault("trigger_type", "manual")
    return lifecycle.intention_create(
        agent=agent, data=IntentionInput(description=description, **fields)
    )


@pytest.fixture
def memory() -> dict:
    """A thread with two versions and an open handover; a manual intention that fired
    (delivered to a webhook through the outbox), a recurring one, one waiting for it,
    and one cancelled; a simulated clock and an event cursor."""
    agent = AgentFactory(name="admin-view")
    engine.clock_set(agent=agent, now=T0)
    thread, _ = state.thread_get_or_create(agent=agent, key="deploy", session_id="s1")
    state.working_state_write(
        agent=agent, thread=thread, state={"goal": "ship", "assumptions": ["a"]}, based_on=0
    )
    state.working_state_write(
        agent=agent,
        thread=thread,
        state={"goal": "ship <b>now</b>", "next_action": "tag"},
        based_on=1,
        session_id="s1",
    )
    Webhook.objects.create(agent=agent, url="https://hooks.test/piper", secret="s" * 20)
    fired = make(agent, "call <the> client", thread=thread, priority=3)
    lifecycle.intention_fire(agent=agent, intention_id=fired.pk)
    recurring = make(
        agent,
        "stand-up",
        trigger_type="time",
        due_at=T0 + timedelta(hours=1),
        rrule="FREQ=DAILY",
        thread=thread,
    )
    waiting = make(
        agent, "after the stand-up", trigger_type="dependency", dependencies=[recurring.pk]
    )
    cancelled = make(agent, "old plan")
    lifecycle.intention_cancel(agent=agent, intention_id=cancelled.pk, reason="superseded")
    escalated = make(
        agent,
        "renew <the> certificate",
        escalation_policy={"after_failures": 1, "notify": ["webhook"]},
    )
    lifecycle.intention_fire(agent=agent, intention_id=escalated.pk)
    lifecycle.intention_fail(agent=agent, intention_id=escalated.pk, reason="expired upstream")
    engine.match_events(agent_id=agent.pk)
    handover = state.handover_start(agent=agent, thread=thread, to_session="s2", note="shift")
    return {
        "agent": agent,
        "thread": thread,
        "workingstate": WorkingState.objects.get(thread=thread, version=2),
        "handover": handover,
        "intention": Intention.objects.get(pk=fired.pk),
        "recurring": recurring,
        "waiting": waiting,
        "cancelled": cancelled,
        "firing": Firing.objects.get(intention=fired),
        "escalated": Intention.objects.get(pk=escalated.pk),
        "escalation": Escalation.objects.get(intention=escalated),
        "outboxmessage": OutboxMessage.objects.get(firing__intention=fired),
        "webhook": Webhook.objects.get(agent=agent),
        "eventcursor": EventCursor.objects.get(agent=agent),
    }


MODELS = {
    "thread": 1,
    "workingstate": 2,
    "handover": 1,
    "intention": 5,
    "firing": 2,
    "escalation": 1,
    "outboxmessage": 3,
    "webhook": 1,
    "eventcursor": 1,
}


def changelist(model: str) -> str:
    return reverse(f"admin:intentions_{model}_changelist")


def change_page(model: str, pk) -> str:
    return reverse(f"admin:intentions_{model}_change", args=[pk])


@pytest.mark.parametrize(("model", "rows"), MODELS.items())
def test_changelist(admin_client, memory, model, rows, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):  # list_select_related: no query per row
        response = admin_client.get(changelist(model))
    assert response.status_code == 200
    assert response.context["cl"].result_count == rows


@pytest.mark.parametrize(
    "model", ["thread", "intention", "workingstate", "firing", "escalation", "outboxmessage"]
)
def test_changelist_queries_do_not_grow_with_rows(
    admin_client, memory, model, django_assert_max_num_queries
):
    agent, thread = memory["agent"], memory["thread"]
    with django_assert_max_num_queries(12):
        admin_client.get(changelist(model))
    for n in range(15):
        other, _ = state.thread_get_or_create(agent=agent, key=f"t{n}")
        state.working_state_write(agent=agent, thread=other, state={"goal": "x"}, based_on=0)
        intention = make(agent, f"i{n}", thread=thread)
        lifecycle.intention_fire(agent=agent, intention_id=intention.pk)
    with django_assert_max_num_queries(12):
        response = admin_client.get(changelist(model))
    assert response.status_code == 200


@pytest.mark.parametrize("model", MODELS)
def test_change_page_is_view_only(admin_client, memory, model):
    obj = memory[model]
    response = admin_client.get(change_page(model, obj.pk))
    assert response.status_code == 200
    content = response.content.decode()
    assert 'name="_save"' not in content
    assert "deletelink" not in content
    before = intentions_state()
    posted = admin_client.post(change_page(model, obj.pk), {})
    assert posted.status_code == 403
    assert intentions_state() == before


@pytest.mark.parametrize("model", MODELS)
def test_nothing_is_added_or_deleted_in_the_admin(admin_client, memory, model):
    obj = memory[model]
    add = admin_client.get(reverse(f"admin:intentions_{model}_add"))
    delete = admin_client.get(reverse(f"admin:intentions_{model}_delete", args=[obj.pk]))
    assert (add.status_code, delete.status_code) == (403, 403)


def test_intentions_filter_by_escalated(admin_client, memory):
    escalated = admin_client.get(changelist("intention") + "?escalated=yes")
    others = admin_client.get(changelist("intention") + "?escalated=no")

    assert [i.pk for i in escalated.context["cl"].result_list] == [memory["escalated"].pk]
    assert escalated.context["cl"].result_count == 1
    assert others.context["cl"].result_count == 4


def test_intention_page_shows_its_escalation_and_its_webhook_message(admin_client, memory):
    escalation = memory["escalation"]
    content = admin_client.get(change_page("intention", memory["escalated"].pk)).content.decode()

    assert "Escalations" in content
    assert "failures" in content
    assert escalation.outbox.status in content
    assert reverse("admin:intentions_outboxmessage_change", args=[escalation.outbox.pk]) in content
    assert "renew &lt;the&gt; certificate" in content  # escaped


def test_thread_page_shows_versions_newest_first_handovers_and_pending(admin_client, memory):
    content = admin_client.get(change_page("thread", memory["thread"].pk)).content.decode()
    assert "Working-state versions (newest first; the latest 20)" in content
    newest, oldest = content.index("ship &lt;b&gt;now&lt;/b&gt;"), content.index(">ship<")
    assert newest < oldest  # version 2 above version 1, and escaped
    assert "<b>now</b>" not in content
    assert "shift" in content and "s2" in content  # the handover
    assert "call &lt;the&gt; client" in content  # the pending item's intention
    assert change_page("workingstate", memory["workingstate"].pk) in content


def test_thread_page_shows_the_latest_versions_and_links_to_all(admin_client, memory):
    agent, thread = memory["agent"], memory["thread"]
    other, _ = state.thread_get_or_create(agent=agent, key="long")
    for version in range(25):
        state.working_state_write(
            agent=agent, thread=other, state={"goal": f"goal #{version + 1}."}, based_on=version
        )
    response = admin_client.get(change_page("thread", other.pk))
    formset = response.context["inline_admin_formsets"][0].formset
    assert [form.instance.version for form in formset.forms] == list(range(25, 5, -1))
    content = response.content.decode()
    assert "goal #25." in content and "goal #6." in content and "goal #5." not in content
    link = f"{changelist('workingstate')}?q={other.pk}"
    assert f'<a href="{link}">all 25 versions</a>' in content
    listed = admin_client.get(link)
    assert listed.context["cl"].result_count == 25
    assert thread.pk != other.pk


def test_thread_page_shows_only_uncleared_pending_items(admin_client, memory):
    agent, thread = memory["agent"], memory["thread"]
    item = thread.pending.get()
    state.pending_clear(agent=agent, thread=thread, item_ids=[item.pk])
    content = admin_client.get(change_page("thread", thread.pk)).content.decode()
    assert "call &lt;the&gt; client" not in content


def test_working_state_page_shows_the_whole_state(admin_client, memory):
    content = admin_client.get(
        change_page("workingstate", memory["workingstate"].pk)
    ).content.decode()
    assert "&quot;next_action&quot;: &quot;tag&quot;" in content


def test_intention_page_shows_its_timeline(admin_client, memory):
    intention = memory["intention"]
    content = admin_client.get(change_page("intention", intention.pk)).content.decode()
    assert "Timeline: transitions and firings" in content
    firing = memory["firing"]
    for transition in Transition.objects.filter(intention=intention):
        assert reverse("admin:ledger_event_change", args=[transition.event_id]) in content
    assert reverse("admin:ledger_event_change", args=[firing.event_id]) in content
    assert "fired by manual" in content and "∅ (created)" in content
    assert change_page("outboxmessage", memory["outboxmessage"].pk) in content
    never = admin_client.get(change_page("intention", memory["cancelled"].pk)).content.decode()
    assert "never fired" in never and "superseded" in never


def test_intention_page_links_dependencies_both_ways(admin_client, memory):
    recurring, waiting = memory["recurring"], memory["waiting"]
    content = admin_client.get(change_page("intention", waiting.pk)).content.decode()
    assert change_page("intention", recurring.pk) in content
    content = admin_client.get(change_page("intention", recurring.pk)).content.decode()
    assert change_page("intention", waiting.pk) in content


def test_webhook_secret_is_never_shown(admin_client, memory):
    for url in (changelist("webhook"), change_page("webhook", memory["webhook"].pk)):
        assert "s" * 20 not in admin_client.get(url).content.decode()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"status__exact": "due"}, ["intention", "escalated"]),
        ({"status__exact": "cancelled"}, ["cancelled"]),
        ({"trigger_type__exact": "time"}, ["recurring"]),
        ({"trigger_type__exact": "dependency", "status__exact": "blocked"}, ["waiting"]),
    ],
)
def test_intention_filters(admin_client, memory, query, expected):
    other = AgentFactory(name="someone-else")
    make(other, "theirs", trigger_type="time", due_at=T0)
    response = admin_client.get(
        changelist("intention"), {**query, "agent__id__exact": memory["agent"].pk}
    )
    assert {i.pk for i in response.context["cl"].result_list} == {memory[k].pk for k in expected}


def test_filters_and_search_render(admin_client, memory):
    for model, query, rows in (
        ("thread", {"status__exact": "handing_over"}, 1),
        ("workingstate", {"q": "deploy"}, 2),
        ("handover", {"status__exact": "pending"}, 1),
        ("intention", {"q": "client"}, 1),
        ("firing", {"cause__exact": "manual"}, 2),
        ("escalation", {"reason__exact": "failures"}, 1),
        ("outboxmessage", {"status__exact": "pending"}, 3),
    ):
        response = admin_client.get(changelist(model), query)
        assert (response.status_code, response.context["cl"].result_count) == (200, rows), model


# ------------------------------------------------------------------------ actions


def run_action(admin_client, action: str, intentions):
    return admin_client.post(
        changelist("intention"),
        {"action": action, "_selected_action": [str(i.pk) for i in intentions]},
        follow=True,
    )


def test_cancel_action_goes_through_the_service(admin_client, memory):
    intention, waiting = memory["intention"], memory["waiting"]
    response = run_action(admin_client, "cancel_intentions", [intention, waiting])
    assert response.status_code == 200
    assert [str(m) for m in response.context["messages"]] == ["Cancelled 2 intention(s)."]
    for item in (intention, waiting):
        item.refresh_from_db()
        assert item.status == "cancelled"
        last = Transition.objects.filter(intention=item).latest("id")
        assert (last.to_status, last.reason) == ("cancelled", "cancelled by operator admin")
        event = Event.objects.get(pk=last.event_id)
        assert (event.event_type, event.payload["reason"]) == (
            "intention.cancelled",
            "cancelled by operator admin",
        )


def test_complete_action_records_the_operator_as_evidence(admin_client, memory):
    intention, cancelled = memory["intention"], memory["cancelled"]
    before_cancelled = Transition.objects.filter(intention=cancelled).count()
    response = run_action(admin_client, "complete_intentions", [intention, cancelled])
    messages = [str(m) for m in response.context["messages"]]
    assert messages == [
        "Completed 1 intention(s).",
        "Skipped 1: old plan: intention is cancelled; it cannot be completed",
    ]
    intention.refresh_from_db()
    assert (intention.status, intention.completion_evidence) == (
        "completed",
        {"completed_by": "operator", "operator": "admin"},
    )
    cancelled.refresh_from_db()
    assert cancelled.status == "cancelled"
    assert Transition.objects.filter(intention=cancelled).count() == before_cancelled


def test_completing_a_recurring_intention_arms_the_next_occurrence(admin_client, memory):
    recurring = memory["recurring"]
    run_action(admin_client, "complete_intentions", [recurring])
    recurring.refresh_from_db()
    assert (recurring.status, recurring.occurrence, recurring.due_at) == (
        "active",
        2,
        T0 + timedelta(days=1, hours=1),
    )


def test_completing_releases_what_waits_for_it(admin_client, memory):
    agent = memory["agent"]
    first = make(agent, "prepare")
    then = make(agent, "then", trigger_type="dependency", dependencies=[first.pk])
    run_action(admin_client, "complete_intentions", [first])
    then.refresh_from_db()
    assert (then.status, Firing.objects.get(intention=then).cause) == ("due", "dependency")


def test_actions_need_the_change_permission(client, memory):
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_intention"))
    client.force_login(viewer)
    response = client.get(changelist("intention"))
    assert response.status_code == 200
    assert "cancel_intentions" not in response.content.decode()
    before = intentions_state()
    client.post(
        changelist("intention"),
        {"action": "cancel_intentions", "_selected_action": [str(memory["intention"].pk)]},
    )
    assert intentions_state() == before


def test_outbox_deliver_now_records_the_attempt(admin_client, memory):
    message = memory["outboxmessage"]
    Webhook.objects.filter(pk=memory["webhook"].pk).update(url="http://127.0.0.1:9/closed")
    response = admin_client.post(
        changelist("outboxmessage"),
        {"action": "deliver_now", "_selected_action": [str(message.pk)]},
        follow=True,
    )
    assert [str(m) for m in response.context["messages"]] == ["Delivery attempted: 1 pending."]
    message.refresh_from_db()
    assert (message.status, message.attempts) == ("pending", 1)
    assert message.last_error.startswith("ConnectError")


def test_thread_admin_counts(memory):
    # the fixture's shape, so that the smoke tests above mean what they say
    assert Thread.objects.get().status == "handing_over"
    assert Handover.objects.get().status == "pending"
