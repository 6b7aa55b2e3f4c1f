"""One owner of a write's transaction and of its retries: the outermost `run_write`.

A write PostgreSQL cancelled to break a deadlock (or a serialization failure),
or one that lost a race to a concurrent writer's row (`RaceLost`), was rolled
back, and is run again from the top: it then sees the other writer's work.
The outermost `run_write` of a call stack owns that: the API request
(`piper.api.idempotency`), or a service called by a task, a command or a test.
It runs the write in `transaction.atomic()` — a savepoint when a caller
already holds a transaction, which is as sound to roll back and run again.
A `run_write` inside it is a plain savepoint with no retries of its own: its
error goes up to the owner, which runs the whole again. The services' own
`transaction.atomic` blocks are savepoints under the owner too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

from django.db import OperationalError, transaction
from psycopg import errors as pg_errors

from piper.errors import Conflict

T = TypeVar("T")

# Runs of a write in all before its error surfaces. Lock orders are kept
# consistent, so a deadlock is the rare cycle they do not rule out (docs:
# intentions' dependency cascades); a lost race is won on the next run.
WRITE_ATTEMPTS = 3
_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
# Not connection.in_atomic_block: a caller's plain atomic (a test, a task)
# owns no retries, so a run_write inside it must still be the owner.
_owner_active: ContextVar[bool] = ContextVar("piper_write_owner_active", default=False)


class RaceLost(Exception):
    """A concurrent writer's row got in first: run the write again, it will see that row.

    Raised inside a `run_write` by the app that knows which constraints such a
    race meets, with the message the client gets if every attempt loses (a 409
    `concurrent_write`). Not a PiperError: code between the raiser and the
    owner that handles domain refusals (a batch that skips refused items) must
    let it through to the owner, as it does a deadlock."""


def run_write(write: Callable[[], T]) -> T:
    """`write()` in one transaction (a savepoint inside another), its result returned.

    As the outermost run_write, runs it again after a deadlock, a serialization
    failure or a `RaceLost`, up to WRITE_ATTEMPTS runs in all; then the
    OperationalError surfaces as it is, a lost race as Conflict
    `concurrent_write`. Nested, leaves the retry to the outermost."""
    if _owner_active.get():
        with transaction.atomic():
            return write()
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                # Reset before the block commits: on_commit callbacks (a task
                # run eagerly) are writes of their own, with their own owner.
                token = _owner_active.set(True)
                try:
                    return write()
                finally:
                    _owner_active.reset(token)
        except RaceLost as exc:
            if attempt == WRITE_ATTEMPTS:
                raise Conflict(str(exc), code="concurrent_write") from exc
        except OperationalError as exc:
            if attempt == WRITE_ATTEMPTS or not isinstance(exc.__cause__, _RETRYABLE):
                raise
        time.sleep(random.uniform(0.005, 0.02) * attempt)  # let the other side finish
    raise AssertionError("unreachable")
