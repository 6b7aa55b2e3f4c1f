"""Suite C — semantic and temporal memory (DESIGN.md §4, §9), driven through
the facts API as an agent would.

A seeded draw (draw.py) makes 540 items of five kinds: C1 retention, C2
supersession chains, C3 conflicting authority, C4 late-arriving evidence,
C5 multi-hop relations. One throwaway agent holds the world of all of them:
`prepare` writes it round by round, each round in batches of up to 1,000
claims, asking the questions that concern a moment mid-way (C3's contest)
right then; each item's `check` then asks the rest. Grading is in judge.py.

A second draw (asked.py) makes 72 C6 items "asked through recall": facts
whose value changed to a textually close one, asked in plain words with
POST /recall (route auto), in a seen and a held-out vocabulary. They are
written into the same agent after C1-C5's world (the recall sees all of
it), the service is waited for until it has indexed their text (the worker
renders each pair as text after commit; asking before would measure a
race), then every question is asked once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ...judging import CORRECT, Verdict, miss
from ...registry import ItemFailure, ItemSpec, MetricGate, Suite, register
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from ..episodic.api import Answer, answer_of, await_progress
from . import api as facts_api
from .api import MAX_BATCH, FactsApi
from .asked import generate as generate_asked
from .draw import generate
from .judge import RECALL_JUDGES, Tally, failing_checks, judge_paths, judge_values, summarize

ACCURACY_GATE = 0.99
STALE_GATE = 0.005
# C6: a superseded value presented as current through recall is the promise
# broken, in any words (0). On the seen vocabulary the current value is found
# and nothing is answered where nothing is in force, at what the code reaches
# (docs/battery.md); on the held-out vocabulary both rates are reported only.
RECALL_STALE_GATE = 0.0
RECALL_FOUND_GATE = 0.95
RECALL_FALSE_ANSWER_GATE = 0.0

suite = register(
    Suite(
        code="C",
        name="Semantic and temporal memory",
        description=(
            "Facts recalled exactly among look-alikes, supersession chains, authority "
            "contests, late-arriving evidence (as_of and as_known_at) and multi-hop "
            "relations at a valid time: 540 items drawn from the seed."
        ),
        weight=20,
        gate=ACCURACY_GATE,
        summarize=summarize,
        metric_gates=(
            MetricGate("current_value_accuracy", minimum=ACCURACY_GATE),
            MetricGate("as_of_accuracy", minimum=ACCURACY_GATE),
            MetricGate("authority_temporal_resolution_accuracy", minimum=ACCURACY_GATE),
            MetricGate("bitemporal_accuracy", minimum=ACCURACY_GATE),
            MetricGate("multihop_accuracy", minimum=ACCURACY_GATE),
            MetricGate("stale_value_rate", maximum=STALE_GATE),
            MetricGate("recall_stale_as_current_rate", maximum=RECALL_STALE_GATE),
            MetricGate("recall_current_found_rate", minimum=RECALL_FOUND_GATE),
            MetricGate("recall_false_answer_rate", maximum=RECALL_FALSE_ANSWER_GATE),
        ),
    )
)


# ------------------------------------------------------------------------ the world


@dataclass
class Written:
    """What the service answered to one write: a batch's receipt names the
    fact; a single write's answer holds it, with its record time."""

    outcome: str
    fact_id: str | None
    resolved: list[str]
    recorded_at: datetime | None = None


@dataclass
class World:
    written: dict[tuple[str, str], Written] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # item key -> why its world is missing
    observed: dict[tuple[str, int], Any] = field(default_factory=dict)


