"""/api/v1/agent and key management (/api/v1/keys, admin scope)."""

import uuid
from datetime import UTC

import pytest
from rest_framework.test import APIClient

from conftest import make_client
from ledger.tests.helpers import error
from piper.api.models import IdempotencyRecord
from piper.tenancy.models import ApiKey, Scope
from piper.tenancy.services import hash_key

pytestmark = pytest.mark.django_db

KEY_FIELDS = [
    "id",
    "name",
    "prefix",
    "scopes",
    "rate_per_minute",
    "clearance",
    "tools",
    "created_at",
    "last_used_at",
    "revoked_at",
]


def iso(value):
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z") if value else None


def key_body(api_key: ApiKey) -> dict:
    api_key.refresh_from_db()
    return {
        "id": str(api_key.pk),
        "name": api_key.name,
        "prefix": api_key.prefix,
        "scopes": api_key.scopes,
        "rate_per_minute": api_key.rate_per_minute,
        "clearance": api_key.clearance,
        "tools": api_key.tools,
        "created_at": iso(api_key.created_at),
        "last_used_at": iso(api_key.last_used_at),
        "revoked_at": iso(api_key.revoked_at),
    }


@pytest.fixture
def admin_client_a(db):
    return make_client("agent-admin", scopes=(Scope.ADMIN,))


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_agent_me(client_a):
    client_a.agent.refresh_from_db()
    response = client_a.get("/api/v1/agent")
    assert response.status_code == 200
    assert response.json() == {
        "id": str(client_a.agent.pk),
        "name": "agent-a",
        "description": "",
        "created_at": iso(client_a.agent.created_at),
        "scopes": ["read", "write"],
    }


class TestKeys:
    def test_create_returns_the_secret_once_and_it_works(self, admin_client_a):
        response = admin_client_a.post(
            "/api/v1/keys",
            {"name": "worker", "scopes": ["read"], "rate_per_minute": 60},
            format="json",
        )
        assert response.status_code == 201
        body = response.json()
        api_key = ApiKey.objects.get(pk=body["id"])
        raw = body["key"]
        assert body == {**key_body(api_key), "key": raw}
        assert (api_key.name, api_key.scopes, api_key.rate_per_minute) == ("worker", ["read"], 60)
        assert raw.startswith("pm_") and api_key.prefix == raw[:10]
        assert api_key.key_hash == hash_key(raw)
        assert api_key.agent == admin_client_a.agent

        me = bearer(raw).get("/api/v1/agent")
        assert (me.status_code, me.json()["name"], me.json()["scopes"]) == (
            200,
            "agent-admin",
            ["read"],
        )
        listed = admin_client_a.get("/api/v1/keys").json()
        assert all(set(k) == set(KEY_FIELDS) for k in listed)  # the secret is never shown again
        assert raw not in str(listed)

    def test_create_with_defaults(self, admin_client_a):
        response = admin_client_a.post("/api/v1/keys", {"name": "default"}, format="json")
        assert response.status_code == 201
        assert (response.json()["scopes"], response.json()["rate_per_minute"]) == (
            ["read", "write"],
            None,
        )

    @pytest.mark.parametrize(
        ("body", "field", "message"),
        [
            ({}, "name", "This field is required."),
            ({"name": "x", "scopes": []}, "scopes", "Ensure this field has at least 1 elements."),
            (
                {"name": "x", "rate_per_minute": 0},
                "rate_per_minute",
                "Ensure this value is greater than or equal to 1.",
            ),
            (
                {"name": "x", "agent": "other"},
                "agent",
                "unknown field; allowed: clearance, name, rate_per_minute, scopes, tools",
            ),
        ],
    )
    def test_create_bad_input(self, admin_client_a, body, field, message):
        before = ApiKey.objects.count()
        response = admin_client_a.post("/api/v1/keys", body, format="json")
        assert response.status_code == 400
        assert response.json() == error("invalid", f"{field}: {message}", {field: [message]})
        assert ApiKey.objects.count() == before

    def test_create_unknown_scope(self, admin_client_a):
        before = ApiKey.objects.count()
        response = admin_client_a.post(
            "/api/v1/keys", {"name": "x", "scopes": ["read", "root"]}, format="json"
        )
        assert response.status_code == 400
        assert response.json() == error(
            "invalid",
            'scopes[1]: "root" is not a valid choice.',
            {"scopes": {"1": ['"root" is not a valid choice.']}},
        )
        assert ApiKey.objects.count() == before

    def test_create_with_a_tool_allowlist(self, admin_client_a):
        response = admin_client_a.post(
            "/api/v1/keys",
            {"name": "desktop", "tools": ["recall", "context", "recall"]},
            format="json",
        )
        assert response.status_code == 201, response.content
        assert response.json()["tools"] == ["context", "recall"]
        before = ApiKey.objects.count()
        response = admin_client_a.post(
            "/api/v1/keys", {"name": "bad", "tools": ["Recall!"]}, format="json"
        )
        assert response.status_code == 400
        assert response.json()["error"]["message"] == (
            "tools: 'Recall!' is not a tool name (lowercase letters, digits, underscores)"
        )
        assert ApiKey.objects.count() == before

    def test_list_shows_only_this_agents_keys(self, admin_client_a, client_b):
        response = admin_client_a.get("/api/v1/keys")
        assert response.status_code == 200
        assert response.json() == [key_body(admin_client_a.api_key)]

    def test_revoke(self, admin_client_a):
        created = admin_client_a.post("/api/v1/keys", {"name": "temp"}, format="json").json()
        assert bearer(created["key"]).get("/api/v1/agent").status_code == 200
        response = admin_client_a.delete(f"/api/v1/keys/{created['id']}")
        assert response.status_code == 200
        api_key = ApiKey.objects.get(pk=created["id"])
        assert api_key.revoked_at is not None
        assert response.json() == key_body(api_key)
        assert bearer(created["key"]).get("/api/v1/agent").status_code == 401
        again = admin_client_a.delete(f"/api/v1/keys/{created['id']}")
        assert (again.status_code, again.json()) == (200, response.json())  # idempotent

    def test_revoke_another_agents_key_is_404(self, admin_client_a, client_b):
        theirs = client_b.api_key.pk
        response = admin_client_a.delete(f"/api/v1/keys/{theirs}")
        assert response.status_code == 404
        assert response.json() == error("not_found", f"API key {theirs} not found")
        assert ApiKey.objects.get(pk=theirs).revoked_at is None
        missing = uuid.uuid4()
        assert admin_client_a.delete(f"/api/v1/keys/{missing}").json() == error(
            "not_found", f"API key {missing} not found"
        )

    def test_idempotent_creation_never_stores_the_secret(self, admin_client_a):
        first = admin_client_a.post(
            "/api/v1/keys", {"name": "retry"}, format="json", HTTP_IDEMPOTENCY_KEY="create-1"
        )
        assert first.status_code == 201
        raw = first.json()["key"]
        record = IdempotencyRecord.objects.get(agent=admin_client_a.agent, key="create-1")
        assert raw not in str(record.response_body)
        replay = admin_client_a.post(
            "/api/v1/keys", {"name": "retry"}, format="json", HTTP_IDEMPOTENCY_KEY="create-1"
        )
        assert replay.status_code == 201
        assert replay["Idempotent-Replayed"] == "true"
        assert replay.json() == {**first.json(), "key": None}
        assert ApiKey.objects.filter(name="retry").count() == 1
