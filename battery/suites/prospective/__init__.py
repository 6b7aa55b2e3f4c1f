"""Suite E — prospective memory (DESIGN.md §7, §9), driven through the
intentions API as an agent would, on the agent's simulated clock.

A seeded draw (draw.py) makes 300 items of seven kinds: E1 time triggers
(on time, not premature, not missed), E2 event triggers among distractors,
E3 state triggers over facts, E4 dependency order (a dependent of a cancelled
intention cancelled with it, not left blocked), E5 intentions surviving
a thread's handover, E6 cancellation, E7 completion deactivation (no
zombies; recurring ones move on). One throwaway agent of its own holds the
world of all of them. `prepare` walks the timeline: at each step it sets the
agent's clock (PUT /clock), performs that step's actions of every item,
runs the engine (POST /intentions/tick) and reads what is due; at the end it
reads every firing from the ledger. Each item's `check` grades its checks
against that (judge.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ...judging import Tally, Verdict, miss
from ...registry import ItemFailure, ItemSpec, MetricGate, Suite, register
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from ...transport import ApiResponse
from ..working_state import thread_write
from ..working_state.api import batch_results, ok
from . import api as intentions_api
from .api import IntentionsApi
from .draw import LAST, PHASES, STEPS, generate, iso, phase_of
from .judge import (
    judge_after,
    judge_inherited,
    judge_listed,
    judge_once,
    judge_order,
    judge_pending,
    judge_quiet,
    judge_recall,
    judge_settled,
    summarize,
)

RECALL_GATE = 0.99
FALSE_FIRE_GATE = 0.005
MAX_BATCH = 1000

suite = register(
    Suite(
        code="E",
        name="Prospective memory",
        description=(
            "Intentions that fire at their cue exactly once: time, event, state and dependency "
            "triggers among distractors, surviving a handover, silenced by cancellation and "
            "completion: 300 items drawn from the seed, on a simulated clock."
        ),
        weight=20,
        gate=RECALL_GATE,
        summarize=summarize,
        metric_gates=(
            MetricGate("trigger_recall", minimum=RECALL_GATE),
            MetricGate("false_fire_rate", maximum=FALSE_FIRE_GATE),
            MetricGate("cancelled_intention_suppression", minimum=1.0),
            MetricGate("zombie_rate", maximum=0.0),
            MetricGate("handover_retention", minimum=1.0),
        ),
    )
)


# ------------------------------------------------------------------------ the world


@dataclass
class World:
    api: IntentionsApi
    ids: dict[tuple[str, str], str] = field(default_factory=dict)  # (item, ref) -> intention id
    threads: dict[tuple[str, str], str] = field(default_factory=dict)  # (item, ref) -> thread id
    errors: dict[str, tuple[int, Verdict]] = field(default_factory=dict)  # item -> (step, why)
    due: dict[int, dict[str, int] | Verdict] = field(default_factory=dict)
    tick_errors: dict[int, str] = field(default_factory=dict)
    resumed: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    firings: dict[str, list[tuple[int, datetime | None]]] | Verdict = field(default_factory=dict)

    def fail(self, key: str, step: int, verdict: Verdict) -> None:
        self.errors.setdefault(key, (step, verdict))


def _refused(what: str, step: int, response: ApiResponse, code: F = F.W0) -> Verdict:
    return miss(code, f"{what} at step {step} refused: {response.describe()}")


def _create(world: World, step: int, key: str, action: dict[str, Any]) -> None:
    body = dict(action["body"])
    if "thread" in action:
        body["thread"] = world.threads[(key, action["thread"])]
    if "source_session" in action:
        body["source_session"] = action["source_session"]
    if action.get("deps"):
        body["dependencies"] = [world.ids[(key, ref)] for ref in action["deps"]]
    response = world.api.create(body)
    if response.status == 201 and isinstance(response.body, dict) and response.body.get("id"):
        world.ids[(key, action["ref"])] = str(response.body["id"])
    else:
        world.fail(key, step, _refused(f"POST /intentions {action['ref']!r}", step, response))


def _thread(world: World, step: int, key: str, action: dict[str, Any]) -> None:
    api, op = world.api, action["op"]
    if op == "thread":
        written = thread_write(api, action["key"], action["session"], [action["state"]])
        if isinstance(written, Verdict):
            world.fail(key, step, written)
        else:
            world.threads[(key, action["ref"])] = written[0]
        return
    thread_id = world.threads[(key, action["ref"])]
    if op == "handover":
        response = api.handover(
            thread_id, to_session=action["to"], from_session=action["from"], note=action["note"]
        )
    elif op == "resume":
        response = api.resume(thread_id, action["session"])
        if response.status == 200 and isinstance(response.body, dict):
            world.resumed[(key, action["ref"])] = response.body
            return
        world.fail(key, step, _refused("the successor's resume", step, response, F.R2))
        return
    else:
        response = api.acknowledge(thread_id, action["session"])
    if not ok(response):
        world.fail(key, step, _refused(f"POST …/{op}", step, response))


def _act(world: World, step: int, key: str, action: dict[str, Any]) -> None:
    op = action["op"]
    if op == "create":
        _create(world, step, key, action)
    elif op in ("thread", "handover", "resume", "acknowledge"):
        _thread(world, step, key, action)
    else:
        response = world.api.act(world.ids[(key, action["ref"])], op)
        if response.status != 200:
            world.fail(
                key,
                step,
                _refused(f"POST /intentions/{{id}}/{op} {action['ref']!r}", step, response),
            )


def _send(
    world: World,
    step: int,
    todo: list[tuple[str, dict[str, Any]]],
    *,
    what: str,
    many,
    one,
    name: str,
) -> None:
    """Send a phase's events or facts in batches; a refused batch is retried
    one by one, so a refused write fails only its own item."""
    for begin in range(0, len(todo), MAX_BATCH):
        chunk = todo[begin : begin + MAX_BATCH]
        response = many([payload for _, payload in chunk])
        if response.status in (200, 201) and len(batch_results(response.body, name)) == len(chunk):
            continue
        for key, payload in chunk:
            single = one(payload)
            if single.status not in (200, 201):
                world.fail(key, step, _refused(f"POST /{what}", step, single))


def _read_due(world: World, step: int) -> None:
    seen: dict[str, int] = {}
    for page in world.api.due():
        if page.status != 200:
            world.due[step] = miss(F.R2, f"GET /intentions/due at step {step}: {page.describe()}")
            return
        for intention in intentions_api.results(page.body):
            entry = intentions_api.due_entry(intention)
            if entry is not None:
                seen[entry[0]] = entry[1]
    world.due[step] = seen


def _read_firings(world: World) -> None:
    firings: dict[str, list[tuple[int, datetime | None]]] = {}
    for page in world.api.fired_events():
        if page.status != 200:
            world.firings = miss(F.R2, f"GET /events?event_type=intention.fired: {page.describe()}")
            return
        for event in intentions_api.results(page.body):
            firing = intentions_api.firing_of(event)
            if firing is not None:
                firings.setdefault(firing[0], []).append(firing[1:])
    world.firings = firings


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    """Walk the timeline: per step, the clock, every item's actions phase by
    phase, the engine's tick, and what is due; then every firing in the ledger."""
    client = ctx.new_client() if ctx.new_client is not None else ctx.client
    world = World(api=IntentionsApi(client))
    api = world.api
    by_step: dict[int, list[tuple[str, dict[str, Any]]]] = {step: [] for step in range(LAST + 1)}
    for spec in specs:
        for action in spec.data["actions"]:
            by_step[action["step"]].append((spec.key, action))
    for step, moment in enumerate(STEPS):
        response = api.clock_set(iso(moment))
        if response.status != 200:
            raise ItemFailure(F.W0, f"PUT /clock {iso(moment)} refused: {response.describe()}")
        for phase in range(len(PHASES)):
            todo = [
                (key, action)
                for key, action in by_step[step]
                if phase_of(action) == phase and key not in world.errors
            ]
            if PHASES[phase] in ("early", "event"):
                events = [(key, action["event"]) for key, action in todo]
                _send(
                    world,
                    step,
                    events,
                    what="events",
                    many=api.events_append,
                    one=api.event_append,
                    name="events",
                )
            elif PHASES[phase] == "fact":
                claims = [(key, action["claim"]) for key, action in todo]
                _send(
                    world,
                    step,
                    claims,
                    what="facts",
                    many=api.facts_assert,
                    one=api.fact_assert,
                    name="facts",
                )
            else:
                for key, action in todo:
                    if key not in world.errors:
                        _act(world, step, key, action)
        tick = api.tick()
        if tick.status != 200:
            world.tick_errors[step] = tick.describe()
        _read_due(world, step)
    _read_firings(world)
    return world


