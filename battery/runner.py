"""Running one item: its context, its clock, and how failures are classified."""

from __future__ import annotations

import dataclasses
import functools
import random
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection, transaction

from piper.tenancy.models import Agent

from .registry import Generator, Item, ItemFailure, ItemOutcome, ItemSpec, Suite
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


@contextmanager
def _contained() -> Iterator[list[bool]]:
    """Keep what the block wrote unless it marks itself failed (`failed[0] = True`).

    Inside an enclosing transaction (a test), a database error in an item
    would abort it for everything after; a savepoint contains the damage.
    In autocommit (the command) each statement stands alone, and a savepoint
    would hide the item's writes from a server driven over HTTP.
    """
    failed = [False]
    savepoint = transaction.savepoint() if connection.in_atomic_block else None
    try:
        yield failed
    finally:
        if savepoint is not None:
            if failed[0]:
                transaction.savepoint_rollback(savepoint)
            else:
                transaction.savepoint_commit(savepoint)


def item_execute(*, suite_code: str, item: Item, context: ItemContext) -> ItemOutcome:
    """Run one item and classify the result; never raises for the item's own errors."""
    started = time.perf_counter()
    metrics: dict = {}
    code, detail = "", ""
    with _contained() as failed:
        try:
            metrics = dict(item.run(context) or {})
        except ItemFailure as failure:
            code, detail, metrics = failure.code, failure.detail, failure.metrics
        except Exception as exc:
            code, detail = item.default_code, f"unexpected error: {_traceback_tail(exc)}"
        failed[0] = bool(code)
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


@dataclass(frozen=True)
class _SetupFailed:
    code: str
    detail: str


def _prepare(generator: Generator, context: ItemContext, specs: list[ItemSpec]):
    """The generator's world, or _SetupFailed when writing it broke."""
    with _contained() as failed:
        try:
            return generator.prepare(context, specs)
        except ItemFailure as failure:
            failed[0] = True
            return _SetupFailed(failure.code, f"world setup failed: {failure.detail}")
        except Exception as exc:
            failed[0] = True
            return _SetupFailed(generator.setup_code, f"world setup failed: {_traceback_tail(exc)}")


def _check(check, context: ItemContext, *, spec: ItemSpec, state):
    return check(context, spec, state)


def suite_execute(
    *,
    suite: Suite,
    seed: int,
    run_id: uuid.UUID,
    client: ApiClient,
    new_client: Callable[[], ApiClient],
) -> Iterator[ItemOutcome]:
    """Run a suite's declared items in order, then each generator's: draw its
    items, prepare their world once, check each. Yields every outcome as it is
    known; a generated item's outcome carries its spec's metrics."""

    def context(key: str) -> ItemContext:
        return ItemContext(
            run_id=run_id,
            seed=seed,
            suite=suite.code,
            item=key,
            client=client,
            new_client=new_client,
        )

    for item in suite.items:
        yield item_execute(suite_code=suite.code, item=item, context=context(item.key))
    for generator in suite.generators:
        specs = suite.specs(generator, seed=seed)
        state = _prepare(generator, context(generator.key), specs)
        for spec in specs:
            if isinstance(state, _SetupFailed):
                outcome = ItemOutcome(
                    suite=suite.code,
                    item=spec.key,
                    title=spec.title,
                    passed=False,
                    failure_code=str(state.code),
                    detail=state.detail,
                    metrics={},
                    duration_ms=0.0,
                )
            else:
                item = Item(
                    key=spec.key,
                    title=spec.title,
                    run=functools.partial(_check, generator.check, spec=spec, state=state),
                    default_code=spec.default_code,
                )
                outcome = item_execute(suite_code=suite.code, item=item, context=context(spec.key))
            yield dataclasses.replace(
                outcome, metrics={**spec.metrics, **outcome.metrics}, generator=generator.key
            )
