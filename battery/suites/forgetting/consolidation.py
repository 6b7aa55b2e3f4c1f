"""Suite F3–F6: consolidation quality, duplicate collapse, poisoning, candidate
skills — driven through the API as an agent would, in an agent of their own.

`prepare` records the draw's episodes (consolidation_draw.py) — after the
user's word for the items a third party contradicts — and its traces
(skill_draw.py, POST /skills/traces), then starts a `facts`, a `duplicates`
and a `skills` consolidation run (POST /consolidation/runs) and waits until no
run of the agent is running (a worker does the work; in tests the tasks run
eagerly). It reads every candidate back and gives each to the item whose
episodes (or traces) its evidence cites.

Each item's `check` counts, per metric (judge.py turns the counts into rates):

* stating items: a candidate with the item's claim (`found`, recall), citing
  every episode that said it (`evidence`) and counting its sources as the
  item planned them — a source repeating itself is one (`sources`); every
  candidate the item's episodes gave, right or wrong (`proposed`, precision);
* distractors: every candidate they gave is wrong (`proposed`), and their
  subject has no current fact (`distractor_clean`);
* duplicates: both copies name the first as canonical (`collapsed`); a search
  for the note finds the canonical one and never a copy (`canonical_found`,
  `duplicates_hidden`); the look-alike stays its own and is found
  (`distinct_kept`);
* poison: nothing was proposed or asserted from it (`poison_promoted`), its
  value is not the current fact — the user's is, where the user spoke
  (`poison_current`), and injected text is flagged `instruction_like`
  (`flagged`);
* procedures (F6): a learnable one is proposed as one candidate skill citing
  every trace (`skill_learned`), whose version passes its examples in the
  sandbox and so becomes experimental (`skill_replayed`); a refused one
  (unverified, failed, third party, document, instruction-like, one run
  repeated, too few runs) proposes nothing (`skill_refused`).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from ...judging import CORRECT, Tally, Verdict, miss
from ...registry import ItemSpec
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from .api import ForgettingApi, Refused, search_hit_ids

EPOCH = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
RUN_WAIT_SECONDS = 300
POLL_SECONDS = 0.5
RUN_KINDS = ("facts", "duplicates", "skills")
VERSION_WAIT_SECONDS = 120  # the sandbox validation of a proposed version (a worker)


def norm(text: Any) -> str:
    words = " ".join(str(text).split()).lower().rstrip(".,;:!")
    return words[4:] if words.startswith("the ") else words


def claim(subject: Any, predicate: Any, value: Any) -> tuple[str, str, str]:
    return (norm(subject), str(predicate), norm(value))


@dataclass
class World:
    api: ForgettingApi
    ids: dict[tuple[str, str], str] = field(default_factory=dict)  # (item, ref) -> episode id
    candidates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by item
    traces: dict[str, str] = field(default_factory=dict)  # trace id -> item
    skill_candidates: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by item
    errors: dict[str, Verdict] = field(default_factory=dict)
    problem: str = ""  # consolidation did not run to the end


def _when(n: int) -> str:
    return (EPOCH + timedelta(minutes=n)).isoformat().replace("+00:00", "Z")


def _record(world: World, spec: ItemSpec, n: int) -> int:
    """Record one item's episodes; returns the next minute to use."""
    api, data = world.api, spec.data
    if spec.metrics["part"] == "procedure":
        for trace in data["traces"]:
            world.traces[api.require(api.trace(trace), "POST /skills/traces")["id"]] = spec.key
        return n
    if spec.metrics["part"] == "duplicates":
        notes = [("canonical", data["canonical"])]
        notes += [(f"copy{i}", text) for i, text in enumerate(data["duplicates"])]
        notes.append(("look_alike", data["look_alike"]))
        for ref, text in notes:
            body = {
                "occurred_at": _when(n),
                "summary": text,
                "actor": "ops-agent",
                "session_id": data["session"],
            }
            world.ids[(spec.key, ref)] = api.require(api.episode(body), "POST /episodes")["id"]
            n += 1
        return n
    if "user_value" in data:
        subject, predicate, poisoned = data["truth"]
        said = {"subject": subject, "predicate": predicate, "actor": "the-user"}
        api.require(
            api.facts([{**said, "value": data["user_value"], "source_type": "user_statement"}]),
            "POST /facts (the user's word)",
        )
        claims = [
            {**said, "value": poisoned, "source_type": "third_party", "actor": feed}
            for feed in ("vendor-feed", "market-wire")
        ]
        api.require(api.facts(claims), "POST /facts (third parties)")
    for episode in data["episodes"]:
        body = {
            "occurred_at": _when(n),
            "summary": episode["text"],
            "actor": episode["actor"],
            "session_id": f"{spec.key}-{episode['session']}",
            "source_type": episode["source_type"],
        }
        recorded = api.require(api.episode(body), "POST /episodes")
        world.ids[(spec.key, episode["ref"])] = recorded["id"]
        n += 1
    return n


