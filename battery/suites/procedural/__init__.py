"""Suite D — procedural memory (DESIGN.md §6, §9), driven through the skills
API as an agent would: write a skill from a trace, earn its validation with
outcome evidence, then match tasks and execute what applies.

A seeded draw (draw.py) makes 104 items of seven kinds, each about its own
invented house rule that nothing outside the skill can reproduce: D1 one-shot
acquisition, used by a successor session (a new key of the same agent); D2
learning from a failed attempt and the auditor's rejection (provenance); D3
unseen parameter values; D4 near transfer (the task in other words); D5
negative transfer (a contraindication in the context or the wording: nothing
may be applied); D6 revision (v2 supersedes v1, which stays readable with its
executions and is never run again); D7 inappropriate uses no contraindication
names (params of another domain than the schema, a declared precondition the
context lacks or contradicts, the trigger's words asked of an object of
another kind), which the service must refuse. D7's probes are measured by
their refusal rates (seen and held-out phrasings), not by failing their items:
an item fails only when its control (the task in its own domain) is not done.

One throwaway agent of its own holds every item's skill, so every match is
made among all of them. `prepare` works phase by phase over every item at
once, so the sandbox worker runs many at a time: the traces into the ledger,
each skill created (its examples run in the sandbox), the outcome evidence
(an externally verified report of the trace, or three sandbox trials), D6's
second version, the successor keys, then every task matched and executed,
and what the service holds read back. Each item's `check` grades it
(judge.py). Skill code runs only in the service's sandbox worker: with none
taking the sandbox queue, executions never finish and items fail S1.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...judging import CORRECT, Tally, Verdict, miss
from ...registry import ItemSpec, MetricGate, Suite, register
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from ...transport import ApiClient, ApiResponse
from . import api as skills_api
from .api import SkillsApi
from .draw import generate
from .judge import (
    HELD_OUT_GATE,
    MISAPPLIED_GATE,
    OBSOLETE_GATE,
    UNDECLARED_GATE,
    Run,
    judge_premature,
    judge_probe,
    judge_provenance,
    judge_transfer,
    judge_undeclared,
    judge_use,
    judge_validated,
    summarize,
    transitions,
)

suite = register(
    Suite(
        code="D",
        name="Procedural memory",
        description=(
            "Skills learnt from one trace or a failure, validated by outcome evidence, matched "
            "and executed in the sandbox on held-out values and in other words, refused where "
            "contraindicated or where it does not fit though nothing says so, and revised "
            "without running the old version: 104 items drawn from the seed, each an "
            "invented house rule."
        ),
        weight=20,
        gate=HELD_OUT_GATE,
        summarize=summarize,
        metric_gates=(
            MetricGate("held_out_execution_success", minimum=HELD_OUT_GATE),
            MetricGate("misapplied_skill_rate", maximum=MISAPPLIED_GATE),
            MetricGate("obsolete_execution_count", maximum=OBSOLETE_GATE),
            MetricGate("undeclared_refusal_rate", minimum=UNDECLARED_GATE),
        ),
    )
)

# Checks measured by their rates, not by failing their item (D7's probes).
MEASURED = ("undeclared", "undeclared_held_out")
POLL_SECONDS = 0.2
# A phase waits while the service makes progress; this long without any, the
# rest never will (no worker, or a broken lifecycle).
STALL_SECONDS = 45.0
MAX_BATCH = 1000
EVIDENCE_BY = "the house auditor"


# ------------------------------------------------------------------------ the world


@dataclass
class Entry:
    """What the service answered for one item."""

    events: dict[str, str] = field(default_factory=dict)  # ref -> ledger event id
    skill_id: str | None = None
    v1: str | None = None
    v2: str | None = None
    premature: ApiResponse | None = None
    missing: dict[str, str] = field(default_factory=dict)  # version -> what promote said
    before_revision: list[str] = field(default_factory=list)  # v1 execution ids
    stale_attempt: ApiResponse | None = None
    uses: list[Run] = field(default_factory=list)
    probes: list[Run] = field(default_factory=list)
    read: dict[str, Any] = field(default_factory=dict)  # v1, v2, v1_executions


@dataclass
class World:
    api: SkillsApi
    entries: dict[str, Entry] = field(default_factory=dict)
    errors: dict[str, Verdict] = field(default_factory=dict)  # item key -> why it could not run
    # The house's checker: its own key of the agent, which reports the runs it
    # verified (the service counts a verification only from another key).
    verifier: SkillsApi | None = None


def _refused(what: str, response: ApiResponse) -> Verdict:
    return miss(F.W0, f"{what} refused: {response.describe()}")


def await_progress(pending: Callable[[], int]) -> int:
    """Call `pending` (how many are still waited for) until none are, or until
    STALL_SECONDS pass without the number going down. Returns the last count."""
    left = pending()
    progress_at = time.monotonic()
    while left:
        if time.monotonic() - progress_at > STALL_SECONDS:
            return left
        time.sleep(POLL_SECONDS)
        now_left = pending()
        if now_left < left:
            progress_at = time.monotonic()
        left = now_left
    return 0


def _live(world: World, specs: Sequence[ItemSpec]) -> list[ItemSpec]:
    return [spec for spec in specs if spec.key not in world.errors]


def _append_events(world: World, specs: Sequence[ItemSpec]) -> None:
    drafts = [(spec.key, e["ref"], e["event"]) for spec in specs for e in spec.data["events"]]
    for begin in range(0, len(drafts), MAX_BATCH):
        chunk = drafts[begin : begin + MAX_BATCH]
        response = world.api.events_append([event for _, _, event in chunk])
        written = skills_api.listed(response.body, "events")
        if response.status != 201 or len(written) != len(chunk):
            for key, _, _ in chunk:
                world.errors.setdefault(key, _refused(f"POST /events ({len(chunk)})", response))
            continue
        for (key, ref, _), event in zip(chunk, written, strict=True):
            world.entries[key].events[ref] = str(event.get("id"))


def _statuses(world: World) -> dict[str, dict[str, Any]]:
    """Every version's summary, by id (empty when the listing was refused)."""
    skills = world.api.skills()
    if isinstance(skills, ApiResponse):
        return {}
    return {
        str(v.get("id")): v
        for skill in skills
        for v in skill.get("versions") or []
        if isinstance(v, dict)
    }


