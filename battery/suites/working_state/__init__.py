"""Suite A — working state (DESIGN.md §7, §9), driven through the threads API
as an agent would, on the agent's simulated clock.

A seeded draw (draw.py) makes 72 items of four kinds: A1 succession state
transfer (a full checkpoint handed to a new session, scored per field), A2
the checkpoint unchanged by unrelated noise written before the handover, A3
external dependencies that went stale during the handover reported for
re-check (and fresh ones not), A4 dependencies that watch a fact whose value
really changed during the handover, inside their freshness window, reported
for re-check (and the unchanged ones, or ones changed before their last
check, not). One throwaway agent of its own holds every
item's thread: `prepare` writes the checkpoints and noise at T0, hands every
thread over, moves the clock on to T1, then resumes and acknowledges each as
its successor; each item's `check` grades what came back (judge.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...judging import CORRECT, Tally, Verdict, miss, same, shown
from ...registry import ItemFailure, ItemSpec, MetricGate, Suite, register
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from ...transport import ApiResponse
from . import api as state_api
from .api import StateApi
from .draw import T0, T1, generate, iso
from .judge import judge_field, judge_recheck, summarize

EXACTNESS_GATE = 1.0
RETENTION_GATE = 1.0

suite = register(
    Suite(
        code="A",
        name="Working state",
        description=(
            "Checkpoints handed over to a successor session: every critical field back exactly, "
            "unmoved by neighbours' writes, and external dependencies that went stale or "
            "really changed listed for re-check: 72 items drawn from the seed, on a "
            "simulated clock."
        ),
        weight=15,
        gate=1.0,
        summarize=summarize,
        metric_gates=(
            MetricGate("working_state_exactness", minimum=EXACTNESS_GATE),
            MetricGate("handover_retention", minimum=RETENTION_GATE),
        ),
    )
)


# ------------------------------------------------------------------------ the world


@dataclass
class World:
    api: StateApi
    threads: dict[str, str] = field(default_factory=dict)  # item key -> thread id
    versions: dict[str, int] = field(default_factory=dict)  # item key -> version written last
    errors: dict[str, Verdict] = field(default_factory=dict)  # item key -> why it could not run
    resumed: dict[str, ApiResponse] = field(default_factory=dict)
    acknowledged: dict[str, ApiResponse] = field(default_factory=dict)
    thread_after: dict[str, ApiResponse] = field(default_factory=dict)
    state_after: dict[str, ApiResponse] = field(default_factory=dict)


def _refused(what: str, response: ApiResponse) -> Verdict:
    return miss(F.W0, f"{what} refused: {response.describe()}")


def clock_set(api: StateApi, moment) -> None:
    response = api.clock_set(iso(moment))
    if response.status != 200:
        raise ItemFailure(F.W0, f"PUT /clock {iso(moment)} refused: {response.describe()}")


def thread_write(
    api: StateApi, key: str, session: str, versions: Sequence[dict[str, Any]]
) -> tuple[str, int] | Verdict:
    """Make a thread and write its checkpoints in order: (thread id, last version)."""
    response = api.thread_create(key, session)
    if not state_api.ok(response) or not response.body.get("id"):
        return _refused(f"POST /threads {key!r}", response)
    thread_id = str(response.body["id"])
    version = 0
    for state in versions:
        response = api.state_write(thread_id, state, based_on=version, session_id=session)
        if not state_api.ok(response):
            return _refused(f"PUT /threads/{key}/state based on {version}", response)
        version = response.body.get("version", version + 1)
    return thread_id, version


def _noise(api: StateApi, noise: dict[str, Any]) -> Verdict | None:
    for neighbour in noise["threads"]:
        written = thread_write(api, neighbour["key"], neighbour["session"], neighbour["versions"])
        if isinstance(written, Verdict):
            return written
    response = api.events_append(noise["events"])
    if response.status != 201:
        return _refused(f"POST /events ({len(noise['events'])} notes)", response)
    response = api.facts_assert(noise["facts"])
    if response.status not in (200, 201):
        return _refused(f"POST /facts ({len(noise['facts'])} claims)", response)
    return None


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    """Every item's thread, checkpoints and noise at T0; every handover at T0;
    then at T1 every resume and acknowledgement, and what the thread holds after."""
    client = ctx.new_client() if ctx.new_client is not None else ctx.client
    world = World(api=StateApi(client))
    api = world.api
    clock_set(api, T0)
    for spec in specs:
        data = spec.data
        if data.get("world"):  # A4: what the watched dependencies are about
            response = api.facts_assert(data["world"]["before"])
            if response.status not in (200, 201):
                world.errors[spec.key] = _refused("POST /facts (the releases)", response)
                continue
        written = thread_write(api, data["thread"], data["session"], data["versions"])
        if isinstance(written, Verdict):
            world.errors[spec.key] = written
            continue
        world.threads[spec.key], world.versions[spec.key] = written
    for spec in specs:
        if (
            spec.data["noise"]
            and spec.key not in world.errors
            and (problem := _noise(api, spec.data["noise"]))
        ):
            world.errors[spec.key] = problem
    for spec in specs:
        if spec.key in world.errors:
            continue
        data = spec.data
        response = api.handover(
            world.threads[spec.key],
            to_session=data["successor"],
            from_session=data["session"],
            note=data["note"],
        )
        if not state_api.ok(response):
            world.errors[spec.key] = _refused("POST …/handover", response)
    clock_set(api, T1)
    for spec in specs:
        world_of = spec.data.get("world")
        if spec.key in world.errors or not world_of or not world_of["during"]:
            continue
        # A4: the world moves on while the thread is handed over.
        response = api.facts_assert(world_of["during"])
        if response.status not in (200, 201):
            world.errors[spec.key] = _refused("POST /facts (a new release)", response)
    for spec in specs:
        if spec.key in world.errors:
            continue
        thread_id, successor = world.threads[spec.key], spec.data["successor"]
        world.resumed[spec.key] = api.resume(thread_id, successor)
        world.acknowledged[spec.key] = api.acknowledge(thread_id, successor)
        world.thread_after[spec.key] = api.thread(thread_id)
        world.state_after[spec.key] = api.state(thread_id)
    return world


# ---------------------------------------------------------------------- the checks


def _label(check: dict[str, Any]) -> str:
    if check["q"] == "field":
        return f"field {check['field']}"
    if check["q"] == "recheck":
        return f"re-check {check['kind']} {check['name']}"
    return check["q"].replace("_", " ")


def _judge(spec: ItemSpec, world: World, check: dict[str, Any]) -> Verdict:
    key, data = spec.key, spec.data
    final = data["versions"][-1]
    resumed = world.resumed[key]
    package = resumed.body if resumed.status == 200 and isinstance(resumed.body, dict) else None
    q = check["q"]
    if q == "acknowledged":
        answer = world.acknowledged[key]
        return CORRECT if state_api.ok(answer) else _refused("POST …/acknowledge", answer)
    if q == "held_by_successor":
        answer = world.thread_after[key]
        if answer.status != 200 or not isinstance(answer.body, dict):
            return miss(F.R2, f"GET /threads/{{id}} after the handover: {answer.describe()}")
        held = (answer.body.get("status"), answer.body.get("session_id"))
        if held == ("active", data["successor"]):
            return CORRECT
        return miss(
            F.W0,
            f"after the acknowledgement the thread is {held[0]!r} held by {held[1]!r}, "
            f"not active held by {data['successor']!r}",
        )
    if q == "state_after_acknowledge":
        answer = world.state_after[key]
        state = state_api.state_of(answer.body) if answer.status == 200 else None
        if state is None:
            return miss(F.R2, f"GET …/state after the handover: {answer.describe()}")
        if same(state, final):
            return CORRECT
        lost = [name for name in final if name not in state]
        if lost:
            return miss(F.R2, f"the checkpoint lost {', '.join(lost)}")
        changed = [name for name in final if not same(state[name], final[name])]
        return miss(F.W0, f"the checkpoint changed: {', '.join(changed) or 'extra fields'}")
    if package is None:
        return miss(F.R2, f"the successor's resume was refused: {resumed.describe()}")
    checkpoint = state_api.checkpoint_of(package)
    state = state_api.state_of(checkpoint)
    if q == "field":
        neighbours = [v for t in (data["noise"] or {}).get("threads", []) for v in t["versions"]]
        return judge_field(
            check["field"],
            final[check["field"]],
            state,
            earlier=data["versions"][:-1],
            neighbours=neighbours,
        )
    if q == "recheck":
        return judge_recheck(check, state_api.listed(package, "recheck"))
    if q == "failed_branches_surfaced":
        surfaced = state_api.listed(package, "failed_branches")
        if same(surfaced, final["failed_branches"]):
            return CORRECT
        return miss(
            F.A0,
            f"the resume's failed branches: expected {shown(final['failed_branches'])}, "
            f"got {shown(surfaced)}",
        )
    if q == "version_unchanged":
        version = checkpoint.get("version")
        if version == world.versions[key]:
            return CORRECT
        return miss(
            F.W0,
            f"the checkpoint is version {version!r}, not {world.versions[key]}: noise wrote it",
        )
    raise ValueError(f"unknown check {q!r}")


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    tally = Tally(planned=dict(spec.metrics["planned"]))
    broken = world.errors.get(spec.key)
    for item_check in spec.data["checks"]:
        if broken is not None:
            verdict = broken
        else:
            try:
                verdict = _judge(spec, world, item_check)
            except Exception as exc:
                verdict = miss(spec.default_code, f"the answer could not be read: {exc!r}")
        tally.record(item_check["metric"], _label(item_check), verdict)
    return tally.outcome(retained=not tally.missed("field", "handover"))


suite.generated("working_state", generate=generate, prepare=prepare, check=check)
