"""Running one item: its context, its clock, and how failures are classified."""

from __future__ import annotations

import random
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import connection, transaction

from piper.tenancy.models import Agent

from .registry import Item, ItemFailure, ItemOutcome
from .transport import ApiClient

DETAIL_FRAMES = 4


@dataclass
class ItemContext:
    """What an item gets: a client bound to the run's throwaway agent (scopes read,
    write, admin), a way to make another agent, and randomness seeded by the run."""

    run_id: uuid.UUID
    seed: int
    suite: str
    item: str
    client: ApiClient
    new_client: Callable[[], ApiClient]
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        # Seeded per item, so adding an item does not change what the others draw.
        self.rng = random.Random(f"{self.seed}:{self.suite}:{self.item}")

    @property
    def agent(self) -> Agent:
        return self.client.agent


def _traceback_tail(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc, limit=-DETAIL_FRAMES)).strip()


def item_execute(*, suite_code: str, item: Item, context: ItemContext) -> ItemOutcome:
    """Run one item and classify the result; never raises for the item's own errors."""
    started = time.perf_counter()
    metrics: dict = {}
    code, detail = "", ""
    # Inside an enclosing transaction (a test), a database error in the item
    # would abort it for everything after; a savepoint contains the damage.
    # In autocommit (the command) each statement stands alone, and a savepoint
    # would hide the item's writes from a server driven over HTTP.
    savepoint = transaction.savepoint() if connection.in_atomic_block else None
    try:
        metrics = dict(item.run(context) or {})
    except ItemFailure as failure:
        code, detail, metrics = failure.code, failure.detail, failure.metrics
    except Exception as exc:
        code, detail = item.default_code, f"unexpected error: {_traceback_tail(exc)}"
    if savepoint is not None:
        if code:
            transaction.savepoint_rollback(savepoint)
        else:
            transaction.savepoint_commit(savepoint)
    return ItemOutcome(
        suite=suite_code,
        item=item.key,
        title=item.title,
        passed=not code,
        failure_code=str(code),
        detail=detail,
        metrics=metrics,
        duration_ms=round((time.perf_counter() - started) * 1000, 3),
    )
