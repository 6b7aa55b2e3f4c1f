"""Conventions every endpoint shares: JSON errors, size limit, schema, docs, health."""

import json

import pytest
from django.core.management import call_command
from django.test import override_settings
from drf_spectacular.validation import validate_schema

from ledger.tests.helpers import error, ledger_state

pytestmark = pytest.mark.django_db


class TestErrors:
    @pytest.mark.parametrize(
        "path", ["/api/v1/nope", "/api/v2/events", "/api/v1/events/not-a-uuid"]
    )
    def test_unknown_api_path_is_json_404(self, client_a, path):
        response = client_a.get(path)
        assert response.status_code == 404
        assert response["Content-Type"] == "application/json"
        assert response.json() == error("not_found", f"no such endpoint: {path}")

    def test_unknown_path_without_a_key_is_also_json_404(self, anonymous_client):
        response = anonymous_client.get("/api/v1/nope")
        assert (response.status_code, response.json()) == (
            404,
            error("not_found", "no such endpoint: /api/v1/nope"),
        )

    def test_method_not_allowed(self, client_a):
        before = ledger_state()
        response = client_a.put("/api/v1/events", {"event_type": "a.b"}, format="json")
        assert response.status_code == 405
        assert response.json() == error("method_not_allowed", 'Method "PUT" not allowed.')
        assert ledger_state() == before

    def test_not_acceptable(self, client_a):
        response = client_a.get("/api/v1/events", HTTP_ACCEPT="text/html")
        assert response.status_code == 406
        assert response.json() == error(
            "not_acceptable", "Could not satisfy the request Accept header."
        )

    def test_server_error_is_json(self, client_a, monkeypatch):
        from ledger import apis

        def broken(**kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr(apis.selectors, "event_list", broken)
        client_a.raise_request_exception = False
        response = client_a.get("/api/v1/events")
        assert response.status_code == 500
        assert response.json() == error("server_error", "internal error; it has been logged")


class TestRequestSizeLimit:
    @override_settings(PIPER_MAX_REQUEST_BYTES=100)
    @pytest.mark.parametrize("path", ["/api/v1/events", "/api/v1/sources", "/api/v1/keys"])
    def test_every_api_endpoint_is_limited_before_authentication(self, anonymous_client, path):
        body = json.dumps({"title": "x" * 200})
        response = anonymous_client.post(path, body, content_type="application/json")
        assert response.status_code == 413
        assert response.json() == error(
            "payload_too_large",
            f"request body is {len(body)} bytes; the limit is 100 bytes. Split the batch into smaller requests.",
            {"limit_bytes": 100, "received_bytes": len(body)},
        )

    def test_bad_content_length(self, client_a):
        response = client_a.generic(
            "POST", "/api/v1/events", b"{}", CONTENT_TYPE="application/json", CONTENT_LENGTH="lots"
        )
        assert response.status_code == 400
        assert response.json() == error("invalid", "Content-Length is not a number")


class TestSchemaAndDocs:
    def test_schema_is_valid_openapi(self, anonymous_client):
        response = anonymous_client.get("/api/schema/", {"format": "json"})
        assert response.status_code == 200
        schema = response.json()
        validate_schema(schema)
        assert schema["openapi"].startswith("3.")
        assert {
            "/api/v1/events",
            "/api/v1/events/{event_id}",
            "/api/v1/sources",
            "/api/v1/keys",
            "/api/v1/agent",
        } <= set(schema["paths"])
        assert schema["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"

    def test_schema_generates_without_warnings(self, tmp_path):
        call_command(
            "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml")
        )
        assert (tmp_path / "schema.yaml").read_text().startswith("openapi: 3")

    @pytest.mark.parametrize("path", ["/api/docs/", "/api/redoc/"])
    def test_docs_pages_load(self, anonymous_client, path):
        response = anonymous_client.get(path)
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/html")
        assert "/api/schema/" in response.content.decode()


class TestHealth:
    def test_healthz(self, anonymous_client):
        response = anonymous_client.get("/healthz")
        assert response.status_code == 200
        body = response.json()
        assert set(body) == {"status", "database", "redis", "worker", "beat"}
        assert body["database"]["ok"] is True
        assert body["database"]["vector"] == "0.8.6"
        assert body["redis"]["ok"] is True
        assert body["status"] in {"ok", "degraded"}
        healthy = body["worker"]["ok"] and body["beat"]["ok"] and not body["database"]["slow"]
        assert body["status"] == ("ok" if healthy else "degraded")

    def test_database_down_is_503(self, anonymous_client, monkeypatch):
        from piper.api import health

        def down():
            raise ConnectionError("no route to database")

        monkeypatch.setattr(health, "_database", down)
        response = anonymous_client.get("/healthz")
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "down"
        assert body["database"] == {"ok": False, "error": "ConnectionError: no route to database"}

    def test_redis_down_is_degraded_not_down(self, anonymous_client, monkeypatch):
        """The API serves without Redis (rate limits fail open, the reconcilers
        redo lost background work): a load balancer must keep the process."""
        from piper.api import health

        def gone():
            raise ConnectionError("Redis is not answering")

        monkeypatch.setattr(health, "_redis", gone)
        response = anonymous_client.get("/healthz")
        assert response.status_code == 200
        body = response.json()
        assert body["status"] == "degraded"
        assert body["redis"] == {"ok": False, "error": "ConnectionError: Redis is not answering"}
        assert body["worker"]["ok"] is False and body["beat"]["ok"] is False


class TestDatetimes:
    """Every response writes a moment one way (api_datetime), the way DRF's own
    DateTimeField does, so a client parses one format across the API."""

    @pytest.mark.parametrize(
        "moment",
        [
            "2026-10-03T02:00:00+00:00",
            "2026-10-03T02:00:00.250000+00:00",
            "2026-10-03T04:00:00+02:00",  # converted to UTC
            "2026-10-02T21:30:00.000001-04:30",
        ],
    )
    def test_api_datetime_is_drfs_utc_format(self, moment):
        from datetime import datetime

        from rest_framework import serializers

        from piper.api.serializers import api_datetime

        value = datetime.fromisoformat(moment)
        written = api_datetime(value)
        assert written == serializers.DateTimeField().to_representation(value)
        assert written.endswith("Z") and "+" not in written
        assert datetime.fromisoformat(written) == value

    def test_none_stays_none(self):
        from piper.api.serializers import api_datetime

        assert api_datetime(None) is None