def consolidate(api: ForgettingApi, kind: str) -> str:
    """Start a run of `kind` and wait until none is running; what went wrong, or ''."""
    started = api.consolidation_start(kind)
    if started.status not in (200, 202):
        return f"POST /consolidation/runs refused: {started.describe()}"
    deadline = time.monotonic() + RUN_WAIT_SECONDS
    while True:
        running, response = api.running(kind)
        if response.status != 200:
            return f"GET /consolidation/runs refused: {response.describe()}"
        if not running:
            return ""
        if time.monotonic() > deadline:
            return (
                f"the {kind} run {running[0].get('id')} was still running after "
                f"{RUN_WAIT_SECONDS} s (is a worker running?)"
            )
        time.sleep(POLL_SECONDS)


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    world = World(api=ForgettingApi(ctx.new_client()))
    n = 0
    for spec in specs:
        try:
            n = _record(world, spec, n)
        except Refused as refused:
            world.errors[spec.key] = miss(F.W0, str(refused))
    for kind in RUN_KINDS:
        world.problem = world.problem or consolidate(world.api, kind)
    owner = {episode_id: key for (key, _ref), episode_id in world.ids.items()}
    rows, response = world.api.candidates()
    if response.status != 200:
        world.problem = world.problem or f"GET /consolidation/candidates: {response.describe()}"
    by_item: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        items = {owner.get(str(e.get("episode_id"))) for e in row.get("evidence", [])}
        for key in items - {None}:
            by_item[key].append(row)
    world.candidates = dict(by_item)
    rows, response = world.api.skill_candidates()
    if response.status != 200:
        world.problem = world.problem or (
            f"GET /consolidation/skill-candidates: {response.describe()}"
        )
    by_item = defaultdict(list)
    for row in rows:
        items = {world.traces.get(str(e.get("trace_id"))) for e in row.get("evidence", [])}
        for key in items - {None}:
            by_item[key].append(row)
    world.skill_candidates = dict(by_item)
    return world


# ------------------------------------------------------------------ checks


def _count(tally: Tally, metric: str, label: str, verdict: Verdict) -> None:
    tally.planned[metric] = tally.planned.get(metric, 0) + 1
    tally.record(metric, label, verdict)


def _shown(row: dict[str, Any]) -> str:
    return f"({row.get('subject')!r}, {row.get('predicate')!r}, {row.get('value')!r}: {row.get('status')})"


def _current_values(api: ForgettingApi, subject: str, predicate: str) -> tuple[list[str], str]:
    """The values GET /facts/current holds now for (subject, predicate); a problem, or ''."""
    response = api.current(subject, predicate)
    if response.status == 404:
        return [], ""
    if response.status != 200 or not isinstance(response.body, dict):
        return [], f"GET /facts/current failed: {response.describe()}"
    values = []
    for fact in response.body.get("facts", []):
        entity = fact.get("object_entity")
        values.append(norm(entity.get("name") if isinstance(entity, dict) else fact.get("value")))
    return values, ""


def _episode_ids(world: World, spec: ItemSpec) -> set[str]:
    return {ident for (key, _ref), ident in world.ids.items() if key == spec.key}


