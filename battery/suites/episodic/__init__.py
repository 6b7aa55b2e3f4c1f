"""Suite B — episodic memory (DESIGN.md §5, §9), driven through the episodes
and recall APIs as an agent would, on the agent's simulated clock.

A seeded draw (draw.py) makes 146 items of five kinds around ~160 routine
episodes: B1 event recall (who, when, what, how it ended) asked by a
successor session after the thread was handed over and 24 h or 72 h went
by, half of them in words the episode does not use; B2 five near-identical
episodes differing in one feature the question names (the right one must
rank first); B3 a matter worked on over several sessions (every episode
back, grouped by session, in time order); B4 questions about events that
never happened, in words nothing in the run uses, and B5 in the run's own
words (its people, systems and operations put together into an event that
did not occur, near.py): both must abstain.

One throwaway agent of its own holds every item's world. `prepare` walks the
timeline: at T0 it writes the past (`POST /episodes`, batches of up to
1,000) and hands every B1 thread over; at T1 = T0 + 24 h and T2 = T0 + 72 h
it sets the clock, writes what happened since, has that moment's
successors resume and acknowledge, waits until every episode written is
embedded (the worker computes embeddings after commit; asking before would
measure a race), and asks that moment's questions (`POST /recall`, route
what_happened). Each item's `check` grades the answers (judge.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...judging import CORRECT, Tally, Verdict, miss
from ...registry import ItemSpec, MetricGate, Suite, register
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from ..working_state import clock_set, thread_write
from ..working_state.api import StateApi, ok
from . import api as episodes_api
from .api import MAX_BATCH, Answer, EpisodesApi, answer_of, await_progress
from .draw import PHASE_TIMES, generate
from .judge import (
    DISAMBIGUATION_GATE,
    EVENT_RECALL_GATE,
    FALSE_MEMORY_GATE,
    PASS_RATE_GATE,
    SYNTHESIS_GATE,
    judge_abstain,
    judge_disambiguation,
    judge_event,
    judge_near,
    judge_synthesis,
    summarize,
)

ROUTE = "what_happened"
LIMIT = 10
# The worker embeds what was written; this long without one more embedded,
# the rest never will be (no worker).
EMBED_STALL_SECONDS = 60.0
EMBED_POLL_SECONDS = 0.25

suite = register(
    Suite(
        code="B",
        name="Episodic memory",
        description=(
            "Events recalled with who, when, what and how they ended by a successor session "
            "after 24 h or 72 h, in the event's words or in others; near-identical episodes told "
            "apart by the feature asked about; a matter gathered from several sessions; and no "
            "answer about what never happened, however near it is to what did: 146 items drawn "
            "from the seed, on a simulated clock."
        ),
        weight=15,
        gate=PASS_RATE_GATE,
        summarize=summarize,
        metric_gates=(
            MetricGate("event_recall", minimum=EVENT_RECALL_GATE),
            MetricGate("disambiguation_accuracy", minimum=DISAMBIGUATION_GATE),
            MetricGate("synthesis_accuracy", minimum=SYNTHESIS_GATE),
            MetricGate("false_memory_rate", maximum=FALSE_MEMORY_GATE),
        ),
    )
)


# ------------------------------------------------------------------------ the world


@dataclass
class World:
    api: EpisodesApi
    ids: dict[str, str] = field(default_factory=dict)  # episode ref -> id
    written: dict[str, dict[str, Any]] = field(default_factory=dict)  # ref -> as written
    owner: dict[str, str] = field(default_factory=dict)  # episode ref -> item key
    threads: dict[str, str] = field(default_factory=dict)  # item key -> thread id
    handovers: dict[str, Verdict] = field(default_factory=dict)  # item key -> verdict
    errors: dict[str, Verdict] = field(default_factory=dict)  # item key -> why it could not ask
    answers: dict[tuple[str, int], Answer] = field(default_factory=dict)


def _record(world: World, chunk: list[tuple[str, dict[str, Any]]]) -> None:
    """Write one batch; a refused batch is retried episode by episode, so a
    refused episode fails only its own item."""
    api = world.api
    response = api.record_many([episode for _, episode in chunk])
    rows = episodes_api.written(response.body)
    if response.status == 201 and len(rows) == len(chunk):
        for (_, episode), row in zip(chunk, rows, strict=True):
            world.ids[episode["ref"]] = str(row.get("id"))
            world.written[episode["ref"]] = episode
        return
    if response.status < 400:
        for key, _ in chunk:
            world.errors.setdefault(
                key,
                miss(F.W0, f"POST /episodes answered without one row each: {response.describe()}"),
            )
        return
    for key, episode in chunk:
        if key in world.errors:
            continue
        single = api.record_one(episode)
        rows = episodes_api.written(single.body)
        if single.status == 201 and len(rows) == 1:
            world.ids[episode["ref"]] = str(rows[0].get("id"))
            world.written[episode["ref"]] = episode
        else:
            world.errors[key] = miss(
                F.W0, f"POST /episodes {episode['ref']} refused: {single.describe()}"
            )


def write_phase(world: World, specs: Sequence[ItemSpec], phase: int) -> None:
    writes = [
        (spec.key, episode)
        for spec in specs
        for episode in spec.data["episodes"]
        if episode["phase"] == phase
    ]
    for key, episode in writes:
        world.owner[episode["ref"]] = key
    for begin in range(0, len(writes), MAX_BATCH):
        _record(world, writes[begin : begin + MAX_BATCH])


def await_embedded(world: World, specs: Sequence[ItemSpec]) -> None:
    """Wait until every episode written so far is embedded; an item whose own
    episodes are not after the wait fails W1 (stored, not consolidated)."""
    wanted = set(world.ids.values())
    seen: set[str] = set()
    problem: list[str] = []

    def pending() -> int:
        rows, response = world.api.listing()
        if response.status != 200:
            problem[:] = [f"GET /episodes refused: {response.describe()}"]
            return len(wanted - seen)
        seen.update(str(row.get("id")) for row in rows if episodes_api.is_embedded(row))
        return len(wanted - seen)

    left = await_progress(pending, stall_seconds=EMBED_STALL_SECONDS, poll=EMBED_POLL_SECONDS)
    if not left:
        return
    waiting = {ref for ref, ident in world.ids.items() if ident not in seen}
    why = problem[0] if problem else f"{left} episodes still had no embedding"
    for spec in specs:
        own = [
            e["ref"] for e in spec.data["episodes"] if not e.get("routine") and e["ref"] in waiting
        ]
        if own and spec.key not in world.errors:
            world.errors[spec.key] = miss(
                F.W1,
                f"{why} after {EMBED_STALL_SECONDS:g} s without progress, "
                f"{len(own)} of them this item's",
            )


def _handover_out(state: StateApi, world: World, spec: ItemSpec) -> None:
    data = spec.data
    written = thread_write(state, data["thread"], data["session"], [data["state"]])
    if isinstance(written, Verdict):
        world.handovers[spec.key] = written
        return
    world.threads[spec.key] = written[0]
    response = state.handover(
        written[0],
        to_session=data["successor"],
        from_session=data["session"],
        note=f"handing over {data['thread']}",
    )
    if not ok(response):
        world.handovers[spec.key] = miss(F.W0, f"POST …/handover refused: {response.describe()}")


def _handover_in(state: StateApi, world: World, spec: ItemSpec) -> None:
    if spec.key in world.handovers:
        return
    thread_id, successor = world.threads[spec.key], spec.data["successor"]
    for what, response in (
        ("resume", state.resume(thread_id, successor)),
        ("acknowledge", state.acknowledge(thread_id, successor)),
    ):
        if not ok(response):
            world.handovers[spec.key] = miss(
                F.W0, f"the successor's {what} was refused: {response.describe()}"
            )
            return
    world.handovers[spec.key] = CORRECT


def ask(world: World, spec: ItemSpec, index: int, question: dict[str, Any]) -> None:
    response = world.api.recall(question["text"], route=ROUTE, limit=LIMIT)
    world.answers[(spec.key, index)] = answer_of(response)


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    client = ctx.new_client() if ctx.new_client is not None else ctx.client
    world = World(api=EpisodesApi(client))
    state = StateApi(client)
    clock_set(state, PHASE_TIMES[0])
    write_phase(world, specs, 0)
    for spec in specs:
        if spec.data.get("thread"):
            _handover_out(state, world, spec)
    for phase in range(1, len(PHASE_TIMES)):
        clock_set(state, PHASE_TIMES[phase])
        write_phase(world, specs, phase)
        asking = [
            (spec, index, question)
            for spec in specs
            for index, question in enumerate(spec.data["questions"])
            if question["phase"] == phase
        ]
        for spec in specs:
            if spec.data.get("thread") and any(s is spec for s, _, _ in asking):
                _handover_in(state, world, spec)
        await_embedded(world, specs)
        for spec, index, question in asking:
            if spec.key not in world.errors:
                ask(world, spec, index, question)
    return world


# ---------------------------------------------------------------------- the checks


def _label(question: dict[str, Any]) -> str:
    return f"{question['q']} {question['text']!r}"


def _judge(world: World, spec: ItemSpec, index: int, question: dict[str, Any]) -> Verdict:
    answer = world.answers.get((spec.key, index))
    if answer is None:
        return miss(F.W0, "the question was never asked")
    q = question["q"]
    if q == "abstain":
        return judge_abstain(answer)
    ids = world.ids
    if q == "near":
        return judge_near(
            answer, {ids[ref]: what for ref, what in question["borrows"].items() if ref in ids}
        )
    if q == "event":
        ref = question["expects"][0]
        return judge_event(answer, ids[ref], world.written[ref])
    if q == "disambiguation":
        lookalikes = {ids[ref]: value for ref, value in question["lookalikes"].items()}
        return judge_disambiguation(
            answer, ids[question["expects"][0]], lookalikes, question["feature"]
        )
    if q == "synthesis":
        refs = question["expects"]
        return judge_synthesis(
            answer,
            [ids[ref] for ref in refs],
            {ids[ref]: question["sessions"][ref] for ref in refs},
            {ids[ref]: world.written[ref]["occurred_at"] for ref in refs},
        )
    raise ValueError(f"unknown question {q!r}")


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    tally = Tally(planned=dict(spec.metrics["planned"]))
    broken = world.errors.get(spec.key)
    if spec.data.get("thread"):
        handover = world.handovers.get(spec.key) or miss(F.W0, "the thread was never resumed")
        tally.record("handover", "handover", handover)
    for index, question in enumerate(spec.data["questions"]):
        if broken is not None:
            verdict = broken
        else:
            try:
                verdict = _judge(world, spec, index, question)
            except Exception as exc:
                verdict = miss(spec.default_code, f"the answer could not be read: {exc!r}")
        tally.record(question["metric"], _label(question), verdict)
    return tally.outcome()


suite.generated("episodic", generate=generate, prepare=prepare, check=check)