def _written(result: Any) -> Written:
    result = result if isinstance(result, dict) else {}
    fact = result.get("fact") if isinstance(result.get("fact"), dict) else {}
    fact_id = result.get("fact_id") or facts_api.fact_id(fact)
    return Written(
        outcome=str(result.get("outcome", "")),
        fact_id=str(fact_id) if fact_id else None,
        resolved=facts_api.ids(result.get("resolved_contests")),
        # A batch receipt says when the claim was recorded; a single write's
        # fact carries it (for a new version, the same moment).
        recorded_at=facts_api.moment(
            result.get("recorded_at") or facts_api.field_of(fact, "recorded_at")
        ),
    )


def _read_record_times(api: FactsApi, world: World, wanted: list[tuple[str, str]]) -> None:
    """Fill in the record time of writes whose answer did not carry it (batch
    receipts), reading each fact back: as_known_at questions are asked at them."""
    for key, ref in wanted:
        written = world.written.get((key, ref))
        if written is None or written.recorded_at is not None or written.fact_id is None:
            continue
        response = api.fact(written.fact_id)
        if response.status == 200 and isinstance(response.body, dict):
            written.recorded_at = facts_api.moment(facts_api.field_of(response.body, "recorded_at"))


def _claim_text(claim: dict[str, Any]) -> str:
    return f"{claim['subject']}.{claim['predicate']} from {claim['valid_from']}"


def _assert_round(api: FactsApi, world: World, writes: list[tuple[str, dict[str, Any]]]) -> None:
    """Send a round's claims in batches; a refused batch is retried claim by
    claim, so one refused claim fails only its own item."""
    for begin in range(0, len(writes), MAX_BATCH):
        chunk = writes[begin : begin + MAX_BATCH]
        response = api.assert_many([write["claim"] for _, write in chunk])
        results = facts_api.write_results(response.body)
        if response.status in (200, 201) and len(results) == len(chunk):
            for (key, write), result in zip(chunk, results, strict=True):
                world.written[(key, write["ref"])] = _written(result)
            continue
        if response.status < 400:
            for key, _ in chunk:
                world.errors.setdefault(
                    key, f"POST /facts answered without one result per claim: {response.describe()}"
                )
            continue
        for key, write in chunk:
            if key in world.errors:
                continue
            single = api.assert_one(write["claim"])
            if single.status in (200, 201):
                world.written[(key, write["ref"])] = _written(single.body)
            else:
                world.errors[key] = (
                    f"POST /facts {_claim_text(write['claim'])} refused: {single.describe()}"
                )


def _act(api: FactsApi, world: World, key: str, write: dict[str, Any]) -> None:
    """A correct or end of an earlier write."""
    target = world.written.get((key, write["target"]))
    if target is None or target.fact_id is None:
        world.errors[key] = f"{write['op']}: the answer to write {write['target']!r} named no fact"
        return
    response = api.act(write["op"], target.fact_id, write["body"])
    if response.status in (200, 201):
        world.written[(key, write["ref"])] = _written(response.body)
    else:
        world.errors[key] = (
            f"POST /facts/{target.fact_id}/{write['op']} refused: {response.describe()}"
        )


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    """Write every item's world, round by round; within a round, claims first
    (batched across items), then corrections and ends, then the questions
    that must be asked at that moment."""
    api = FactsApi(ctx.client)
    world = World()
    rounds = max(write["round"] for spec in specs for write in spec.data["writes"])
    timed = {
        (spec.key, question["record_ref"])
        for spec in specs
        for question in spec.data["questions"]
        if question.get("record_ref")
    }
    for number in range(1, rounds + 1):
        claims = [
            (spec.key, write)
            for spec in specs
            for write in spec.data["writes"]
            if write["round"] == number and write["op"] == "assert" and spec.key not in world.errors
        ]
        _assert_round(api, world, claims)
        for spec in specs:
            for write in spec.data["writes"]:
                if (
                    write["round"] == number
                    and write["op"] != "assert"
                    and spec.key not in world.errors
                ):
                    _act(api, world, spec.key, write)
        _read_record_times(
            api,
            world,
            [
                (spec.key, write["ref"])
                for spec in specs
                for write in spec.data["writes"]
                if write["round"] == number and (spec.key, write["ref"]) in timed
            ],
        )
        for spec in specs:
            asking = FactsApi(ctx.client, memo={})
            for index, question in enumerate(spec.data["questions"]):
                if question.get("at") == number and spec.key not in world.errors:
                    world.observed[(spec.key, index)] = _ask(asking, world, spec.key, question)
    return world


