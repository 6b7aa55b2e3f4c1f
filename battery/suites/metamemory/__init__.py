"""Suite G — metamemory (DESIGN.md §9): does the agent know what it knows?
Driven through the API as an agent would, on the wall clock.

A seeded draw (draw.py) makes 208 items. G1 "do I need to look?" (48): a
fact question on the current-fact route whose answer is stable (answer it),
possibly stale (answer it, flagged `needs_recheck`: older than its
predicate's volatility) or unknowable (nothing stored: abstain). G2 route
accuracy (120): one question per memory type — current fact, what happened,
how to, what am I supposed to do, what did source X say, multi-hop — asked
with route auto; the route chosen must be the type's, and what the item
stored of that type must come back. 60 are asked in the router's own
template words (gated), 60 in words no rule or prototype of the router holds
(phrasing.py), a seen and a held-out half, reported per half
(`route_accuracy_seen`, `_held_out`), not gated. G3 "asked in other words"
(40): a fact stored as key-value state (its value changed once), asked with
route auto in words that paraphrase its predicate, from a seen or a held-out
vocabulary (paraphrase.py), and negatives (a predicate never stated, a
look-alike subject). Its items pass when no superseded value is shown as
current and nothing is answered where nothing is stored (gated); how many
are answered is reported per vocabulary (`paraphrase_answer_rate`,
`_held_out`).

One throwaway agent of its own holds every item's world. `prepare` defines
the predicates' volatility, writes the facts (batches), episodes, skills,
intentions and documents, waits until the service has indexed them (the
worker embeds episodes and chunks and renders facts as searchable text after
commit; asking before would measure a race) and until the stale values are
older than their volatility, then asks every question (POST /recall). Each
item's `check` grades the answers (judge.py).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ...judging import Tally, Verdict, miss
from ...registry import ItemFailure, ItemSpec, MetricGate, Suite, register
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from ..episodic import api as episodes_api
from ..episodic.api import Answer, Hit, answer_of, await_progress
from ..semantic import api as facts_api
from . import api as memory_api
from .api import MemoryApi
from .draw import STALE_SECONDS, generate, predicate_definitions
from .judge import (
    ABSTENTION_GATE,
    FALSE_ANSWER_GATE,
    LOOK_GATE,
    PASS_RATE_GATE,
    ROUTE_GATE,
    STALE_AS_CURRENT_GATE,
    judge_g1,
    judge_g3,
    judge_route,
    judge_store,
    summarize,
)

LIMIT = 10
MAX_BATCH = 1000
INDEX_STALL_SECONDS = 60.0
POLL_SECONDS = 0.25
STALE_MARGIN_SECONDS = 1.5  # past the volatility: ages are whole seconds

suite = register(
    Suite(
        code="G",
        name="Metamemory",
        description=(
            "Knowing what it knows: a stored fact answered and flagged for re-check when older "
            "than its volatility, an abstention when nothing is stored, and every memory type's "
            "question routed to its store, and facts asked in other words answered without "
            "a stale value shown as current: 208 items drawn from the seed."
        ),
        weight=5,
        gate=PASS_RATE_GATE,
        summarize=summarize,
        metric_gates=(
            MetricGate("route_accuracy", minimum=ROUTE_GATE),
            MetricGate("route_store_accuracy", minimum=ROUTE_GATE),
            MetricGate("look_accuracy", minimum=LOOK_GATE),
            MetricGate("abstention_accuracy", minimum=ABSTENTION_GATE),
            MetricGate("paraphrase_false_answer_rate", maximum=FALSE_ANSWER_GATE),
            MetricGate("stale_as_current_rate", maximum=STALE_AS_CURRENT_GATE),
        ),
    )
)


# ------------------------------------------------------------------------ the world


@dataclass
class World:
    api: MemoryApi
    ids: dict[str, str] = field(default_factory=dict)  # ref -> id of what was stored
    recorded: dict[str, datetime] = field(default_factory=dict)  # fact ref -> recorded_at
    errors: dict[str, Verdict] = field(default_factory=dict)  # item key -> why it could not ask
    answers: dict[str, Answer] = field(default_factory=dict)  # item key -> the answer
    answered: dict[str, bool] = field(default_factory=dict)  # G3 item key -> answered


def _refused(what: str, response) -> Verdict:
    return miss(F.W0, f"{what} refused: {response.describe()}")


def _define_predicates(api: MemoryApi) -> None:
    for name, volatility in predicate_definitions().items():
        response = api.predicate_define(name, volatility)
        if response.status not in (200, 201):
            raise ItemFailure(F.W0, f"PUT /predicates/{name} refused: {response.describe()}")


def _write_facts(world: World, specs: Sequence[ItemSpec]) -> None:
    writes = [(spec.key, fact) for spec in specs for fact in spec.data["facts"]]
    for begin in range(0, len(writes), MAX_BATCH):
        chunk = writes[begin : begin + MAX_BATCH]
        response = world.api.facts_assert([fact["claim"] for _, fact in chunk])
        results = facts_api.write_results(response.body)
        if response.status not in (200, 201) or len(results) != len(chunk):
            for key, _ in chunk:
                world.errors.setdefault(key, _refused(f"POST /facts ({len(chunk)})", response))
            continue
        for (key, fact), result in zip(chunk, results, strict=True):
            fact_id = result.get("fact_id") or facts_api.fact_id(result.get("fact") or {})
            recorded = facts_api.moment(result.get("recorded_at"))
            if not fact_id:
                world.errors.setdefault(key, miss(F.W0, f"{fact['ref']}: no fact in {result!r}"))
                continue
            world.ids[fact["ref"]] = str(fact_id)
            if recorded is not None:
                world.recorded[fact["ref"]] = recorded


def _write_episodes(world: World, specs: Sequence[ItemSpec]) -> None:
    writes = [(spec.key, spec.data["episode"]) for spec in specs if "episode" in spec.data]
    if not writes:
        return
    response = world.api.record_many([episode for _, episode in writes])
    rows = episodes_api.written(response.body)
    if response.status != 201 or len(rows) != len(writes):
        for key, _ in writes:
            world.errors.setdefault(key, _refused("POST /episodes", response))
        return
    for (_, episode), row in zip(writes, rows, strict=True):
        world.ids[episode["ref"]] = str(row.get("id"))


def _write_others(world: World, specs: Sequence[ItemSpec]) -> None:
    api = world.api
    for spec in specs:
        data = spec.data
        if "skill" in data:
            skill = {k: v for k, v in data["skill"].items() if k != "ref"}
            response = api.skill_create(skill)
            version = memory_api.skill_version_id(response.body)
            if response.status != 201 or version is None:
                world.errors[spec.key] = _refused("POST /skills", response)
            else:
                world.ids[data["skill"]["ref"]] = version
        if "intention" in data:
            intention = {k: v for k, v in data["intention"].items() if k != "ref"}
            response = api.intention_create(intention)
            if response.status != 201 or not isinstance(response.body, dict):
                world.errors[spec.key] = _refused("POST /intentions", response)
            else:
                world.ids[data["intention"]["ref"]] = str(response.body.get("id"))
        if "source" in data:
            source = data["source"]
            response = api.source_ingest(source["title"], source["content"])
            source_id = memory_api.source_id_of(response.body)
            if response.status not in (200, 201) or source_id is None:
                world.errors[spec.key] = _refused("POST /sources/ingest", response)
            else:
                world.ids[source["ref"]] = source_id


def _await_indexed(world: World, specs: Sequence[ItemSpec]) -> None:
    """Wait until episodes and chunks are embedded and every fact is findable
    through its text; an item whose world is still not indexed after the wait
    fails W1 (stored, not consolidated)."""
    api = world.api
    episodes = {
        spec.key: world.ids[spec.data["episode"]["ref"]]
        for spec in specs
        if "episode" in spec.data and spec.data["episode"]["ref"] in world.ids
    }
    sources = {
        spec.key: world.ids[spec.data["source"]["ref"]]
        for spec in specs
        if "source" in spec.data and spec.data["source"]["ref"] in world.ids
    }
    facts = {
        (spec.key, fact["ref"]): fact
        for spec in specs
        for fact in spec.data["facts"]
        # A superseded value is not what its pair's text says now.
        if fact["ref"] in world.ids and not fact["ref"].endswith(":old")
    }
    waiting: set[Any] = set(episodes) | set(sources) | set(facts)

    def pending() -> int:
        if any(key in waiting for key in episodes):
            rows, _ = api.listing()
            embedded = {str(r.get("id")) for r in rows if episodes_api.is_embedded(r)}
            waiting.difference_update(k for k, i in episodes.items() if i in embedded)
        for key, source_id in sources.items():
            if key in waiting:
                rows, _ = api.chunks(source_id)
                if rows and all(episodes_api.is_embedded(r) for r in rows):
                    waiting.discard(key)
        for key, fact in facts.items():
            if key in waiting and _fact_findable(api, fact, world.ids[fact["ref"]]):
                waiting.discard(key)
        return len(waiting)

    left = await_progress(pending, stall_seconds=INDEX_STALL_SECONDS, poll=POLL_SECONDS)
    if not left:
        return
    for entry in sorted(waiting, key=str):
        key = entry[0] if isinstance(entry, tuple) else entry
        world.errors.setdefault(
            key,
            miss(
                F.W1,
                f"{left} stored things were still not indexed after {INDEX_STALL_SECONDS:g} s "
                "without progress, this item's among them",
            ),
        )


def _fact_findable(api: MemoryApi, fact: dict[str, Any], fact_id: str) -> bool:
    """Has the service indexed this fact's text? Asked with the fact's own
    subject and predicate (never the item's question): it is findable when
    the fact comes back and its text was matched by its embedding too."""
    claim = fact["claim"]
    probe = f"{claim['predicate'].replace('_', ' ')} {claim['subject']}"
    answer = answer_of(api.recall(probe, route="current_fact", limit=LIMIT))
    for hit in answer.evidence:
        if hit.kind == "fact" and hit.id == fact_id:
            return hit.signals.get("vector_similarity") is not None
    return False


def _await_stale(world: World, specs: Sequence[ItemSpec]) -> None:
    """Wait until every value meant to be stale is older than its volatility."""
    stale = [
        world.recorded[fact["ref"]]
        for spec in specs
        if spec.metrics.get("look") == "stale"
        for fact in spec.data["facts"]
        if fact["ref"].endswith(":fact") and fact["ref"] in world.recorded
    ]
    if not stale:
        return
    until = max(stale).timestamp() + STALE_SECONDS + STALE_MARGIN_SECONDS
    delay = until - datetime.now(UTC).timestamp()
    if delay > 0:
        time.sleep(delay)


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    client = ctx.new_client() if ctx.new_client is not None else ctx.client
    world = World(api=MemoryApi(client))
    _define_predicates(world.api)
    _write_facts(world, specs)
    _write_episodes(world, specs)
    _write_others(world, specs)
    _await_indexed(world, specs)
    _await_stale(world, specs)
    for spec in specs:
        if spec.key in world.errors:
            continue
        question = spec.data["question"]
        response = world.api.recall(question["text"], route=question["route"], limit=LIMIT)
        world.answers[spec.key] = answer_of(response)
    return world


# ---------------------------------------------------------------------- the checks


def _found(world: World, expects: dict[str, Any]):
    kind = expects["kind"]
    if kind == "chunk":
        source_id = world.ids[expects["ref"]]

        def found(hit: Hit) -> bool:
            source = hit.memory_status.get("source") or {}
            owner = hit.obj.get("source_id") or source.get("source_id")
            return hit.kind == "chunk" and str(owner) == source_id

        return found
    if kind == "path":
        wanted = {world.ids[ref] for ref in expects["refs"]}

        def found(hit: Hit) -> bool:
            source = hit.memory_status.get("source") or {}
            return hit.kind == "path" and wanted <= {str(f) for f in source.get("facts") or []}

        return found
    ident = world.ids[expects["ref"]]
    return lambda hit: hit.kind == kind and hit.id == ident


def _verdicts(world: World, spec: ItemSpec, answer: Answer) -> dict[str, Verdict]:
    question = spec.data["question"]
    if spec.metrics["kind"] == "G3":
        verdicts, answered = judge_g3(answer, question)
        world.answered[spec.key] = answered
        return verdicts
    if spec.metrics["kind"] == "G1":
        fact_id = world.ids.get(f"{spec.key}:fact")
        return judge_g1(answer, question, fact_id)
    expects = question["expects"]
    return {
        "route": judge_route(answer, question["expected_route"]),
        "store": judge_store(answer, _found(world, expects), f"the {expects['kind']} stored"),
    }


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    tally = Tally(planned=dict(spec.metrics["planned"]))
    label = spec.data["question"]["text"]
    broken = world.errors.get(spec.key)
    answer = world.answers.get(spec.key)
    if broken is None and answer is None:
        broken = miss(F.W0, "the question was never asked")
    if broken is not None:
        verdicts = dict.fromkeys(spec.data["checks"], broken)
    else:
        try:
            verdicts = _verdicts(world, spec, answer)
        except Exception as exc:
            verdicts = dict.fromkeys(
                spec.data["checks"],
                miss(spec.default_code, f"the answer could not be read: {exc!r}"),
            )
    for metric in spec.data["checks"]:
        tally.record(metric, f"{metric}: {label!r}", verdicts[metric])
    if spec.metrics["kind"] == "G3":
        return tally.outcome(answered=world.answered.get(spec.key, False))
    return tally.outcome()


suite.generated("metamemory", generate=generate, prepare=prepare, check=check)
