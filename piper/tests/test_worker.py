"""A real Celery worker process, through real Redis, on the test database."""

import time

import pytest
from django.db import connection, transaction

from ledger.selectors import PAYLOAD_ALTERED
from ledger.services import event_append
from ledger.tasks import verify_chains
from piper.tasks import ping
from piper.tenancy.services import agent_create, agent_deactivate

pytestmark = pytest.mark.django_db(transaction=True)


def test_ping_round_trips_through_redis_to_the_test_database(celery_worker_process):
    result = ping.delay("hello").get(timeout=30)

    assert result == {"echo": "hello", "database": connection.settings_dict["NAME"]}
    assert result["database"].startswith("test_")


def _tamper_payload(event) -> None:
    """Alter a stored event behind the append-only trigger's back (triggers off for one transaction)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "UPDATE ledger_event SET payload = %s WHERE id = %s", ['{"n": 999}', event.pk]
        )


def test_verify_chains_run_by_the_worker_reports_counts_and_the_broken_chain(celery_worker_process):
    intact = agent_create(name="intact")
    for n in range(3):
        event_append(agent=intact, event_type="note.added", payload={"n": n})
    broken = agent_create(name="broken")
    events = [
        event_append(agent=broken, event_type="note.added", payload={"n": n}) for n in range(3)
    ]
    _tamper_payload(events[1])
    retired = agent_create(name="retired")
    event_append(agent=retired, event_type="note.added", payload={})
    agent_deactivate(agent=retired)
    throwaway = agent_create(name="battery-run-1", is_throwaway=True)
    event_append(agent=throwaway, event_type="note.added", payload={})

    summary = verify_chains.delay().get(timeout=60)

    assert summary == {
        "agents_checked": 2,
        "events_checked": 5,
        "broken": [
            {
                "agent": "broken",
                "agent_id": str(broken.pk),
                "seq": 2,
                "event_id": str(events[1].pk),
                "reason": PAYLOAD_ALTERED[2],
            }
        ],
        "events_by_agent": {"broken": 2, "intact": 3},
        # The test settings keep no anchors file (ledger/tests/test_tasks.py does).
        "anchors": {"file": None, "checked": 0, "moved": 0, "error": None},
    }
    assert (
        f"ERROR ledger.tasks ledger chain broken: agent broken ({broken.pk}), first break at seq 2 "
        f"(event {events[1].pk}): {PAYLOAD_ALTERED[2]}"
    ) in celery_worker_process.log()


def test_healthz_reports_the_running_worker(celery_worker_process, client):
    # The heartbeat thread starts on worker_ready and stamps Redis right away;
    # allow it a moment in case the worker answered ping first.
    deadline = time.monotonic() + 15
    while True:
        body = client.get("/healthz").json()
        if (
            celery_worker_process.hostname in body["worker"]["workers"]
            or time.monotonic() > deadline
        ):
            break
        time.sleep(0.2)

    assert body["database"]["ok"] is True
    assert body["redis"]["ok"] is True
    assert body["worker"]["ok"] is True
    assert body["worker"]["ttl_seconds"] == 30
    assert 0 <= body["worker"]["workers"][celery_worker_process.hostname] < 30


def test_tasks_of_a_test_that_did_not_ask_for_the_worker_stay_queued(session_celery_worker):
    """The worker process is up, as after any worker test in this pytest process, but
    this test did not ask for ``celery_worker_process``: what its commits queue must
    not run behind its back (in CI it rendered facts and validated skill versions
    that later transactional tests did not expect)."""
    from django.conf import settings
    from django_redis import get_redis_connection

    sent = []
    with transaction.atomic():
        transaction.on_commit(lambda: sent.append(ping.delay("not for the worker")))
    [result] = sent
    # Sent after ours: the idle worker takes messages one at a time as they come, so by
    # the time it answers this it would have taken ours, had it been listening for it.
    worker = session_celery_worker
    barrier = ping.apply_async(args=["barrier"], queue=worker.queue).get(timeout=30)

    assert barrier["echo"] == "barrier"
    assert result.state == "PENDING"
    queued = get_redis_connection("default").lrange(settings.CELERY_TASK_DEFAULT_QUEUE, 0, -1)
    assert any(result.id.encode() in message for message in queued)
