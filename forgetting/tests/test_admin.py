"""The admin: receipts (read-only), retention policies written through the services,
and the hard delete of an agent."""

from __future__ import annotations

import pytest
from django.urls import reverse

from forgetting.models import Erasure, RetentionPolicy
from forgetting.services.erasure import Selector, erasure_run
from ledger.models import Event
from ledger.services import event_append
from piper.tenancy.models import Agent
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def receipt():
    agent = AgentFactory(name="kept-agent")
    event = event_append(agent=agent, event_type="user.said", payload={"text": "hello there"})
    return erasure_run(
        agent=agent,
        selector=Selector(event_ids=(event.pk,)),
        reason="asked",
        requested_by="ops",
    ).receipt


def test_receipt_pages(admin_client, receipt):
    listing = admin_client.get(reverse("admin:forgetting_erasure_changelist"))
    assert listing.status_code == 200
    assert "kept-agent" in listing.content.decode()
    page = admin_client.get(reverse("admin:forgetting_erasure_change", args=[receipt.pk]))
    assert page.status_code == 200
    assert "erased_words" in page.content.decode()  # the residue findings are shown
    assert admin_client.get(reverse("admin:forgetting_erasure_add")).status_code == 403


def test_a_policy_is_added_and_changed_through_the_services(admin_client):
    agent = AgentFactory()
    url = reverse("admin:forgetting_retentionpolicy_add")
    assert admin_client.get(url).status_code == 200
    form = {
        "agent": agent.pk,
        "name": "tools",
        "retention_class": "",
        "event_type": "tool.*",
        "source_type": "",
        "max_age_days": 30,
        "is_active": "on",
    }
    response = admin_client.post(url, form)
    assert response.status_code == 302, response.content
    policy = RetentionPolicy.objects.get(agent=agent)
    assert policy.source_event.event_type == "retention.policy_set"
    change = reverse("admin:forgetting_retentionpolicy_change", args=[policy.pk])
    assert admin_client.post(change, {**form, "max_age_days": 7}).status_code == 302
    policy.refresh_from_db()
    assert policy.max_age_days == 7
    assert Event.objects.filter(agent=agent, event_type="retention.policy_set").count() == 2
    delete = reverse("admin:forgetting_retentionpolicy_delete", args=[policy.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 302
    assert not RetentionPolicy.objects.exists()
    assert Event.objects.filter(agent=agent, event_type="retention.policy_deleted").exists()


def test_a_policy_over_everything_asks_for_confirm_in_the_admin(admin_client):
    agent = AgentFactory()
    url = reverse("admin:forgetting_retentionpolicy_add")
    form = {"agent": agent.pk, "name": "all", "max_age_days": 30, "is_active": "on"}
    response = admin_client.post(url, form)
    assert response.status_code == 200
    assert "send confirm: true" in response.content.decode()
    assert not RetentionPolicy.objects.exists()
    assert admin_client.post(url, {**form, "confirm": "on"}).status_code == 302


def test_an_agent_is_deleted_from_the_admin_after_its_name_is_typed(admin_client):
    agent = AgentFactory(name="leaving")
    event_append(agent=agent, event_type="a.b")
    url = reverse("admin:forgetting_erasure_agent_delete")
    assert admin_client.get(url).status_code == 200
    wrong = admin_client.post(url, {"agent": agent.pk, "confirm_name": "x", "reason": "r"})
    assert "nothing deleted" in wrong.content.decode()
    assert Agent.objects.filter(pk=agent.pk).exists()
    done = admin_client.post(url, {"agent": agent.pk, "confirm_name": "leaving", "reason": "r"})
    receipt = Erasure.objects.get(agent_ref=agent.pk)
    assert done.url == reverse("admin:forgetting_erasure_change", args=[receipt.pk])
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert receipt.residue_found == 0