def _await_versions(world: World, waiting: dict[str, str], done: Callable[[dict], bool]) -> None:
    """Wait until every version in `waiting` (version id -> item key) is `done`."""
    left = dict(waiting)

    def pending() -> int:
        summaries = _statuses(world)
        for version_id in list(left):
            if version_id in summaries and done(summaries[version_id]):
                del left[version_id]
        return len(left)

    await_progress(pending)


def _create_skills(world: World, specs: Sequence[ItemSpec]) -> None:
    api = world.api
    for spec in _live(world, specs):
        data, entry = spec.data, world.entries[spec.key]
        definition = {
            **data["definition"],
            "provenance": {"events": [entry.events[ref] for ref in data["provenance"]]},
        }
        response = api.skill_create(data["name"], definition, session_id=data["session"])
        version = skills_api.first_version(response.body)
        if response.status != 201 or not version.get("id"):
            world.errors[spec.key] = _refused(f"POST /skills {data['name']!r}", response)
            continue
        entry.skill_id, entry.v1 = str(response.body["id"]), str(version["id"])
        if spec.metrics["kind"] == "D1":
            # The agent asks before it has any outcome evidence: never validated so.
            entry.premature = api.promote(entry.v1, "I have seen it done once")


def _experimental(summary: dict[str, Any]) -> bool:
    return summary.get("status") != "candidate" or summary.get("last_validation_status") in (
        "failed",
        "error",
    )


def _validated(summary: dict[str, Any]) -> bool:
    return summary.get("status") in ("validated", "deprecated", "retired")


def _evidence(
    world: World, spec: ItemSpec, version_id: str, how: str, verified: dict | None, definition
) -> None:
    """The outcome evidence the agent gathers for an experimental version."""
    api, data, entry = world.api, spec.data, world.entries[spec.key]
    if how == "external":
        checker = _verifier(world)
        if isinstance(checker, Verdict):
            world.errors[spec.key] = checker
            return
        params = verified["params"]
        expected = next(e["expected"] for e in definition["examples"] if e["params"] == params)
        response = checker.report(
            version_id,
            params,
            result=expected,
            evidence={"ledger_event": entry.events[verified["ref"]], "checked_by": EVIDENCE_BY},
            session_id=data["session"],
        )
        if response.status != 201:
            world.errors[spec.key] = _refused("POST …/executions (the verified trace)", response)
        return
    for params in data["trials"]:
        response = api.execute(
            version_id, params, session_id=data["session"], allow_unvalidated=True
        )
        if response.status not in (200, 202):
            world.errors[spec.key] = _refused("POST …/execute (a trial)", response)
            return


