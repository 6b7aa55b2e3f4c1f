"""Bearer keys (401) and scopes (403): nothing is written by a refused request."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from ledger.tests.helpers import error, ledger_state
from piper.tenancy.models import ApiKey, Scope
from piper.tenancy.services import agent_deactivate, api_key_revoke
from piper.tenancy.tests.factories import ApiKeyFactory

pytestmark = pytest.mark.django_db

AUTH_REQUIRED = "authentication required: send 'Authorization: Bearer <api key>'"
MALFORMED = "malformed Authorization header: send 'Authorization: Bearer <api key>'"
UNKNOWN = "the API key is unknown or has been revoked"


def client_with(header: str | None) -> APIClient:
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    return client


def assert_401(response, message):
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="piper"'
    assert response.json() == error("not_authenticated", message)


class TestAuthentication:
    @pytest.mark.parametrize(
        ("method", "path"),
        [
            ("get", "/api/v1/events"),
            ("post", "/api/v1/events"),
            ("get", "/api/v1/agent"),
            ("get", "/api/v1/keys"),
        ],
    )
    def test_missing_header(self, anonymous_client, method, path):
        before = ledger_state()
        response = getattr(anonymous_client, method)(path, {"event_type": "a.b"}, format="json")
        assert_401(response, AUTH_REQUIRED)
        assert ledger_state() == before

    @pytest.mark.parametrize(
        "header", ["Token pm_abc", "Bearer", "Bearer a b", "Basic dXNlcjpwYXNz", "pm_abc"]
    )
    def test_malformed_header(self, header):
        assert_401(client_with(header).get("/api/v1/events"), MALFORMED)

    def test_scheme_is_case_insensitive(self):
        api_key = ApiKeyFactory()
        response = client_with(f"bearer {api_key.raw}").get("/api/v1/agent")
        assert (response.status_code, response.json()["name"]) == (200, api_key.agent.name)

    @pytest.mark.parametrize("secret", ["pm_not-a-real-key", "sk_live_something", "pm_"])
    def test_unknown_key(self, secret):
        assert_401(client_with(f"Bearer {secret}").get("/api/v1/events"), UNKNOWN)

    def test_revoked_key(self, client_a):
        before = ledger_state()
        api_key_revoke(api_key=client_a.api_key)
        assert_401(client_a.get("/api/v1/events"), UNKNOWN)
        assert_401(client_a.post("/api/v1/events", {"event_type": "a.b"}, format="json"), UNKNOWN)
        assert ledger_state() == before

    def test_inactive_agent(self, client_a):
        before = ledger_state()
        agent_deactivate(agent=client_a.agent)
        assert_401(client_a.get("/api/v1/agent"), UNKNOWN)
        assert_401(client_a.post("/api/v1/events", {"event_type": "a.b"}, format="json"), UNKNOWN)
        assert ledger_state() == before

    def test_another_key_of_the_agent_keeps_working_after_a_revocation(self, client_a):
        other = ApiKeyFactory(agent=client_a.agent)
        api_key_revoke(api_key=client_a.api_key)
        assert client_with(f"Bearer {other.raw}").get("/api/v1/agent").status_code == 200

    def test_use_is_recorded_at_most_once_a_minute(self, client_a):
        assert ApiKey.objects.get(pk=client_a.api_key.pk).last_used_at is None
        client_a.get("/api/v1/agent")
        first = ApiKey.objects.get(pk=client_a.api_key.pk).last_used_at
        assert first is not None
        with CaptureQueriesContext(connection) as queries:
            client_a.get("/api/v1/agent")
        assert not [q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
        assert ApiKey.objects.get(pk=client_a.api_key.pk).last_used_at == first


class TestScopes:
    def test_read_only_key_reads(self, read_only_client):
        assert read_only_client.get("/api/v1/events").status_code == 200

    @pytest.mark.parametrize(
        ("path", "body"),
        [
            ("/api/v1/events", {"event_type": "a.b"}),
            ("/api/v1/events", {"events": [{"event_type": "a.b"}]}),
            ("/api/v1/sources", {"title": "T", "content": "x"}),
        ],
    )
    def test_read_only_key_cannot_write(self, read_only_client, path, body):
        before = ledger_state()
        response = read_only_client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
        assert response.status_code == 403
        assert response.json() == error(
            "permission_denied",
            f"this API key lacks the 'write' scope needed for POST {path}; it has ['read']",
        )
        assert ledger_state() == before

    @pytest.mark.parametrize(
        ("method", "path"),
        [("get", "/api/v1/keys"), ("post", "/api/v1/keys"), ("delete", "/api/v1/keys/{key_id}")],
    )
    @pytest.mark.parametrize("scopes", [[Scope.READ], [Scope.WRITE], [Scope.READ, Scope.WRITE]])
    def test_key_management_needs_the_admin_scope(self, method, path, scopes):
        api_key = ApiKeyFactory(scopes=scopes)
        path = path.format(key_id=api_key.pk)
        keys_before = ApiKey.objects.count()
        response = getattr(client_with(f"Bearer {api_key.raw}"), method)(
            path, {"name": "x"}, format="json"
        )
        assert response.status_code == 403
        assert response.json() == error(
            "permission_denied",
            f"this API key lacks the 'admin' scope needed for {method.upper()} {path}; it has {sorted(str(s) for s in scopes)}",
        )
        assert ApiKey.objects.count() == keys_before
        assert ApiKey.objects.get(pk=api_key.pk).revoked_at is None

    def test_admin_scope_includes_read_and_write(self):
        api_key = ApiKeyFactory(scopes=[Scope.ADMIN])
        client = client_with(f"Bearer {api_key.raw}")
        assert (
            client.post("/api/v1/events", {"event_type": "a.b"}, format="json").status_code == 201
        )
        assert client.get("/api/v1/events").status_code == 200
