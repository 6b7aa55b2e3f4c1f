"""api.purge_idempotency_records and the service behind it."""

from datetime import timedelta

import pytest
from django.utils import timezone

from piper.api.models import IdempotencyRecord
from piper.api.services import idempotency_records_purge
from piper.api.tasks import purge_idempotency_records
from piper.tenancy.services import agent_create

pytestmark = pytest.mark.django_db

AGES_HOURS = {"fresh": 0, "23h": 23, "25h": 25, "48h": 48, "30d": 720}


@pytest.fixture
def records():
    agent = agent_create(name="idem")
    now = timezone.now()
    for key, hours in AGES_HOURS.items():
        IdempotencyRecord.objects.create(
            agent=agent,
            key=key,
            request_fingerprint="0" * 64,
            response_status=201,
            response_body={},
            created_at=now - timedelta(hours=hours, minutes=1 if hours else 0),
        )
    return agent


def remaining_keys() -> list[str]:
    return sorted(IdempotencyRecord.objects.values_list("key", flat=True))


def test_purge_deletes_only_records_older_than_the_ttl(records, settings):
    settings.PIPER_IDEMPOTENCY_TTL_HOURS = 24

    assert idempotency_records_purge() == 3
    assert remaining_keys() == ["23h", "fresh"]


def test_purge_is_idempotent(records):
    assert idempotency_records_purge() == 3
    assert idempotency_records_purge() == 0
    assert remaining_keys() == ["23h", "fresh"]


def test_purge_in_chunks_deletes_every_old_record(records):
    assert idempotency_records_purge(chunk_size=2) == 3
    assert remaining_keys() == ["23h", "fresh"]


def test_purge_follows_the_ttl_setting(records, settings):
    settings.PIPER_IDEMPOTENCY_TTL_HOURS = 1

    assert idempotency_records_purge() == 4
    assert remaining_keys() == ["fresh"]


def test_task_calls_the_service(records):
    assert purge_idempotency_records.apply().get() == 3
    assert remaining_keys() == ["23h", "fresh"]