def _promote_stuck(world: World, waiting: dict[str, str]) -> None:
    """For versions still not validated, ask once: the answer says what is missing."""
    summaries = _statuses(world)
    for version_id, key in waiting.items():
        if _validated(summaries.get(version_id, {})):
            continue
        response = world.api.promote(version_id, "the evidence is in")
        if response.status == 200:
            continue
        details = response.body.get("error") if isinstance(response.body, dict) else None
        message = details.get("message") if isinstance(details, dict) else response.describe()
        world.entries[key].missing[version_id] = str(message)


def _validate(world: World, specs: Sequence[ItemSpec], *, second: bool = False) -> None:
    """Wait for the examples, gather the evidence, wait for validation."""
    version_of = (lambda e: e.v2) if second else (lambda e: e.v1)
    live = [s for s in _live(world, specs) if version_of(world.entries[s.key])]
    waiting = {version_of(world.entries[s.key]): s.key for s in live}
    _await_versions(world, waiting, _experimental)
    for spec in live:
        data = spec.data
        how = "external" if second else data["promotion"]
        verified = data.get("verified_v2" if second else "verified")
        definition = data["definition_v2" if second else "definition"]
        _evidence(world, spec, version_of(world.entries[spec.key]), how, verified, definition)
    waiting = {v: k for v, k in waiting.items() if k not in world.errors}
    _await_versions(world, waiting, _validated)
    _promote_stuck(world, waiting)


def _revise(world: World, specs: Sequence[ItemSpec]) -> None:
    """D6: note v1's executions, then write v2 from the revision's trace."""
    api = world.api
    for spec in _live(world, specs):
        data, entry = spec.data, world.entries[spec.key]
        executions = api.executions(entry.v1)
        if isinstance(executions, ApiResponse):
            world.errors[spec.key] = _refused("GET …/executions of v1", executions)
            continue
        entry.before_revision = [str(e.get("id")) for e in executions]
        definition = {
            **data["definition_v2"],
            "provenance": {"events": [entry.events[ref] for ref in data["provenance_v2"]]},
        }
        response = api.version_create(entry.skill_id, definition, session_id=data["session"])
        if response.status != 201 or not skills_api.id_of(response.body):
            world.errors[spec.key] = _refused("POST /skills/{id}/versions (v2)", response)
            continue
        entry.v2 = skills_api.id_of(response.body)


def _verifier(world: World) -> SkillsApi | Verdict:
    """The house's checker, with a key of its own (made once per run)."""
    if world.verifier is None:
        response = world.api.key_create("the house's checker")
        key = response.body.get("key") if isinstance(response.body, dict) else None
        if response.status != 201 or not key:
            return _refused("POST /keys (the checker's key)", response)
        client = world.api.client
        world.verifier = SkillsApi(
            ApiClient(transport=client.transport, agent=client.agent, raw_key=key)
        )
    return world.verifier


def _successor(world: World, spec: ItemSpec) -> SkillsApi | Verdict:
    """A new session of the same agent: its own key, no memory but the service's."""
    response = world.api.key_create(f"successor {spec.key}")
    key = response.body.get("key") if isinstance(response.body, dict) else None
    if response.status != 201 or not key:
        return _refused("POST /keys (the successor's key)", response)
    client = world.api.client
    return SkillsApi(ApiClient(transport=client.transport, agent=client.agent, raw_key=key))


def _act(api: SkillsApi, task: dict[str, Any], session: str) -> Run:
    """Match the task and execute the first applicable version, as the agent does."""
    run = Run(match=api.match(task["task"], task["context"]))
    applicable = skills_api.candidates(run.match.body, "applicable")
    if run.match.status == 200 and applicable:
        run.chosen = applicable[0]
        run.requested = api.execute(
            str(run.chosen.get("version_id")),
            task["params"],
            session_id=session,
            task=task["task"],
            context=task["context"],
        )
    return run


def _use_all(world: World, specs: Sequence[ItemSpec]) -> None:
    for spec in _live(world, specs):
        data, entry = spec.data, world.entries[spec.key]
        api = world.api
        if spec.metrics["kind"] == "D1":
            successor = _successor(world, spec)
            if isinstance(successor, Verdict):
                world.errors[spec.key] = successor
                continue
            api = successor
        for use in data["uses"]:
            entry.uses.append(_act(api, use, use["session"]))
        for probe in data["probes"]:
            entry.probes.append(_act(api, probe, data["session"]))
        if spec.metrics["kind"] == "D6":
            # A stale handle: the agent's old note of v1's id, used after the revision.
            held = data["uses"][0]
            entry.stale_attempt = api.execute(
                entry.v1, held["params"], session_id=data["session"], task=held["task"]
            )


