"""Agents, keys and clocks in the admin: writes go through the services; nothing is deleted."""

from datetime import UTC, datetime

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from rest_framework.test import APIClient

from piper.tenancy.models import Agent, AgentClock, ApiKey
from piper.tenancy.services import hash_key
from piper.tenancy.tests.factories import AgentFactory, ApiKeyFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def api_key():
    return ApiKeyFactory(agent=AgentFactory(name="admin-agent"), name="console key")


class TestAgentAdmin:
    def test_changelist(self, admin_client, api_key, django_assert_max_num_queries):
        AgentFactory.create_batch(3)
        with django_assert_max_num_queries(10):
            response = admin_client.get(reverse("admin:tenancy_agent_changelist"))
        assert response.status_code == 200
        assert response.context["cl"].result_count == 4
        assert (
            admin_client.get(reverse("admin:tenancy_agent_changelist"), {"q": "admin-agent"})
            .context["cl"]
            .result_count
            == 1
        )

    def test_change_page_shows_keys_without_secrets(self, admin_client, api_key):
        response = admin_client.get(reverse("admin:tenancy_agent_change", args=[api_key.agent.pk]))
        assert response.status_code == 200
        page = response.content.decode()
        assert api_key.prefix in page
        assert api_key.raw not in page
        assert api_key.key_hash not in page

    def test_add_goes_through_the_service(self, admin_client):
        response = admin_client.post(
            reverse("admin:tenancy_agent_add"),
            {
                "name": "made-in-admin",
                "description": "by an operator",
                "is_active": "on",
                "api_keys-TOTAL_FORMS": "0",
                "api_keys-INITIAL_FORMS": "0",
            },
        )
        assert response.status_code == 302, response.context["adminform"].form.errors
        agent = Agent.objects.get(name="made-in-admin")
        assert agent.description == "by an operator"
        assert response["Location"] == reverse("admin:tenancy_agent_changelist")

    def test_add_keeps_the_state_fields(self, admin_client):
        response = admin_client.post(
            reverse("admin:tenancy_agent_add"),
            {
                "name": "dormant",
                "is_throwaway": "on",
                "api_keys-TOTAL_FORMS": "0",
                "api_keys-INITIAL_FORMS": "0",
            },
        )
        assert response.status_code == 302
        agent = Agent.objects.get(name="dormant")
        assert (agent.is_active, agent.is_throwaway) == (False, True)

    def test_add_with_a_bad_name_is_a_form_error(self, admin_client):
        response = admin_client.post(
            reverse("admin:tenancy_agent_add"),
            {"name": "bad name", "api_keys-TOTAL_FORMS": "0", "api_keys-INITIAL_FORMS": "0"},
        )
        assert response.status_code == 200
        assert response.context["adminform"].form.errors
        assert not Agent.objects.filter(name="bad name").exists()

    def test_delete_is_not_permitted(self, admin_client, api_key):
        url = reverse("admin:tenancy_agent_delete", args=[api_key.agent.pk])
        assert admin_client.get(url).status_code == 403
        assert admin_client.post(url, {"post": "yes"}).status_code == 403
        assert Agent.objects.filter(pk=api_key.agent.pk).exists()

    def test_deactivate_action(self, admin_client, api_key):
        response = admin_client.post(
            reverse("admin:tenancy_agent_changelist"),
            {"action": "deactivate", "_selected_action": [api_key.agent.pk]},
            follow=True,
        )
        assert response.status_code == 200
        assert [str(m) for m in get_messages(response.wsgi_request)] == ["Deactivated 1 agent(s)."]
        assert Agent.objects.get(pk=api_key.agent.pk).is_active is False
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key.raw}")
        assert client.get("/api/v1/agent").status_code == 401