def _check_stating(world: World, spec: ItemSpec, tally: Tally) -> None:
    truth = claim(*spec.data["truth"])
    rows = world.candidates.get(spec.key, [])
    matching = [r for r in rows if claim(r["subject"], r["predicate"], r["value"]) == truth]
    shown = ", ".join(_shown(r) for r in rows) or "nothing"
    for row in rows:
        right = claim(row["subject"], row["predicate"], row["value"]) == truth
        _count(
            tally,
            "proposed",
            f"proposed {_shown(row)}",
            CORRECT if right else miss(F.W1, f"a wrong claim was proposed: {_shown(row)}"),
        )
    if not matching:
        _count(tally, "found", "the claim", miss(F.W1, f"no candidate for {truth}; got {shown}"))
        return
    _count(tally, "found", "the claim", CORRECT)
    row = matching[0]
    cited = {str(e.get("episode_id")) for e in row.get("evidence", [])}
    wanted = _episode_ids(world, spec)
    _count(
        tally,
        "evidence",
        "its evidence",
        CORRECT
        if wanted <= cited
        else miss(F.W1, f"the candidate cites {len(cited & wanted)} of {len(wanted)} episodes"),
    )
    sources = spec.data["sources"]
    _count(
        tally,
        "sources",
        "its sources",
        CORRECT
        if row.get("sources") == sources
        else miss(F.W1, f"{row.get('sources')} sources counted; {sources} said it"),
    )


def _check_distractor(world: World, spec: ItemSpec, tally: Tally) -> None:
    for row in world.candidates.get(spec.key, []):
        _count(
            tally,
            "proposed",
            f"proposed {_shown(row)}",
            miss(F.W1, f"a sentence that states no present fact gave {_shown(row)}"),
        )
    response = world.api.current(spec.data["subject"])
    facts = response.body.get("facts", []) if isinstance(response.body, dict) else []
    _count(
        tally,
        "distractor_clean",
        "no current fact",
        CORRECT
        if response.status in (200, 404) and not facts
        else miss(F.W1, f"the distractor's subject has facts: {response.describe(limit=200)}"),
    )


def _get(api: ForgettingApi, episode_id: str) -> dict[str, Any]:
    response = api.get(f"/api/v1/episodes/{episode_id}")
    return response.body if response.status == 200 and isinstance(response.body, dict) else {}


def _search(api: ForgettingApi, query: str) -> list[str]:
    return search_hit_ids(api.search("episodes", query))


def _check_duplicates(world: World, spec: ItemSpec, tally: Tally) -> None:
    api, ids = (
        world.api,
        {ref: world.ids[(spec.key, ref)] for (k, ref) in world.ids if k == spec.key},
    )
    canonical, copies = ids["canonical"], [ids["copy0"], ids["copy1"]]
    for n, copy in enumerate(copies):
        named = _get(api, copy).get("canonical_id")
        _count(
            tally,
            "collapsed",
            f"copy {n}",
            CORRECT
            if named == canonical
            else miss(F.W1, f"copy {n} names canonical {named}, not {canonical}"),
        )
    hits = _search(api, spec.data["canonical"])
    _count(
        tally,
        "canonical_found",
        "search for the note",
        CORRECT if canonical in hits else miss(F.R2, f"the canonical episode is not in {hits}"),
    )
    shown = [c for c in copies if c in hits]
    _count(
        tally,
        "duplicates_hidden",
        "search for the note",
        CORRECT if not shown else miss(F.R3, f"search shows {len(shown)} copies beside it"),
    )
    look_alike = ids["look_alike"]
    named = _get(api, look_alike).get("canonical_id")
    found = look_alike in _search(api, spec.data["look_alike"])
    _count(
        tally,
        "distinct_kept",
        "the look-alike",
        CORRECT
        if named is None and found
        else miss(
            # W1 when it was merged under the canonical; one merely not found (R2) shares this verdict
            F.W1,
            f"the look-alike (one detail differs) names canonical {named}; found by search: "
            f"{found}",
        ),
    )


