"""Skills in the admin: every page renders, nothing is editable, and the
operator promotes, deprecates and retires through the lifecycle services."""

from __future__ import annotations

import pytest
from django.urls import reverse

from skills.models import Execution, Skill, SkillVersion, Validation, VersionTransition
from skills.tests.factories import make_skill, report, run_queued_validations

pytestmark = pytest.mark.django_db


@pytest.fixture
def version():
    version = make_skill()
    run_queued_validations(version)
    report(version, succeeded=False, error="wrong")
    version.refresh_from_db()
    return version


@pytest.mark.parametrize("model", [Skill, SkillVersion, Validation, Execution])
def test_every_page_renders_and_is_read_only(admin_client, version, model):
    row = model.objects.first()
    changelist = admin_client.get(reverse(f"admin:skills_{model._meta.model_name}_changelist"))
    assert changelist.status_code == 200
    page = admin_client.get(reverse(f"admin:skills_{model._meta.model_name}_change", args=[row.pk]))
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    assert (
        admin_client.get(reverse(f"admin:skills_{model._meta.model_name}_add")).status_code == 403
    )


def test_version_page_shows_lifecycle_stats_and_executions(admin_client, version):
    page = admin_client.get(reverse("admin:skills_skillversion_change", args=[version.pk]))
    text = page.content.decode()
    assert "all 2 examples passed in the sandbox" in text
    assert "&quot;failures&quot;: 1" in text
    assert "executions (newest first; the latest 20)" in text.lower()


def test_validation_page_shows_sandbox_output(admin_client, version):
    validation = Validation.objects.filter(version=version, kind="examples").get()
    page = admin_client.get(reverse("admin:skills_validation_change", args=[validation.pk]))
    assert "INV-1" in page.content.decode()


def action(admin_client, name: str, version):
    return admin_client.post(
        reverse("admin:skills_skillversion_changelist"),
        {"action": name, "_selected_action": [str(version.pk)]},
        follow=True,
    )


def test_promote_without_evidence_is_skipped_with_the_reason(admin_client, version):
    response = action(admin_client, "promote_versions", version)
    assert "Skipped 1" in response.content.decode()
    assert "0 of 3 verified successful executions" in response.content.decode()
    version.refresh_from_db()
    assert version.status == "experimental"


def test_deprecate_and_retire_go_through_the_services(admin_client, version):
    action(admin_client, "deprecate_versions", version)
    action(admin_client, "retire_versions", version)
    version.refresh_from_db()
    assert version.status == "retired"
    assert list(
        VersionTransition.objects.filter(version=version)
        .order_by("id")
        .values_list("to_status", "reason", "actor")
    )[-2:] == [
        ("deprecated", "deprecated by operator admin", "admin:admin"),
        ("retired", "retired by operator admin", "admin:admin"),
    ]
    assert version.transitions.last().event.source_type == "operator"
