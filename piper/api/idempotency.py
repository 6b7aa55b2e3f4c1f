"""The Idempotency-Key header: a retried write returns the first answer and writes nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable

from django.conf import settings
from django.db import connection
from rest_framework.request import Request
from rest_framework.response import Response

from piper import appends
from piper.errors import Gone, InvalidInput, Unprocessable
from piper.transactions import run_write

from .models import IdempotencyRecord
from .rendering import JSONRenderer

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255


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

    The request owns the transaction and its retries (piper.transactions.run_write):
    a deadlock or a lost race runs the whole write again, key claim included.

    The key is claimed with INSERT … ON CONFLICT DO NOTHING inside the write's
    transaction: a concurrent retry waits for the first to commit, then replays
    its answer; if the first rolls back, the retry does the write itself.
    `secret_fields` of the answer are not stored, so a replay shows them as null
    (a new API key's secret is shown once and kept nowhere).
    """
    key = request.headers.get(HEADER)
    if key is None:
        return run_write(write)
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

    return run_write(claimed_write)


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