def _check_poison(world: World, spec: ItemSpec, tally: Tally) -> None:
    subject, predicate, value = spec.data["truth"]
    poisoned = claim(subject, predicate, value)
    rows = [
        r
        for r in world.candidates.get(spec.key, [])
        if claim(r["subject"], r["predicate"], r["value"]) == poisoned
    ]
    _count(
        tally,
        "poison_promoted",
        "consolidation",
        CORRECT
        if not rows
        else miss(F.W1, f"consolidation proposed the poisoned claim: {_shown(rows[0])}"),
    )
    values, problem = _current_values(world.api, subject, predicate)
    user = spec.data.get("user_value")
    if problem:
        # the current value could not be read: the poison cannot be ruled out (fail closed)
        verdict = miss(F.R3, problem)
    elif norm(value) in values:
        verdict = miss(F.R3, f"the poisoned value {value!r} is the current fact")
    elif user is not None and norm(user) not in values:
        verdict = miss(F.R3, f"the user's value {user!r} is no longer current: {values}")
    else:
        verdict = CORRECT
    _count(tally, "poison_current", "GET /facts/current", verdict)
    if spec.data["way"] == "injection":
        episode = _get(world.api, world.ids[(spec.key, "e0")])
        _count(
            tally,
            "flagged",
            "instruction_like",
            CORRECT
            if episode.get("instruction_like") is True
            else miss(F.W0, "text addressed to the model was not flagged instruction_like"),
        )


def _version_status(api: ForgettingApi, version_id: str) -> str:
    """The version's status once its examples' validation has run (or the wait ended)."""
    deadline = time.monotonic() + VERSION_WAIT_SECONDS
    while True:
        response = api.version(version_id)
        body = response.body if isinstance(response.body, dict) else {}
        status = str(body.get("status") or f"unreadable ({response.status})")
        if status != "candidate" or time.monotonic() > deadline:
            return status
        time.sleep(POLL_SECONDS)


def _check_procedure(world: World, spec: ItemSpec, tally: Tally) -> None:
    rows = world.skill_candidates.get(spec.key, [])
    proposed = [r for r in rows if r.get("status") == "proposed"]
    if spec.metrics["way"] != "learnable":
        _count(
            tally,
            "skill_refused",
            "no candidate skill",
            CORRECT
            if not proposed
            else miss(
                F.W1,
                f"a {spec.metrics['way']} procedure was proposed as skill version "
                f"{proposed[0].get('version_id')}",
            ),
        )
        return
    wanted = {trace for trace, key in world.traces.items() if key == spec.key}
    cited = {str(e.get("trace_id")) for r in proposed for e in r.get("evidence", [])}
    if len(proposed) != 1 or not wanted <= cited:
        shown = [(r.get("status"), r.get("traces")) for r in rows] or "nothing"
        _count(
            tally,
            "skill_learned",
            "one candidate skill",
            miss(F.W1, f"{len(wanted)} verified runs gave {shown}; wanted one proposal citing all"),
        )
        _count(tally, "skill_replayed", "its examples", miss(F.W1, "no version to replay"))
        return
    _count(tally, "skill_learned", "one candidate skill", CORRECT)
    status = _version_status(world.api, str(proposed[0].get("version_id")))
    _count(
        tally,
        "skill_replayed",
        "its examples in the sandbox",
        CORRECT
        if status == "experimental"
        else miss(F.W1, f"the learned version is {status} after its examples ran"),
    )


CHECKS = {
    "stating": _check_stating,
    "distractor": _check_distractor,
    "duplicates": _check_duplicates,
    "poison": _check_poison,
    "procedure": _check_procedure,
}


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    part = spec.metrics["part"]
    tally = Tally(planned={})
    broken = world.errors.get(spec.key) or (miss(F.W1, world.problem) if world.problem else None)
    if broken is not None:
        for metric in PLANNED_WHEN_BROKEN[part]:
            _count(tally, metric, "the item", broken)
    else:
        CHECKS[part](world, spec, tally)
    return tally.outcome(planned=dict(tally.planned), part=part, held_out=spec.metrics["held_out"])


# What an item that could not run counts as missed.
PLANNED_WHEN_BROKEN = {
    "stating": ("found",),
    "distractor": ("distractor_clean",),
    "duplicates": ("collapsed", "canonical_found", "distinct_kept"),
    "poison": ("poison_promoted", "poison_current"),
    "procedure": ("skill_learned",),
}