# ---------------------------------------------------------------------- questions


def _record_time(world: World, key: str, question: dict[str, Any]) -> str | Verdict:
    written = world.written.get((key, question["record_ref"]))
    recorded = written.recorded_at if written else None
    if recorded is None:
        return miss(F.W0, "the write's answer carried no recorded_at to ask as_known_at with")
    moment = recorded + timedelta(microseconds=question["record_offset_us"])
    return moment.isoformat()


def _ask(api: FactsApi, world: World, key: str, question: dict[str, Any]) -> Any:
    """Make the question's request: an ApiResponse, a Verdict already reached,
    None for questions about a write's answer, or the exception it raised."""
    try:
        kind = question["q"]
        if kind == "current":
            return api.current(question["subject"], question["predicate"])
        if kind == "as_of":
            return api.as_of(question["subject"], question["predicate"], question["valid_time"])
        if kind == "as_known_at":
            record_time = _record_time(world, key, question)
            if isinstance(record_time, Verdict):
                return record_time
            return api.as_known_at(
                question["subject"], question["predicate"], question["valid_time"], record_time
            )
        if kind == "contest_in_chain":
            return api.chain(question["subject"], question["predicate"])
        if kind == "contest_flagged":
            return api.current(question["subject"], question["predicate"])
        if kind == "paths":
            return api.paths(
                question["start"],
                question["end"],
                predicates=question.get("predicates"),
                hops=question.get("hops"),
                valid_time=question.get("valid_time"),
            )
        return None
    except Exception as exc:  # judged as a miss, not a crash of the item
        return exc


def _label(question: dict[str, Any]) -> str:
    kind = question["q"]
    if kind == "paths":
        via = ",".join(question.get("predicates") or []) or f"{question.get('hops')} hops"
        label = f"paths {question['start']} -> {question['end']} via {via}"
    elif "subject" in question:
        label = f"{kind} {question['subject']}.{question['predicate']}"
    else:
        label = f"{kind} of write {question['ref']!r}"
    if question.get("valid_time"):
        label += f" at {question['valid_time']}"
    if question.get("record_ref"):
        offset = question["record_offset_us"]
        label += f" as known at {question['record_ref']}{f' {offset:+d}us' if offset else ''}"
    return label


def _contest(world: World, key: str, question: dict[str, Any]) -> str | None:
    written = world.written.get((key, question["ref"]))
    return written.fact_id if written else None


