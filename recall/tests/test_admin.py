"""Retrieval telemetry in the admin: every page renders, nothing can be edited, and the
feedback changelist shows the failure taxonomy per day for the filters in force."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.urls import reverse

from piper.tenancy.tests.factories import AgentFactory
from recall.models import RecallFeedback, RetrievalTrace
from recall.services import recall, recall_feedback
from recall.tests.helpers import commitments

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(client):
    user = User.objects.create_superuser("operator", "op@example.com", "pw")
    client.force_login(user)
    return client


@pytest.fixture
def traces():
    agent = AgentFactory(name="admin-recall")
    commitments(agent)
    answered = [recall(agent=agent, query="What am I supposed to do?") for _ in range(4)]
    abstained = recall(agent=AgentFactory(), query="What's on my todo list?")
    codes = [("failure", "R0"), ("failure", "R0"), ("partial", "U0"), ("success", None)]
    for result, (outcome, code) in zip(answered, codes, strict=True):
        recall_feedback(agent=agent, trace_id=result.trace.pk, outcome=outcome, failure_code=code)
    # Two of them a day earlier, as if sent yesterday.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE recall_recallfeedback SET created_at = %s WHERE trace_id = ANY(%s)",
            [datetime(2026, 3, 1, 12, tzinfo=UTC), [answered[0].trace.pk, answered[2].trace.pk]],
        )
        cursor.execute(
            "UPDATE recall_recallfeedback SET created_at = %s WHERE trace_id = ANY(%s)",
            [datetime(2026, 3, 2, 12, tzinfo=UTC), [answered[1].trace.pk, answered[3].trace.pk]],
        )
    return answered, abstained


def taxonomy_rows(html: str) -> list[list[str]]:
    table = re.search(r'<table id="failure-taxonomy">(.*?)</table>', html, re.S).group(1)
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)
    ]


def test_trace_pages(staff, traces):
    answered, abstained = traces
    changelist = staff.get(reverse("admin:recall_retrievaltrace_changelist"))
    assert changelist.status_code == 200
    assert changelist.content.decode().count("What am I supposed to do?") == 4
    for params in (
        {"route__exact": "what_to_do"},
        {"abstained__exact": "1"},
        {"has_feedback": "no"},
    ):
        filtered = staff.get(reverse("admin:recall_retrievaltrace_changelist"), params)
        assert filtered.status_code == 200
    only_abstained = staff.get(
        reverse("admin:recall_retrievaltrace_changelist"), {"abstained__exact": "1"}
    ).content.decode()
    assert "todo list" in only_abstained and "supposed to do?" not in only_abstained
    page = staff.get(reverse("admin:recall_retrievaltrace_change", args=[answered[0].trace.pk]))
    html = page.content.decode()
    assert page.status_code == 200
    assert "what_to_do.supposed_to" in html  # the decision, read-only JSON
    assert f"{answered[0].evidence[0].id}" in html  # returned and candidates
    assert "<input" not in re.sub(
        r'<input type="hidden"[^>]*>', "", html.split('id="content-main"')[1]
    )


def test_nothing_is_editable(staff, traces):
    answered, _ = traces
    assert staff.get(reverse("admin:recall_retrievaltrace_add")).status_code == 403
    trace = answered[0].trace
    response = staff.post(
        reverse("admin:recall_retrievaltrace_delete", args=[trace.pk]), {"post": "yes"}
    )
    assert response.status_code == 403
    assert RetrievalTrace.objects.filter(pk=trace.pk).exists()
    assert staff.get(reverse("admin:recall_recallfeedback_add")).status_code == 403


def test_the_failure_taxonomy_per_day(staff, traces):
    response = staff.get(reverse("admin:recall_recallfeedback_changelist"))
    assert response.status_code == 200
    assert taxonomy_rows(response.content.decode()) == [
        ["day", "none", "R0", "R1", "R2", "R3", "A0", "U0", "total"],
        ["2026-03-02", "1", "1", "0", "0", "0", "0", "0", "2"],
        ["2026-03-01", "0", "1", "0", "0", "0", "0", "1", "2"],
        ["all days", "1", "2", "0", "0", "0", "0", "1", ""],
    ]
    # The filters and the date drill-down narrow the table too.
    failures = staff.get(
        reverse("admin:recall_recallfeedback_changelist"), {"outcome__exact": "failure"}
    )
    assert taxonomy_rows(failures.content.decode())[1:] == [
        ["2026-03-02", "0", "1", "0", "0", "0", "0", "0", "1"],
        ["2026-03-01", "0", "1", "0", "0", "0", "0", "0", "1"],
        ["all days", "0", "2", "0", "0", "0", "0", "0", ""],
    ]
    one_day = staff.get(
        reverse("admin:recall_recallfeedback_changelist"),
        {"created_at__year": "2026", "created_at__month": "3", "created_at__day": "1"},
    )
    assert taxonomy_rows(one_day.content.decode())[1:] == [
        ["2026-03-01", "0", "1", "0", "0", "0", "0", "1", "2"],
        ["all days", "0", "1", "0", "0", "0", "0", "1", ""],
    ]
    feedback = RecallFeedback.objects.order_by("created_at").first()
    page = staff.get(reverse("admin:recall_recallfeedback_change", args=[feedback.pk]))
    assert page.status_code == 200


def test_an_empty_taxonomy(staff):
    response = staff.get(reverse("admin:recall_recallfeedback_changelist"))
    assert taxonomy_rows(response.content.decode())[1:] == [["no feedback"]]
