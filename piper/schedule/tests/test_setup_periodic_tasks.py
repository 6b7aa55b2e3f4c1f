"""setup_periodic_tasks: the schedule lives in code and the command is idempotent."""

from io import StringIO

import pytest
from django.core.management import call_command
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from piper.celery import app
from piper.schedule.periodic import PERIODIC_TASKS

pytestmark = pytest.mark.django_db


def run() -> str:
    out = StringIO()
    call_command("setup_periodic_tasks", stdout=out)
    return out.getvalue()


def rows() -> list[dict]:
    return list(PeriodicTask.objects.order_by("name").values())


def summary() -> list[tuple]:
    return [
        (t.name, t.task, str(t.interval or t.crontab), t.enabled, t.expire_seconds)
        for t in PeriodicTask.objects.select_related("interval", "crontab").order_by("name")
    ]


def test_creates_the_periodic_tasks():
    assert run() == (
        "created    piper:beat-heartbeat\n"
        "created    piper:purge-idempotency-records\n"
        "created    piper:verify-ledger-chains\n"
        "created    piper:intentions-engine\n"
        "created    piper:intentions-rehearse\n"
        "created    piper:intentions-webhook-retries\n"
        "created    piper:skills-review-validated\n"
        "created    piper:skills-validation-backlog\n"
        "created    piper:episodes-embed-backlog\n"
        "created    piper:facts-texts-backlog\n"
        "created    piper:forgetting-retention-sweep\n"
        "created    piper:episodes-agent-graphs\n"
        "created    piper:consolidation-due\n"
    )
    assert summary() == [
        ("piper:beat-heartbeat", "piper.beat_heartbeat", "every 30 seconds", True, 30),
        (
            "piper:consolidation-due",
            "consolidation.consolidate_due",
            "every 600 seconds",
            True,
            600,
        ),
        (
            "piper:episodes-agent-graphs",
            "episodes.build_agent_graphs",
            "43 * * * * (m/h/dM/MY/d) UTC",
            True,
            3600,
        ),
        (
            "piper:episodes-embed-backlog",
            "episodes.embed_backlog",
            "every 60 seconds",
            True,
            60,
        ),
        (
            "piper:facts-texts-backlog",
            "facts.fact_texts_backlog",
            "every 60 seconds",
            True,
            60,
        ),
        (
            "piper:forgetting-retention-sweep",
            "forgetting.retention_sweep",
            "*/15 * * * * (m/h/dM/MY/d) UTC",
            True,
            900,
        ),
        ("piper:intentions-engine", "intentions.engine_cycle", "every 5 seconds", True, 10),
        (
            "piper:intentions-rehearse",
            "intentions.rehearse",
            "17 * * * * (m/h/dM/MY/d) UTC",
            True,
            3600,
        ),
        (
            "piper:intentions-webhook-retries",
            "intentions.retry_outbox",
            "every 30 seconds",
            True,
            60,
        ),
        (
            "piper:purge-idempotency-records",
            "api.purge_idempotency_records",
            "7 * * * * (m/h/dM/MY/d) UTC",
            True,
            3600,
        ),
        (
            "piper:skills-review-validated",
            "skills.review_validated",
            "every 300 seconds",
            True,
            300,
        ),
        (
            "piper:skills-validation-backlog",
            "skills.validation_backlog",
            "every 120 seconds",
            True,
            120,
        ),
        (
            "piper:verify-ledger-chains",
            "ledger.verify_chains",
            "30 3 * * * (m/h/dM/MY/d) UTC",
            True,
            21600,
        ),
    ]


def test_running_twice_leaves_exactly_the_same_rows():
    run()
    first = rows()
    schedules = (list(IntervalSchedule.objects.values()), list(CrontabSchedule.objects.values()))

    assert run() == (
        "unchanged  piper:beat-heartbeat\n"
        "unchanged  piper:purge-idempotency-records\n"
        "unchanged  piper:verify-ledger-chains\n"
        "unchanged  piper:intentions-engine\n"
        "unchanged  piper:intentions-rehearse\n"
        "unchanged  piper:intentions-webhook-retries\n"
        "unchanged  piper:skills-review-validated\n"
        "unchanged  piper:skills-validation-backlog\n"
        "unchanged  piper:episodes-embed-backlog\n"
        "unchanged  piper:facts-texts-backlog\n"
        "unchanged  piper:forgetting-retention-sweep\n"
        "unchanged  piper:episodes-agent-graphs\n"
        "unchanged  piper:consolidation-due\n"
    )
    assert rows() == first
    assert (
        list(IntervalSchedule.objects.values()),
        list(CrontabSchedule.objects.values()),
    ) == schedules
    assert len(schedules[0]) == 6 and len(schedules[1]) == 5


def test_restores_a_changed_task_and_disables_only_its_own_stale_tasks():
    run()
    every_minute = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.filter(name="piper:beat-heartbeat").update(
        interval=every_minute, enabled=False
    )
    PeriodicTask.objects.create(name="piper:retired-job", task="piper.ping", interval=every_minute)
    PeriodicTask.objects.create(name="operator-job", task="piper.ping", interval=every_minute)

    assert run() == (
        "updated    piper:beat-heartbeat\n"
        "unchanged  piper:purge-idempotency-records\n"
        "unchanged  piper:verify-ledger-chains\n"
        "unchanged  piper:intentions-engine\n"
        "unchanged  piper:intentions-rehearse\n"
        "unchanged  piper:intentions-webhook-retries\n"
        "unchanged  piper:skills-review-validated\n"
        "unchanged  piper:skills-validation-backlog\n"
        "unchanged  piper:episodes-embed-backlog\n"
        "unchanged  piper:facts-texts-backlog\n"
        "unchanged  piper:forgetting-retention-sweep\n"
        "unchanged  piper:episodes-agent-graphs\n"
        "unchanged  piper:consolidation-due\n"
        "disabled   piper:retired-job\n"
    )
    assert [(name, enabled) for name, _, _, enabled, _ in summary()] == [
        ("operator-job", True),
        ("piper:beat-heartbeat", True),
        ("piper:consolidation-due", True),
        ("piper:episodes-agent-graphs", True),
        ("piper:episodes-embed-backlog", True),
        ("piper:facts-texts-backlog", True),
        ("piper:forgetting-retention-sweep", True),
        ("piper:intentions-engine", True),
        ("piper:intentions-rehearse", True),
        ("piper:intentions-webhook-retries", True),
        ("piper:purge-idempotency-records", True),
        ("piper:retired-job", False),
        ("piper:skills-review-validated", True),
        ("piper:skills-validation-backlog", True),
        ("piper:verify-ledger-chains", True),
    ]
    assert PeriodicTask.objects.get(name="piper:beat-heartbeat").interval.every == 30


def test_every_scheduled_task_is_registered_with_celery():
    app.loader.import_default_modules()

    assert [spec.task for spec in PERIODIC_TASKS if spec.task not in app.tasks] == []