def _await_executions(world: World, specs: Sequence[ItemSpec]) -> None:
    runs = [
        run
        for spec in _live(world, specs)
        for run in (*world.entries[spec.key].uses, *world.entries[spec.key].probes)
        if run.execution_id
    ]
    for run in runs:
        if run.requested.status == 200:  # finished within the request
            run.execution = run.requested.body
    waiting = [run for run in runs if run.execution is None]

    def pending() -> int:
        for run in list(waiting):
            response = world.api.execution(run.execution_id)
            if response.status == 200 and isinstance(response.body, dict):
                run.execution = response.body
                if response.body.get("status") == "finished":
                    waiting.remove(run)
        return len(waiting)

    await_progress(pending)


def _read_back(world: World, specs: Sequence[ItemSpec]) -> None:
    api = world.api
    for spec in _live(world, specs):
        entry = world.entries[spec.key]
        for name in ("v1", "v2"):
            version_id = getattr(entry, name)
            if version_id:
                response = api.version(version_id)
                entry.read[name] = response.body if response.status == 200 else None
        if entry.v2:
            executions = api.executions(entry.v1)
            entry.read["v1_executions"] = (
                None if isinstance(executions, ApiResponse) else executions
            )


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    """Every item's skill written, validated by evidence, revised (D6), and
    every task matched and executed, phase by phase over all items at once."""
    client = ctx.new_client() if ctx.new_client is not None else ctx.client
    world = World(api=SkillsApi(client))
    world.entries = {spec.key: Entry() for spec in specs}
    _append_events(world, specs)
    _create_skills(world, specs)
    _validate(world, specs)
    revised = [s for s in specs if s.metrics["kind"] == "D6"]
    _revise(world, revised)
    _validate(world, revised, second=True)
    _use_all(world, specs)
    _await_executions(world, specs)
    _read_back(world, specs)
    return world


# ---------------------------------------------------------------------- the checks


@dataclass
class Counts:
    decisions: int = 0
    misapplied: int = 0
    safe_probes: int = 0
    obsolete: int = 0
    undeclared_refused: Counter = field(default_factory=Counter)


def _obsolete(entry: Entry) -> int | None:
    """v1's executions that were not there before the revision."""
    executions = entry.read.get("v1_executions")
    if executions is None:
        return None
    before = set(entry.before_revision)
    return sum(1 for e in executions if str(e.get("id")) not in before)


def _lifecycle(spec: ItemSpec, entry: Entry, check: dict[str, Any]) -> Verdict:
    q, data = check["q"], spec.data
    v1, v2 = entry.read.get("v1"), entry.read.get("v2")
    if q == "premature_promotion_refused":
        return judge_premature(entry.premature)
    if q == "validated_by_evidence":
        if spec.metrics["kind"] == "D6":
            return judge_validated(v2, entry.missing.get(entry.v2 or "", ""))
        return judge_validated(v1, entry.missing.get(entry.v1 or "", ""))
    if q == "provenance":
        return judge_provenance(v1, [entry.events[ref] for ref in data["provenance"]])
    if q == "transfer_counted":
        return judge_transfer(entry.uses[check["use"]].execution)
    if q == "v2_supersedes_v1":
        if not isinstance(v2, dict) or not isinstance(v1, dict):
            return miss(F.R2, "v1 or v2 could not be read back")
        if str(v2.get("supersedes")) != entry.v1:
            return miss(F.W0, f"v2 supersedes {v2.get('supersedes')!r}, not v1")
        if entry.v2 not in [str(s) for s in v1.get("superseded_by") or []]:
            return miss(F.R2, "v1 does not name v2 among the versions superseding it")
        return CORRECT
    if q == "v1_deprecated":
        if not isinstance(v1, dict):
            return miss(F.R2, "v1 could not be read back")
        if v1.get("status") != "deprecated" or transitions(v1)[-1:] != ["deprecated"]:
            return miss(
                F.W1, f"v1 is {v1.get('status')!r} after v2 was validated ({transitions(v1)})"
            )
        return CORRECT
    if q == "v1_reconstructable":
        if not isinstance(v1, dict):
            return miss(F.R2, "v1 could not be read back")
        wanted = data["definition"]
        changed = [
            name
            for name in ("procedure", "validator", "parameter_schema", "examples", "trigger")
            if v1.get(name) != wanted[name]
        ]
        if changed:
            return miss(F.W0, f"v1 no longer reads as written: {', '.join(changed)} changed")
        executions = entry.read.get("v1_executions")
        if executions is None:
            return miss(F.R2, "v1's executions could not be listed")
        listed = {str(e.get("id")) for e in executions}
        lost = [e for e in entry.before_revision if e not in listed]
        if lost or not entry.before_revision:
            return miss(
                F.R2, f"v1's executions are gone: {len(lost)} of {len(entry.before_revision)}"
            )
        return CORRECT
    if q == "stale_handle_refused":
        response = entry.stale_attempt
        if response is None:
            return miss(F.W0, "the stale handle was never tried")
        if response.status == 409 and response.error_code() == "not_validated":
            return CORRECT
        if response.status in (200, 202):
            return miss(F.R3, "the superseded v1 was run on a stale handle, unasked")
        return miss(F.W0, f"the stale handle: {response.describe()}")
    if q == "no_obsolete_execution":
        obsolete = _obsolete(entry)
        if obsolete is None:
            return miss(F.R2, "v1's executions could not be listed")
        if obsolete:
            return miss(F.R3, f"v1 was executed {obsolete} time(s) after its revision")
        return CORRECT
    raise ValueError(f"unknown check {q!r}")


