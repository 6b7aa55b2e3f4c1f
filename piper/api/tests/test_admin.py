"""Stored Idempotency-Key answers are visible, not editable, in the admin."""

import pytest
from django.urls import reverse

from piper.api.models import IdempotencyRecord

pytestmark = pytest.mark.django_db


@pytest.fixture
def record(client_a):
    client_a.post(
        "/api/v1/events", {"event_type": "a.b"}, format="json", HTTP_IDEMPOTENCY_KEY="admin-1"
    )
    return IdempotencyRecord.objects.get(key="admin-1")


def test_changelist(admin_client, record):
    response = admin_client.get(reverse("admin:api_idempotencyrecord_changelist"))
    assert response.status_code == 200
    assert response.context["cl"].result_count == 1
    assert (
        admin_client.get(reverse("admin:api_idempotencyrecord_changelist"), {"q": "agent-a"})
        .context["cl"]
        .result_count
        == 1
    )


def test_change_page_is_view_only(admin_client, record):
    response = admin_client.get(reverse("admin:api_idempotencyrecord_change", args=[record.pk]))
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert "admin-1" in response.content.decode()


def test_no_add(admin_client):
    assert admin_client.get(reverse("admin:api_idempotencyrecord_add")).status_code == 403
