"""Fake suites and a context builder for the battery's own tests."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from battery.models import BatteryRun
from battery.registry import ItemFailure, ItemSpec, MetricGate, Suite, SuiteSummary
from battery.runner import ItemContext
from battery.services import throwaway_client_create
from battery.taxonomy import FailureCode
from battery.transport import ApiResponse, Transport


def fake_suite(
    code: str,
    *,
    weight: float = 0,
    gate: float = 1.0,
    results: Sequence[bool | FailureCode] = (True,),
    summary: SuiteSummary | None = None,
) -> Suite:
    """A suite whose items pass (True) or fail with the given code, touching nothing."""
    suite = Suite(
        code=code, name=f"Fake {code}", description="made by a test", weight=weight, gate=gate
    )
    if summary is not None:
        suite.summarize = lambda outcomes: summary
    for index, result in enumerate(results):

        def item(ctx, result=result, index=index):
            if result is True:
                return {"index": index}
            raise ItemFailure(result, f"item {index} failed on purpose")

        suite.item(f"item_{index}", f"Fake item {index}", default_code=FailureCode.W0)(item)
    return suite


def fake_generated_suite(
    code: str,
    *,
    count: int = 3,
    weight: float = 0,
    gate: float = 1.0,
    failing: Sequence[int] = (),
    metric_gates: Sequence[MetricGate] = (),
    summary: SuiteSummary | None = None,
    prepare: Callable[[Any, Any], Any] | None = None,
) -> Suite:
    """A suite with one generator that draws `count` items from the seed; the
    items numbered in `failing` fail with R1. Touches nothing unless `prepare` does."""
    suite = Suite(
        code=code,
        name=f"Fake {code}",
        description="made by a test",
        weight=weight,
        gate=gate,
        metric_gates=tuple(metric_gates),
    )
    if summary is not None:
        suite.summarize = lambda outcomes: summary
    suite.prepared = []  # what each prepare call was given, for the tests to see

    def generate(rng):
        return [
            ItemSpec(
                key=f"gen_{i}",
                title=f"Generated item {i}",
                default_code=FailureCode.W0,
                data={"i": i, "draw": rng.randrange(10**6)},
                metrics={"planned": 1},
            )
            for i in range(count)
        ]

    def default_prepare(ctx, specs):
        suite.prepared.append([spec.key for spec in specs])
        return {"prepared_by": ctx.item}

    def check(ctx, spec, state):
        if spec.data["i"] in failing:
            raise ItemFailure(FailureCode.R1, f"generated item {spec.data['i']} failed on purpose")
        return {"draw": spec.data["draw"], "state": state["prepared_by"]}

    suite.generated("gen", generate=generate, prepare=prepare or default_prepare, check=check)
    return suite


class RewritingTransport:
    """Wraps a real transport and rewrites what the service answered: a broken
    service, as the battery would see it."""

    def __init__(
        self,
        inner: Transport,
        rewrite: Callable[[str, str, Any, ApiResponse], ApiResponse],
        *,
        rewrite_request: Callable[[str, str, Any], Any] | None = None,
    ):
        self.inner, self.rewrite, self.rewrite_request = inner, rewrite, rewrite_request
        self.target = inner.target

    def request(self, method, path, *, body=None, headers=None) -> ApiResponse:
        if self.rewrite_request is not None:
            body = self.rewrite_request(method, path, body)
        return self.rewrite(
            method, path, body, self.inner.request(method, path, body=body, headers=headers)
        )

    def close(self) -> None:
        self.inner.close()


EVENT_PATH = re.compile(r"^/api/v1/events/[0-9a-f-]{36}$")


def replace(response: ApiResponse, **changes: Any) -> ApiResponse:
    return dataclasses.replace(response, **changes)


def item_context(
    *, item: str, transport: Transport, seed: int = 3, suite: str = "L"
) -> ItemContext:
    """A context like the runner's: a stored run, a throwaway primary agent, more on demand."""
    run = BatteryRun.objects.create(seed=seed, suites=[suite], target=transport.target)
    clients = [throwaway_client_create(run=run, transport=transport, number=1)]

    def new_client():
        clients.append(
            throwaway_client_create(run=run, transport=transport, number=len(clients) + 1)
        )
        return clients[-1]

    return ItemContext(
        run_id=run.pk, seed=seed, suite=suite, item=item, client=clients[0], new_client=new_client
    )


class Faulty:
    """The real service with one fault, as the battery would see it: subclasses
    rewrite the requests or answers they care about."""

    def __init__(self, inner):
        self.inner, self.target = inner, inner.target

    def request(self, method, path, *, body=None, headers=None):
        return self.inner.request(method, path, body=body, headers=headers)

    def close(self):
        self.inner.close()


def run_suite_small(
    transport, *, code: str, module, draw, none: dict, seed: int, counts: dict, successors: bool
) -> tuple[list, list]:
    """One suite's generated items for `counts` (the other kinds at `none`),
    through suite_execute against `transport`. With `successors`, items may
    ask for further clients of the same run (handovers)."""
    from battery.runner import suite_execute

    suite = Suite(code=f"Z{code}", name=f"Suite {code}, small", description="test", weight=0)
    suite.generated(
        module.__name__.rsplit(".", 1)[-1],
        generate=lambda rng: draw.generate(rng, {**none, **counts}),
        prepare=module.prepare,
        check=module.check,
    )
    run = BatteryRun.objects.create(seed=seed, suites=[f"Z{code}"], target=transport.target)
    clients = []

    def new_client():
        clients.append(
            throwaway_client_create(run=run, transport=transport, number=len(clients) + 1)
        )
        return clients[-1]

    primary = new_client()
    specs = suite.specs(suite.generators[0], seed=seed)
    outcomes = list(
        suite_execute(
            suite=suite,
            seed=seed,
            run_id=run.pk,
            client=primary,
            new_client=new_client if successors else None,
        )
    )
    return specs, outcomes


def live_use(name: str = "live-agent", *, done: int = 1, left_overdue: int = 0) -> None:
    """A real (not throwaway) agent at work through the API: a thread with
    `done + left_overdue` follow-ups, handed over and resumed by its
    successor, which completes `done` of them and leaves the others due
    (they count as not executed once past PIPER_LIVE_GRACE_SECONDS)."""
    from conftest import make_client

    client = make_client(name)

    def post(path: str, body: dict) -> dict:
        response = client.post(path, body, format="json")
        assert response.status_code in (200, 201), response.content
        return response.json()

    thread = post("/api/v1/threads", {"key": "export-repair", "session_id": "s1"})["id"]
    follow_ups = [
        post(
            "/api/v1/intentions",
            {"description": f"follow-up {n}", "trigger_type": "manual", "thread": thread},
        )["id"]
        for n in range(done + left_overdue)
    ]
    post(f"/api/v1/threads/{thread}/handover", {"to_session": "s2"})
    post(f"/api/v1/threads/{thread}/resume", {"session_id": "s2"})
    post(f"/api/v1/threads/{thread}/acknowledge", {"session_id": "s2"})
    for intention in follow_ups[:done]:
        post(f"/api/v1/intentions/{intention}/complete", {})
    for intention in follow_ups[done:]:
        post(f"/api/v1/intentions/{intention}/fire", {})
