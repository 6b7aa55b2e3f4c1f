"""The ledger is read-only in the admin; every page renders."""

import pytest
from django.urls import reverse

from ledger.models import Event
from ledger.services import event_redact
from ledger.tests.factories import EventFactory, SourceFactory
from ledger.tests.helpers import ledger_state
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def ledger_rows():
    agent = AgentFactory(name="admin-view")
    event = EventFactory(agent=agent, payload={"text": "hello"}, session_id="s-1")
    child = EventFactory(agent=agent, parent_event_id=event.pk, correction_of_id=event.pk)
    source = SourceFactory(agent=agent)
    tombstone = event_redact(agent=agent, event_id=child.pk, reason="erasure", requested_by="ops")
    return {"event": event, "child": child, "source": source, "tombstone": tombstone}


@pytest.mark.parametrize(("model", "rows"), [("event", 4), ("source", 1), ("tombstone", 1)])
def test_changelist(admin_client, ledger_rows, model, rows, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):  # list_select_related: no query per row
        response = admin_client.get(reverse(f"admin:ledger_{model}_changelist"))
    assert response.status_code == 200
    assert response.context["cl"].result_count == rows


@pytest.mark.parametrize("model", ["event", "source", "tombstone"])
def test_change_page_is_view_only(admin_client, ledger_rows, model):
    obj = ledger_rows[model]
    response = admin_client.get(reverse(f"admin:ledger_{model}_change", args=[obj.pk]))
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert 'name="_save"' not in response.content.decode()


def test_event_change_page_shows_links_and_chain(admin_client, ledger_rows):
    child = ledger_rows["child"]
    page = admin_client.get(reverse("admin:ledger_event_change", args=[child.pk])).content.decode()
    assert child.hash in page
    assert child.prev_hash in page


def test_event_changelist_search_and_filters(admin_client, ledger_rows):
    url = reverse("admin:ledger_event_changelist")
    assert admin_client.get(url, {"q": "s-1"}).context["cl"].result_count == 1
    assert (
        admin_client.get(url, {"event_type": "ledger.events_redacted"}).context["cl"].result_count
        == 1
    )
    assert (
        admin_client.get(url, {"q": str(ledger_rows["event"].pk)}).context["cl"].result_count == 1
    )


@pytest.mark.parametrize("model", ["event", "source", "tombstone"])
def test_no_add(admin_client, model):
    assert admin_client.get(reverse(f"admin:ledger_{model}_add")).status_code == 403


@pytest.mark.parametrize("model", ["event", "source", "tombstone"])
def test_no_delete(admin_client, ledger_rows, model):
    obj = ledger_rows[model]
    before = ledger_state()
    url = reverse(f"admin:ledger_{model}_delete", args=[obj.pk])
    assert admin_client.get(url).status_code == 403
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert ledger_state() == before


def test_no_change_by_post(admin_client, ledger_rows):
    event = ledger_rows["event"]
    url = reverse("admin:ledger_event_change", args=[event.pk])
    assert admin_client.post(url, {"event_type": "forged.type"}).status_code == 403
    assert Event.objects.get(pk=event.pk).event_type == event.event_type


def test_no_bulk_delete_action(admin_client, ledger_rows):
    response = admin_client.get(reverse("admin:ledger_event_changelist"))
    assert "delete_selected" not in response.content.decode()
