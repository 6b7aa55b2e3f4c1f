"""Runs and candidates in the admin: every page renders, nothing is editable, and the
accept/reject actions go through the services."""

import pytest
from django.urls import reverse

from consolidation.models import CandidateFact, ConsolidationRun
from consolidation.services import consolidate
from consolidation.tests.factories import said, state
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def rows(settings):
    settings.CONSOLIDATION_MIN_SOURCES = 2
    agent = AgentFactory(name="admin-view")
    said(agent, "Alice Chen moved to Berlin.", actor="hr")
    said(agent, "Alice Chen moved to Berlin.", minutes=1, actor="alice")
    said(agent, "Bob Stone joined Initech.", minutes=2, actor="hr")
    said(agent, "Dora Stone moved to Oslo.", minutes=3, source_type="third_party")
    run = consolidate(agent=agent)
    return {
        "agent": agent,
        "consolidationrun": run,
        "candidatefact": CandidateFact.objects.get(agent=agent, value="Berlin"),
        "proposed": CandidateFact.objects.get(agent=agent, value="Initech"),
    }


@pytest.mark.parametrize(("model", "count"), [("consolidationrun", 1), ("candidatefact", 2)])
def test_changelist(admin_client, rows, model, count, django_assert_max_num_queries):
    with django_assert_max_num_queries(12):
        response = admin_client.get(reverse(f"admin:consolidation_{model}_changelist"))
    assert response.status_code == 200
    assert response.context["cl"].result_count == count


@pytest.mark.parametrize("model", ["consolidationrun", "candidatefact"])
def test_change_page_is_view_only(admin_client, rows, model):
    obj = rows[model]
    response = admin_client.get(reverse(f"admin:consolidation_{model}_change", args=[obj.pk]))
    assert response.status_code == 200
    assert response.context["has_change_permission"] is False
    assert 'name="_save"' not in response.content.decode()


def test_a_candidate_page_shows_its_evidence(admin_client, rows):
    candidate = rows["candidatefact"]
    html = admin_client.get(
        reverse("admin:consolidation_candidatefact_change", args=[candidate.pk])
    ).content.decode()
    assert html.count("Alice Chen moved to Berlin.") == 2  # both episodes, inline
    for evidence in candidate.evidence.all():
        assert reverse("admin:episodes_episode_change", args=[evidence.episode_id]) in html
    assert reverse("admin:facts_fact_change", args=[candidate.fact_id]) in html


def test_filters(admin_client, rows):
    url = reverse("admin:consolidation_candidatefact_changelist")
    assert [
        c.pk for c in admin_client.get(url, {"status": "proposed"}).context["cl"].result_list
    ] == [rows["proposed"].pk]
    runs = reverse("admin:consolidation_consolidationrun_changelist")
    assert admin_client.get(runs, {"status": "failed"}).context["cl"].result_count == 0


def test_accept_and_reject_actions_use_the_services(admin_client, rows):
    url = reverse("admin:consolidation_candidatefact_changelist")
    proposed, asserted = rows["proposed"], rows["candidatefact"]
    admin_client.post(url, {"action": "accept_candidates", "_selected_action": [proposed.pk]})
    proposed.refresh_from_db()
    assert (proposed.status, proposed.decided_by) == ("asserted", "admin")
    response = admin_client.post(
        url,
        {"action": "reject_candidates", "_selected_action": [asserted.pk, proposed.pk]},
        follow=True,
    )
    assert {c.status for c in CandidateFact.objects.filter(agent=rows["agent"])} == {"rejected"}
    assert CandidateFact.objects.get(pk=asserted.pk).reason == "rejected in the admin by admin"
    assert "Rejected 2 candidate(s)." in response.content.decode()
    again = admin_client.post(
        url, {"action": "reject_candidates", "_selected_action": [asserted.pk]}, follow=True
    )
    assert f"Skipped 1: {asserted.pk}: candidate {asserted.pk} is already rejected" in (
        again.content.decode()
    )


@pytest.mark.parametrize("model", ["consolidationrun", "candidatefact"])
def test_no_add_no_change_no_delete(admin_client, rows, model):
    before = state(rows["agent"])
    assert admin_client.get(reverse(f"admin:consolidation_{model}_add")).status_code == 403
    obj = rows[model]
    delete = reverse(f"admin:consolidation_{model}_delete", args=[obj.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    change = reverse(f"admin:consolidation_{model}_change", args=[obj.pk])
    assert admin_client.post(change, {"status": "failed"}).status_code == 403
    assert state(rows["agent"]) == before
    assert ConsolidationRun.objects.get(pk=rows["consolidationrun"].pk).status == "succeeded"


@pytest.fixture
def learned():
    from consolidation.models import CandidateSkill
    from consolidation.tests.test_skill_candidates import record

    agent = AgentFactory(name="admin-skills")
    traces = [record(agent, text=t) for t in ("invoice 4411", "credit note 17", "receipt 9")]
    consolidate(agent=agent, kind="skills")
    return {"agent": agent, "traces": traces, "candidate": CandidateSkill.objects.get(agent=agent)}


def test_a_candidate_skill_page_shows_its_traces_and_version(admin_client, learned):
    candidate = learned["candidate"]
    assert (
        admin_client.get(reverse("admin:consolidation_candidateskill_changelist")).status_code
        == 200
    )
    response = admin_client.get(
        reverse("admin:consolidation_candidateskill_change", args=[candidate.pk])
    )
    html = response.content.decode()
    assert response.context["has_change_permission"] is False
    assert reverse("admin:skills_skillversion_change", args=[candidate.version_id]) in html
    for trace in learned["traces"]:
        assert reverse("admin:skills_skilltrace_change", args=[trace.pk]) in html
        page = admin_client.get(reverse("admin:skills_skilltrace_change", args=[trace.pk]))
        assert page.status_code == 200 and trace.task in page.content.decode()


def test_the_reject_action_closes_a_candidate_skill(admin_client, learned):
    from consolidation.models import CandidateSkill
    from skills.models import SkillVersion

    candidate = learned["candidate"]
    response = admin_client.post(
        reverse("admin:consolidation_candidateskill_changelist"),
        {"action": "reject_candidates", "_selected_action": [str(candidate.pk)]},
        follow=True,
    )
    assert response.status_code == 200
    assert CandidateSkill.objects.get(pk=candidate.pk).status == "rejected"
    assert SkillVersion.objects.get(pk=candidate.version_id).status == "retired"