def _judge(world: World, key: str, question: dict[str, Any], answer: Any) -> Verdict:
    kind = question["q"]
    if isinstance(answer, Verdict):
        return answer
    if isinstance(answer, Exception):
        return miss(F.R2, f"the request failed: {answer!r}")
    if kind == "outcome":
        written = world.written.get((key, question["ref"]))
        outcome = written.outcome if written else None
        if outcome == question["expect"]:
            return CORRECT
        return miss(F.W0, f"the write's outcome: expected {question['expect']!r}, got {outcome!r}")
    if kind == "resolves":
        written = world.written.get((key, question["ref"]))
        contest = _contest(world, key, {"ref": question["contest"]})
        resolved = written.resolved if written else []
        if contest is not None and contest in resolved:
            return CORRECT
        return miss(
            F.W0, f"the correction's resolved contests: expected {contest!r} in {resolved!r}"
        )
    if answer.status != 200:
        return miss(F.R2, f"expected HTTP 200, got {answer.describe()}")
    if kind in ("current", "as_of", "as_known_at"):
        facts = facts_api.facts_of(answer.body)
        return judge_values(question, [facts_api.value_of(fact) for fact in facts])
    if kind == "paths":
        paths = [facts_api.path_shape(p) for p in facts_api.paths_of(answer.body)]
        return judge_paths(question, paths)
    contest = _contest(world, key, question)
    facts = facts_api.facts_of(answer.body)
    if kind == "contest_in_chain":
        found = [f for f in facts if facts_api.fact_id(f) == contest]
        if not found:
            return miss(F.R2, f"the contested claim {contest} is not in the chain")
        status = facts_api.field_of(found[0], "status")
        is_open = facts_api.field_of(found[0], "superseded_at") is None
        if status != "contested":
            return miss(F.W0, f"the low-authority claim has status {status!r}, not 'contested'")
        if is_open == question["open"]:
            return CORRECT
        if question["open"]:
            return miss(F.W1, "the contest was closed before anything resolved it")
        return miss(F.W1, "the contest is still open after the correction resolved it")
    if kind == "contest_flagged":
        if not facts:
            return miss(F.R2, "no current fact to carry the contest")
        flagged = [
            contested
            for fact in facts
            for contested in facts_api.ids(facts_api.field_of(fact, "contested_by") or [])
        ]
        if (contest in flagged) == question["flagged"]:
            return CORRECT
        if question["flagged"]:
            return miss(F.A0, f"the current fact does not flag its open contest {contest}")
        return miss(F.R3, f"the current fact still flags the resolved contest {contest}")
    raise ValueError(f"unknown question {kind!r}")


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    """Grade every question the item planned. When part of its world could not
    be written, what was observed before that is still graded; every other
    question is a W0 miss."""
    tally = Tally(planned=dict(spec.metrics["planned"]))
    api = FactsApi(ctx.client, memo={})
    broken = world.errors.get(spec.key)
    for index, question in enumerate(spec.data["questions"]):
        observed = (spec.key, index) in world.observed
        if broken and not observed:
            tally.record(question, _label(question), miss(F.W0, broken))
            continue
        if question.get("at"):
            answer = world.observed.get((spec.key, index))
        else:
            answer = _ask(api, world, spec.key, question)
        try:
            verdict = _judge(world, spec.key, question, answer)
        except Exception as exc:
            verdict = miss(spec.default_code, f"the answer could not be read: {exc!r}")
        tally.record(question, _label(question), verdict)
    return tally.outcome()


suite.generated("semantic", generate=generate, prepare=prepare, check=check)


# --------------------------------------------------------- C6, asked through recall

LIMIT = 10
INDEX_STALL_SECONDS = 60.0
POLL_SECONDS = 0.25


@dataclass
class AskedWorld(World):
    unindexed: set[str] = field(default_factory=set)  # item keys whose text never came
    answers: dict[str, Answer] = field(default_factory=dict)


def _awaited(spec: ItemSpec) -> list[tuple[str, str, Any]]:
    """(subject, predicate, value) of what the item's question needs indexed:
    its current value, and its subject's other attributes."""
    question = spec.data["question"]
    wanted = [
        (w["claim"]["subject"], w["claim"]["predicate"], w["claim"]["value"])
        for w in spec.data["writes"]
        if w["ref"].startswith("other:")
    ]
    if question["expect"] is not None:
        wanted.append((question["subject"], question["predicate"], question["expect"]["value"]))
    return wanted


def _findable(api: FactsApi, subject: str, predicate: str, value: Any) -> bool:
    """Has the service indexed this pair's text with this value? Asked with
    the pair's own words on the facts route (never the item's question)."""
    probe = f"{predicate.replace('_', ' ')} {subject}"
    answer = answer_of(api.recall(probe, route="current_fact", limit=LIMIT))
    return any(
        hit.kind == "fact"
        and str((hit.obj.get("subject") or {}).get("name", "")).lower() == subject.lower()
        and hit.obj.get("predicate") == predicate
        and hit.obj.get("value") == value
        and hit.signals.get("vector_similarity") is not None
        for hit in answer.evidence
    )