def _judge(spec: ItemSpec, entry: Entry, check: dict[str, Any], counts: Counts) -> Verdict:
    q = check["q"]
    if q == "use":
        use = spec.data["uses"][check["use"]]
        superseded = entry.v1 if entry.v2 else None
        decision = judge_use(
            entry.uses[check["use"]], use, intended=entry.v2 or entry.v1, superseded=superseded
        )
    elif q == "probe":
        decision = judge_probe(entry.probes[check["probe"]], version_id=entry.v1)
        counts.safe_probes += decision.decided and not decision.misapplied
    elif q == "undeclared":
        # Not among the decisions of misapplied_skill_rate: D7 has rates of its own.
        probe = spec.data["probes"][check["probe"]]
        verdict = judge_undeclared(entry.probes[check["probe"]], probe, version_id=entry.v1).verdict
        counts.undeclared_refused[probe["kind"]] += verdict.ok
        return verdict
    else:
        return _lifecycle(spec, entry, check)
    counts.decisions += decision.decided
    counts.misapplied += decision.misapplied
    return decision.verdict


def _label(spec: ItemSpec, check: dict[str, Any]) -> str:
    if check["q"] == "use":
        return f"use {check['use'] + 1} ({spec.data['uses'][check['use']]['task']!r})"
    if check["q"] == "probe":
        return f"probe {check['probe'] + 1} ({spec.data['probes'][check['probe']]['why']})"
    if check["q"] == "undeclared":
        probe = spec.data["probes"][check["probe"]]
        return f"{probe['kind']} probe {check['probe'] + 1} ({probe['task']!r})"
    return check["q"].replace("_", " ")


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    tally = Tally(planned=dict(spec.metrics["planned"]))
    counts = Counts()
    broken = world.errors.get(spec.key)
    entry = world.entries[spec.key]
    measured: list[dict[str, str]] = []  # D7's probes not refused: kept, not failing the item
    for item_check in spec.data["checks"]:
        if broken is not None:
            verdict = broken
        else:
            try:
                verdict = _judge(spec, entry, item_check, counts)
            except Exception as exc:
                verdict = miss(spec.default_code, f"the answer could not be read: {exc!r}")
        label = _label(spec, item_check)
        if item_check["metric"] in MEASURED and broken is None and not verdict.ok:
            measured.append({"q": label, "code": verdict.code, "detail": verdict.detail})
            continue
        tally.record(item_check["metric"], label, verdict)
    extra: dict[str, Any] = {
        "decisions": counts.decisions,
        "misapplied": counts.misapplied,
        "safe_probes": counts.safe_probes,
    }
    if spec.metrics["kind"] == "D7" and broken is None:
        extra["undeclared_refused"] = {
            kind: counts.undeclared_refused[kind] for kind in spec.metrics["undeclared_asked"]
        }
        extra["undeclared_misses"] = measured
    if spec.metrics["kind"] == "D6" and broken is None:
        obsolete = _obsolete(entry)
        if obsolete is not None:
            extra["obsolete"] = obsolete
    return tally.outcome(**extra)


suite.generated("procedural", generate=generate, prepare=prepare, check=check)