# ---------------------------------------------------------------------- the checks


def _label(check: dict[str, Any]) -> str:
    q = check["q"]
    where = f" at step {check['step']}" if "step" in check else ""
    if q == "recall":
        return f"{check['ref']} fires (occurrence {check['occurrence']}){where}"
    if q == "quiet":
        return f"{check['ref']} stays quiet{where}: {check['why']}"
    if q == "suppressed":
        return f"{check['ref']} cancelled{where}"
    if q == "zombie":
        return f"{check['ref']} completed{where}"
    if q == "once":
        return f"{check['ref']} fired once per occurrence"
    if q == "settled":
        return f"{check['ref']} cancelled with {check['dependency']}, not left blocked"
    if q == "order":
        return "resume lists due and overdue first"
    return f"{check['ref']} {q}"


def _judge(world: World, key: str, check: dict[str, Any]) -> Verdict:
    q = check["q"]
    if q == "order":
        ids = [[world.ids[(key, ref)] for ref in group] for group in check["groups"]]
        return judge_order(ids, world.resumed[(key, check["thread"])])
    intention_id = world.ids[(key, check["ref"])]
    if q == "recall":
        return judge_recall(
            intention_id,
            check["step"],
            check["occurrence"],
            world.due,
            tick_error=world.tick_errors.get(check["step"], ""),
        )
    if q == "quiet":
        return judge_quiet(intention_id, check["step"], check["why"], world.due)
    if q in ("suppressed", "zombie"):
        what = "cancelled" if q == "suppressed" else "completed"
        return judge_after(intention_id, check["step"], world.due, world.firings, what=what)
    if q == "once":
        return judge_once(intention_id, check["occurrences"], world.firings)
    if q == "settled":
        answer = world.api.intention(intention_id)
        dependency_id = world.ids[(key, check["dependency"])]
        return judge_settled(intention_id, dependency_id, answer.body, answer.status, world.firings)
    if q in ("listed", "unlisted"):
        package = world.resumed[(key, check["thread"])]
        return judge_listed(intention_id, package, listed=q == "listed")
    if q == "pending":
        return judge_pending(intention_id, world.resumed[(key, check["thread"])])
    if q == "inherited":
        answer = world.api.intention(intention_id)
        return judge_inherited(answer.body, answer.status, check["session"])
    raise ValueError(f"unknown check {q!r}")


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    """Grade every check the item planned. When part of its world could not
    be written, the checks before that step are still graded; the others
    fail with the reason."""
    tally = Tally(planned=dict(spec.metrics["planned"]))
    broken = world.errors.get(spec.key)
    for item_check in spec.data["checks"]:
        step = item_check.get("step", LAST + 1)
        if broken is not None and step >= broken[0]:
            verdict = broken[1]
        else:
            try:
                verdict = _judge(world, spec.key, item_check)
            except Exception as exc:
                verdict = miss(spec.default_code, f"the answer could not be read: {exc!r}")
        tally.record(item_check["metric"], _label(item_check), verdict)
    return tally.outcome()


suite.generated("prospective", generate=generate, prepare=prepare, check=check)
