"""The Idempotency-Key header: a retried write returns the first answer and writes nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import time
from collections.abc import Callable

from django.conf import settings
from django.db import OperationalError, connection, transaction
from psycopg import errors as pg_errors
from rest_framework.request import Request
from rest_framework.response import Response

from piper import appends
from piper.errors import Gone, InvalidInput, Unprocessable

from .models import IdempotencyRecord
from .rendering import JSONRenderer

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
# A write PostgreSQL cancelled to break a deadlock (or a serialization failure)
# was rolled back whole: it is run again, up to this many times in all, before
# the error reaches the client. Lock orders are kept consistent, so this is for
# the rare cycle they do not rule out (docs: intentions' dependency cascades).
WRITE_ATTEMPTS = 3
_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)


def atomic_retrying(write: Callable[[], Response]) -> Response:
    """`write()` in one transaction, run again if PostgreSQL broke a deadlock with it.

    Inside a caller's transaction the block is a savepoint. Rolling back to it
    keeps the outer transaction usable, so the retry is sound there too."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                return write()
        except OperationalError as exc:
            if attempt == WRITE_ATTEMPTS or not isinstance(exc.__cause__, _RETRYABLE):
                raise
            time.sleep(random.uniform(0.005, 0.02) * attempt)  # let the other side finish
    raise AssertionError("unreachable")


def _fingerprint(request: Request) -> str:
    # Not canonical_json: a body the write will refuse (NaN, infinity, lone
    # surrogates) still needs a fingerprint, so that the refusal is a 400, not a 500.
    body = json.dumps(
        request.data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
    )
    # Keyed: a plain hash of a short body (an erased one included) could be
    # confirmed by hashing the likely texts.
    return hmac.new(
        settings.SECRET_KEY.encode(),
        f"{request.method} {request.path}\n{body}".encode(),
        hashlib.sha256,
    ).hexdigest()


def idempotent_write(
    request: Request, write: Callable[[], Response], *, secret_fields: tuple[str, ...] = ()
) -> Response:
    """Run `write` in one transaction; with an Idempotency-Key, at most once per key.

    The key is claimed with INSERT … ON CONFLICT DO NOTHING inside the write's
    transaction: a concurrent retry waits for the first to commit, then replays
    its answer; if the first rolls back, the retry does the write itself.
    `secret_fields` of the answer are not stored, so a replay shows them as null
    (a new API key's secret is shown once and kept nowhere).
    """
    key = request.headers.get(HEADER)
    if key is None:
        return atomic_retrying(write)
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidInput(
            f"{HEADER} must be 1-{MAX_KEY_LENGTH} printable characters",
            code="invalid_idempotency_key",
        )
    agent = request.user
    fingerprint = _fingerprint(request)

    def claimed_write() -> Response:
        record, created = _claim(agent_id=agent.pk, key=key, fingerprint=fingerprint)
        if not created:
            if record.request_fingerprint != fingerprint:
                raise Unprocessable(
                    f"{HEADER} {key!r} was already used with a different request; "
                    "use a new key for a new request",
                    code="idempotency_key_reused",
                )
            if record.erased_at is not None:
                raise Gone(
                    f"the write answered under {HEADER} {key!r} was erased; it is not "
                    "replayed and nothing was written. To write it again, use a new key",
                    code="idempotent_write_erased",
                )
            response = Response(record.response_body, status=record.response_status)
            response["Idempotent-Replayed"] = "true"
            return response
        with appends.collecting() as event_ids:
            response = write()
        body = (
            json.loads(JSONRenderer().render(response.data)) if response.data is not None else None
        )
        if isinstance(body, dict):
            body.update({name: None for name in secret_fields if name in body})
        IdempotencyRecord.objects.filter(pk=record.pk).update(
            response_status=response.status_code, response_body=body, event_ids=event_ids
        )
        return response

    return atomic_retrying(claimed_write)


def _claim(*, agent_id, key: str, fingerprint: str) -> tuple[IdempotencyRecord, bool]:
    table = IdempotencyRecord._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (agent_id, key, request_fingerprint, event_ids, created_at) "
            "VALUES (%s, %s, %s, '{}', now()) ON CONFLICT (agent_id, key) DO NOTHING RETURNING id",
            [agent_id, key, fingerprint],
        )
        inserted = cursor.fetchone()
    if inserted:
        return IdempotencyRecord(pk=inserted[0], agent_id=agent_id, key=key), True
    return IdempotencyRecord.objects.get(agent_id=agent_id, key=key), False