class TestApiKeyAdmin:
    def test_changelist(self, admin_client, api_key, django_assert_max_num_queries):
        ApiKeyFactory.create_batch(3)
        with django_assert_max_num_queries(10):  # list_select_related: no query per key
            response = admin_client.get(reverse("admin:tenancy_apikey_changelist"))
        assert response.status_code == 200
        assert response.context["cl"].result_count == 4
        assert api_key.raw not in response.content.decode()

    def test_change_page(self, admin_client, api_key):
        response = admin_client.get(reverse("admin:tenancy_apikey_change", args=[api_key.pk]))
        assert response.status_code == 200
        page = response.content.decode()
        assert api_key.prefix in page
        assert api_key.raw not in page
        assert api_key.key_hash not in page

    def test_add_creates_the_key_through_the_service_and_shows_it_once(self, admin_client):
        agent = AgentFactory(name="gets-a-key")
        response = admin_client.post(
            reverse("admin:tenancy_apikey_add"),
            {
                "agent": agent.pk,
                "name": "from admin",
                "scopes": ["read", "admin"],
                "rate_per_minute": "50",
            },
            follow=True,
        )
        assert response.status_code == 200
        api_key = ApiKey.objects.get(agent=agent)
        assert (api_key.name, api_key.scopes, api_key.rate_per_minute) == (
            "from admin",
            ["read", "admin"],
            50,
        )
        shown = [str(m) for m in get_messages(response.wsgi_request) if "shown once" in str(m)]
        assert len(shown) == 1
        raw = shown[0].split(": ")[-1]
        assert shown[0] == f"New API key (shown once, store it now): {raw}"
        assert api_key.key_hash == hash_key(raw)
        assert response.redirect_chain[-1][0] == reverse("admin:tenancy_apikey_changelist")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        assert client.get("/api/v1/keys").status_code == 200  # admin scope
        # and never again
        page = admin_client.get(
            reverse("admin:tenancy_apikey_change", args=[api_key.pk])
        ).content.decode()
        assert raw not in page

    def test_add_page_renders(self, admin_client):
        response = admin_client.get(reverse("admin:tenancy_apikey_add"))
        assert response.status_code == 200
        assert list(response.context["adminform"].form.fields) == [
            "agent",
            "name",
            "scopes",
            "rate_per_minute",
            "clearance",
            "tools",
        ]

    def test_add_without_scopes_is_a_form_error(self, admin_client):
        agent = AgentFactory()
        response = admin_client.post(
            reverse("admin:tenancy_apikey_add"), {"agent": agent.pk, "name": "x"}
        )
        assert response.status_code == 200
        assert response.context["adminform"].form.errors == {"scopes": ["This field is required."]}
        assert not ApiKey.objects.exists()

    def test_revoke_action(self, admin_client, api_key):
        response = admin_client.post(
            reverse("admin:tenancy_apikey_changelist"),
            {"action": "revoke", "_selected_action": [api_key.pk]},
            follow=True,
        )
        assert [str(m) for m in get_messages(response.wsgi_request)] == ["Revoked 1 key(s)."]
        assert ApiKey.objects.get(pk=api_key.pk).revoked_at is not None

    def test_delete_is_not_permitted(self, admin_client, api_key):
        assert (
            admin_client.get(reverse("admin:tenancy_apikey_delete", args=[api_key.pk])).status_code
            == 403
        )
        assert ApiKey.objects.filter(pk=api_key.pk).exists()


class TestEditing:
    """Edits go through the services: only what may change after creation can."""

    def test_agent_edit_changes_description_and_activity_only(self, admin_client):
        agent = AgentFactory(name="keeps-its-name", description="old")
        url = reverse("admin:tenancy_agent_change", args=[agent.pk])
        form = admin_client.get(url).context["adminform"].form
        assert "name" not in form.fields  # read-only once created
        response = admin_client.post(
            url,
            {
                "description": "new",
                "is_active": "",
                "api_keys-TOTAL_FORMS": "0",
                "api_keys-INITIAL_FORMS": "0",
            },
        )
        assert response.status_code == 302, response.context["adminform"].form.errors
        agent.refresh_from_db()
        assert (agent.name, agent.description, agent.is_active) == ("keeps-its-name", "new", False)

    def test_api_key_edit_renames_and_rerates(self, admin_client, api_key):
        url = reverse("admin:tenancy_apikey_change", args=[api_key.pk])
        response = admin_client.post(url, {"name": "renamed", "rate_per_minute": "7"})
        assert response.status_code == 302
        api_key.refresh_from_db()
        assert (api_key.name, api_key.rate_per_minute) == ("renamed", 7)

    def test_api_key_rate_zero_is_a_form_error(self, admin_client, api_key):
        url = reverse("admin:tenancy_apikey_change", args=[api_key.pk])
        response = admin_client.post(url, {"name": "x", "rate_per_minute": "0"})
        assert response.status_code == 200
        assert response.context["adminform"].form.errors == {
            "rate_per_minute": ["Ensure this value is greater than or equal to 1."]
        }
        api_key.refresh_from_db()
        assert api_key.name != "x"


class TestAgentClockAdmin:
    @pytest.fixture
    def clock(self):
        return AgentClock.objects.create(
            agent=AgentFactory(name="simulated"), now=datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
        )

    def test_changelist(self, admin_client, clock, django_assert_max_num_queries):
        AgentClock.objects.create(agent=AgentFactory(), now=clock.now)
        with django_assert_max_num_queries(10):  # list_select_related: no query per row
            response = admin_client.get(reverse("admin:tenancy_agentclock_changelist"))
        assert response.status_code == 200
        assert response.context["cl"].result_count == 2

    def test_change_page_is_view_only(self, admin_client, clock):
        url = reverse("admin:tenancy_agentclock_change", args=[clock.pk])
        response = admin_client.get(url)
        assert response.status_code == 200
        content = response.content.decode()
        assert 'name="_save"' not in content
        assert "deletelink" not in content
        assert admin_client.post(url, {"now": "2031-01-01T00:00:00Z"}).status_code == 403
        assert AgentClock.objects.get(pk=clock.pk).now == clock.now

    def test_nothing_is_added_or_deleted_in_the_admin(self, admin_client, clock):
        add = admin_client.get(reverse("admin:tenancy_agentclock_add"))
        delete = admin_client.get(reverse("admin:tenancy_agentclock_delete", args=[clock.pk]))
        assert (add.status_code, delete.status_code) == (403, 403)