def _await_indexed(api: FactsApi, world: AskedWorld, specs: Sequence[ItemSpec]) -> None:
    """Wait until every awaited pair is findable by its text. Pairs are
    rendered in the order they were written, so each poll stops at the first
    one still missing; after a stall, one full pass says which never came."""
    waiting = [
        (spec.key, pair)
        for spec in specs
        if spec.key not in world.errors
        for pair in _awaited(spec)
    ]

    def pending() -> int:
        while waiting and _findable(api, *waiting[0][1]):
            waiting.pop(0)
        return len(waiting)

    if not await_progress(pending, stall_seconds=INDEX_STALL_SECONDS, poll=POLL_SECONDS):
        return
    world.unindexed.update(key for key, pair in waiting if not _findable(api, *pair))


def prepare_asked(ctx: ItemContext, specs: Sequence[ItemSpec]) -> AskedWorld:
    """Write every C6 item's facts round by round (claims batched, then
    corrections and ends), wait until they are indexed, ask every question."""
    api = FactsApi(ctx.client)
    world = AskedWorld()
    rounds = max((w["round"] for spec in specs for w in spec.data["writes"]), default=0)
    for number in range(1, rounds + 1):
        writes = [
            (spec.key, write)
            for spec in specs
            for write in spec.data["writes"]
            if write["round"] == number and spec.key not in world.errors
        ]
        _assert_round(api, world, [(key, w) for key, w in writes if w["op"] == "assert"])
        for key, write in writes:
            if write["op"] != "assert" and key not in world.errors:
                _act(api, world, key, write)
    _await_indexed(api, world, specs)
    for spec in specs:
        if spec.key not in world.errors:
            world.answers[spec.key] = answer_of(api.recall(spec.data["question"]["text"]))
    return world


def check_asked(ctx: ItemContext, spec: ItemSpec, world: AskedWorld) -> dict[str, Any]:
    """Judge the item's answer on each of its checks (judge.py). It fails on
    the first check missed that fails it (judge.failing_checks); every
    check's result is in its metrics."""
    question, checks = spec.data["question"], spec.data["checks"]
    answer = world.answers.get(spec.key)
    if spec.key in world.errors:
        broken: Verdict | None = miss(F.W0, world.errors[spec.key])
    elif spec.key in world.unindexed:
        broken = miss(
            F.W1, f"its facts were not indexed {INDEX_STALL_SECONDS:g} s after the last progress"
        )
    elif answer is None:
        broken = miss(F.W0, "the question was never asked")
    else:
        broken = None
    verdicts: dict[str, Verdict] = {}
    for name in checks:
        if broken is not None:
            verdicts[name] = broken
            continue
        try:
            verdicts[name] = RECALL_JUDGES[name](answer, question)
        except Exception as exc:  # an answer of an unexpected shape
            verdicts[name] = miss(spec.default_code, f"the answer could not be read: {exc!r}")
    metrics: dict[str, Any] = {"held": {name: v.ok for name, v in verdicts.items()}}
    if answer is not None:
        metrics["route"] = answer.route.get("chosen")
    missed = [(name, v) for name, v in verdicts.items() if not v.ok]
    if missed:
        metrics["missed"] = [{"check": name, "code": v.code} for name, v in missed]
    failing = [(name, v) for name, v in missed if name in failing_checks(spec.metrics["split"])]
    if not failing:
        return metrics
    name, first = failing[0]
    detail = f"{name}: {question['text']!r}: {first.detail}"
    if len(missed) > 1:
        detail += " (also " + ", ".join(f"{n} {v.code}" for n, v in missed if n != name) + ")"
    raise ItemFailure(first.code, detail, metrics=metrics)


suite.generated(
    "semantic_recall", generate=generate_asked, prepare=prepare_asked, check=check_asked
)
