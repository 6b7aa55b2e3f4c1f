"""Retention policies (API, validation) and the sweep that erases what they let expire."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from conftest import make_client
from episodes.models import Episode
from episodes.services import EpisodeDraft, episodes_record
from facts.models import Entity, Fact
from facts.tests.factories import at, claim
from forgetting.models import Erasure, ErasureKind, RetentionPolicy
from forgetting.services.retention import retention_policy_set, retention_sweep
from forgetting.tasks import sweep_retention
from intentions.services.engine import clock_set
from ledger.models import Event
from ledger.selectors import chain_verify
from ledger.services import event_append
from ledger.tests.helpers import ledger_state
from piper.tenancy.models import Scope
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/retention-policies"


@pytest.fixture
def admin():
    return make_client("keeper", scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN))


def db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def episodes(agent, n: int, *, actor: str = "bot") -> list[Episode]:
    return episodes_record(
        agent=agent,
        drafts=[
            EpisodeDraft(
                occurred_at=timezone.now(), summary=f"routine check number {i} passed", actor=actor
            )
            for i in range(n)
        ],
    )


# ------------------------------------------------------------------ the API


def test_a_policy_is_created_listed_changed_and_deleted(admin):
    created = admin.post(
        URL, {"name": "tools", "event_type": "tool.*", "max_age_days": 30}, format="json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert {k: body[k] for k in ("name", "event_type", "max_age_days", "is_active")} == {
        "name": "tools",
        "event_type": "tool.*",
        "max_age_days": 30,
        "is_active": True,
    }
    assert admin.get(URL).json() == [body]
    changed = admin.patch(f"{URL}/{body['id']}", {"max_age_days": 7}, format="json")
    assert (changed.status_code, changed.json()["max_age_days"]) == (200, 7)
    assert Event.objects.filter(agent=admin.agent, event_type="retention.policy_set").count() == 2
    assert admin.delete(f"{URL}/{body['id']}").status_code == 204
    assert admin.get(URL).json() == []
    assert Event.objects.filter(agent=admin.agent, event_type="retention.policy_deleted").exists()


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (
            {"name": "hold", "retention_class": "permanent", "max_age_days": 1},
            "invalid",
            "retention_class: 'permanent' is the legal hold: no policy expires it",
        ),
        ({"name": "x", "event_type": "Tool Called", "max_age_days": 1}, "invalid", None),
        ({"name": "x", "event_type": "tool.*", "max_age_days": 0}, "invalid", None),
        (
            {"name": "everything", "max_age_days": 30},
            "confirm_required",
            "this policy would erase every event of the agent's that retention can reach; "
            "narrow it (retention_class, event_type, source_type) or send confirm: true",
        ),
        ({"name": "x", "max_age_days": 30, "kind": "all"}, "invalid", None),
    ],
)
def test_bad_policies_are_refused_and_nothing_is_written(admin, body, code, message):
    before = ledger_state()
    response = admin.post(URL, body, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == code
    if message:
        assert message in response.json()["error"]["message"]
    assert ledger_state() == before
    assert not RetentionPolicy.objects.exists()


def test_a_policy_over_everything_needs_confirm(admin):
    response = admin.post(
        URL, {"name": "everything", "max_age_days": 30, "confirm": True}, format="json"
    )
    assert response.status_code == 201, response.content


def test_policies_are_per_agent_and_need_the_admin_scope(admin, client_a):
    policy = admin.post(
        URL, {"name": "t", "event_type": "tool.*", "max_age_days": 3}, format="json"
    )
    other = make_client("other", scopes=(Scope.ADMIN,))
    assert other.get(f"{URL}/{policy.json()['id']}").status_code == 404
    assert other.get(URL).json() == []
    assert client_a.get(URL).status_code == 403


# ---------------------------------------------------------------- the sweep


def test_the_sweep_erases_what_expired_in_chunks_with_a_receipt_each():
    agent = AgentFactory()
    old = episodes(agent, 5)
    middle = db_now()
    young = episodes(agent, 2)
    event_append(agent=agent, event_type="tool.called", payload={"tool": "x"})
    retention_policy_set(agent=agent, name="episodes", event_type="episode.*", max_age_days=30)

    result = retention_sweep(agent=agent, chunk=2, now=middle + timedelta(days=30))

    assert (result.erased, len(result.receipts), result.more) == (5, 3, False)
    assert set(Episode.objects.filter(agent=agent).values_list("pk", flat=True)) == {
        e.pk for e in young
    }
    assert not Episode.objects.filter(pk__in=[e.pk for e in old]).exists()
    receipts = Erasure.objects.filter(pk__in=result.receipts)
    assert {r.kind for r in receipts} == {ErasureKind.RETENTION}
    assert {r.residue_found for r in receipts} == {0}
    assert receipts.first().selector["retention_policy"] == "episodes"
    assert Event.objects.get(agent=agent, event_type="tool.called").redacted_at is None
    assert chain_verify(agent=agent).ok
    # Again: nothing left to do.
    again = retention_sweep(agent=agent, chunk=2, now=middle + timedelta(days=30))
    assert (again.erased, again.receipts) == (0, [])


def test_the_sweep_keeps_legal_holds_and_what_younger_memories_depend_on():
    agent = AgentFactory()
    held = event_append(
        agent=agent, event_type="note.added", payload={"t": "contract"}, retention_class="permanent"
    )
    claim(agent, "Zed", "role", "founder", at(2020))
    zed = Entity.objects.get(agent=agent, name="Zed")
    middle = db_now()
    claim(agent, "Zed", "city", "Quito", at(2024))  # younger, about the same entity
    retention_policy_set(agent=agent, name="all", max_age_days=10, confirm=True)

    result = retention_sweep(agent=agent, now=middle + timedelta(days=10))

    assert Event.objects.get(pk=held.pk).redacted_at is None
    assert Entity.objects.filter(pk=zed.pk).exists()  # the young fact still needs it
    assert result.kept == 1
    # The old role claim went; the young city claim stays.
    assert list(
        Fact.objects.filter(agent=agent, superseded_at__isnull=True).values_list(
            "object_value", flat=True
        )
    ) == ["Quito"]


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_erase_each_event_once():
    agent = AgentFactory()
    episodes(agent, 40)
    retention_policy_set(agent=agent, name="episodes", event_type="episode.*", max_age_days=1)
    later = db_now() + timedelta(days=2)
    results, errors = [], []

    def sweep():
        try:
            results.append(retention_sweep(agent=agent, chunk=5, now=later))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(r.erased for r in results) == 40
    assert not Episode.objects.filter(agent=agent).exists()
    assert Erasure.objects.filter(agent_ref=agent.pk).count() == sum(
        len(r.receipts) for r in results
    )
    assert chain_verify(agent=agent).ok


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_beat_task_sweeps_on_the_agents_clock(celery_worker_process):
    agent = AgentFactory()
    episodes(agent, 3)
    retention_policy_set(agent=agent, name="episodes", event_type="episode.*", max_age_days=7)
    clock_set(agent=agent, now=timezone.now() + timedelta(days=8))

    summary = sweep_retention.delay().get(timeout=60)

    assert summary["erased"] == 3
    assert not Episode.objects.filter(agent=agent).exists()
    # Redelivered: nothing more to do.
    assert sweep_retention.delay().get(timeout=60)["erased"] == 0
