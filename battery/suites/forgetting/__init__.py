"""Suite F — forgetting and contamination (DESIGN.md §8, §9), driven through the
API as an agent and its operator would.

F1 erasure and F2 no regeneration, over 24 drawn items (draw.py): `prepare`
writes every item's person and twin (facts, episodes, a document, a working
state and an intention quoting an episode, a recall), plus a copy of each
person's episode in a second agent; it then erases each item's person the
item's way (POST /erasure) and, once all are erased, tries every path that
could bring erased data back — a rebuild of every projection, a re-embed, a
retention sweep, a consolidation run of each kind, the retry of the original
write under its Idempotency-Key. Each item's `check` then searches every read
path's answer for the erased tokens (residue, regenerated: R3) and looks for
what must have stayed (collateral: R2).

F3–F6 (consolidation quality, duplicates, poisoning, candidate skills from
traces) run in an agent of their own: consolidation.py, drawn by
consolidation_draw.py and skill_draw.py. Grading in judge.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.core.management import call_command

from ...judging import CORRECT, Tally, Verdict, miss
from ...registry import ItemFailure, ItemSpec, MetricGate, Suite, register
from ...runner import ItemContext
from ...taxonomy import FailureCode as F
from ...transport import ApiResponse
from . import consolidation, consolidation_draw, skill_draw
from .api import ForgettingApi, Refused, joined, shown_residue
from .draw import GONE, KINDS, generate
from .judge import summarize

# The held-out phrasings of F3 count in the pass rate but are not gated: the
# metric gates (zero residue, zero poisoned, precision, recall) are the bar.
PASS_RATE_GATE = 0.75

suite = register(
    Suite(
        code="F",
        name="Forgetting and contamination",
        description=(
            "Erasure that reaches every read path and every copy and takes nothing else "
            "(F1), and that no rebuild, re-embed, consolidation or retried write brings back "
            "(F2): 24 people drawn from the seed, each with a look-alike twin that must stay. "
            "Consolidation that proposes what episodes state, with its evidence, and not what "
            "they do not (F3); near-duplicates collapsed under a canonical episode that is "
            "still found (F4); poisoned and instruction-like memories never promoted nor "
            "presented as current (F5); verified, repeated procedures proposed as candidate "
            "skills that replay in the sandbox, and nothing learned from unverified, failed, "
            "low-trust or instruction-like traces (F6)."
        ),
        weight=10,
        gate=PASS_RATE_GATE,
        summarize=summarize,
        metric_gates=(
            MetricGate("erasure_residue", maximum=0),
            MetricGate("regenerated", maximum=0),
            MetricGate("collateral_loss", maximum=0),
            MetricGate("receipts_clean", minimum=1.0),
            MetricGate("consolidation_precision", minimum=0.95),
            MetricGate("consolidation_recall", minimum=0.80),
            MetricGate("distractors_promoted", maximum=0),
            MetricGate("canonical_found", minimum=1.0),
            MetricGate("duplicates_shown", maximum=0),
            MetricGate("look_alikes_merged", maximum=0),
            MetricGate("poisoned_promoted", maximum=0),
            MetricGate("poisoned_current", maximum=0),
            MetricGate("skills_learned", minimum=0.95),
            MetricGate("skills_misproposed", maximum=0),
        ),
    )
)

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@dataclass
class Written:
    """What the service answered for one person's memories."""

    episode_id: str = ""
    episode_event_id: str = ""
    episode_body: dict[str, Any] = field(default_factory=dict)
    episode_key: str = ""
    note_id: str = ""
    source_id: str = ""
    thread_id: str = ""
    intention_id: str = ""


@dataclass
class World:
    api: ForgettingApi
    other: ForgettingApi
    people: dict[tuple[str, str], Written] = field(default_factory=dict)  # (item, role)
    other_copies: dict[str, str] = field(default_factory=dict)  # item -> episode id there
    receipts: dict[str, ApiResponse] = field(default_factory=dict)
    retries: dict[str, ApiResponse] = field(default_factory=dict)
    errors: dict[str, Verdict] = field(default_factory=dict)


def _write_person(
    api: ForgettingApi, key: str, role: str, person: dict, actor: str, n: int
) -> Written:
    """Every kind of memory of one person; raises _Refused naming the write refused."""
    written = Written()
    name, tokens = person["name"], person["tokens"]
    api.require(
        api.facts(
            [
                {
                    "subject": name,
                    "predicate": "lives_in",
                    "value": person["homes"][0],
                    "valid_from": "2024-01-01T00:00:00Z",
                    "actor": actor,
                },
                {
                    "subject": name,
                    "predicate": "lives_in",
                    "value": person["homes"][1],
                    "valid_from": "2025-01-01T00:00:00Z",
                    "actor": actor,
                },
                {
                    "subject": name,
                    "predicate": "works_at",
                    "object_entity": person["employer"],
                    "actor": actor,
                },
                {
                    "subject": name,
                    "predicate": "badge_code",
                    "value": tokens["fact"],
                    "actor": actor,
                },
            ]
        ),
        "POST /facts",
    )
    written.episode_key = f"f1-{key}-{role}"
    written.episode_body = {
        "occurred_at": START.replace(day=2 + n % 20).isoformat().replace("+00:00", "Z"),
        "summary": person["episode"],
        "actor": actor,
        "session_id": f"{key}-{role}",
        "entities": [name],
    }
    episode = api.require(
        api.episode(written.episode_body, idempotency_key=written.episode_key), "POST /episodes"
    )
    written.episode_id, written.episode_event_id = episode["id"], episode["raw_event_id"]
    note = api.require(
        api.episode(
            {
                **written.episode_body,
                "summary": person["note"],
                "occurred_at": written.episode_body["occurred_at"].replace("T09", "T11"),
            }
        ),
        "POST /episodes",
    )
    written.note_id = note["id"]
    document = api.require(
        api.ingest(f"Personnel note {name}", person["document"], actor=actor),
        "POST /sources/ingest",
    )
    written.source_id = document["source"]["id"]
    thread = api.require(api.thread(f"f1-{key}-{role}"), "POST /threads")
    written.thread_id = thread["id"]
    api.require(
        api.state(
            written.thread_id,
            {"goal": f"close out {name}'s change", "last_observation": person["episode"]},
        ),
        "PUT /threads/{id}/state",
    )
    intention = api.require(
        api.intention(f"Tell the owner: {person['episode']}"), "POST /intentions"
    )
    written.intention_id = intention["id"]
    api.require(
        api.recall(
            f"What did {name} do under change ticket {tokens['episode']}?", route="what_happened"
        ),
        "POST /recall",
    )
    return written


def _selector(mode: str, spec: ItemSpec, written: Written) -> dict[str, Any]:
    person = spec.data["person"]
    if mode == "subject":
        return {"subject": person["name"]}
    if mode == "episode_events":
        return {"event_ids": [written.episode_event_id]}
    if mode == "document":
        return {"source_id": written.source_id}
    return {"actor": spec.data["actor"]}


def prepare(ctx: ItemContext, specs: Sequence[ItemSpec]) -> World:
    world = World(api=ForgettingApi(ctx.client), other=ForgettingApi(ctx.new_client()))
    for n, spec in enumerate(specs):
        try:
            for role in ("person", "twin"):
                actor = spec.data["actor"] if role == "person" else f"twin-{spec.data['actor']}"
                world.people[(spec.key, role)] = _write_person(
                    world.api, spec.key, role, spec.data[role], actor, n
                )
            copy = world.other.require(
                world.other.episode(
                    {**world.people[(spec.key, "person")].episode_body, "actor": "someone-else"}
                ),
                "POST /episodes (second agent)",
            )
            world.other_copies[spec.key] = copy["id"]
        except Refused as refused:
            world.errors[spec.key] = miss(F.W0, str(refused))
    for spec in specs:
        if spec.key in world.errors:
            continue
        written = world.people[(spec.key, "person")]
        world.receipts[spec.key] = world.api.erase(
            _selector(spec.data["mode"], spec, written), reason=f"battery {spec.key}"
        )
    # F2: everything that could bring erased data back.
    agent = ctx.client.agent
    from ledger import projections

    for name in projections.names():
        call_command("rebuild_projection", name, agent=str(agent.pk))
    call_command("embed_backfill", agent=str(agent.pk), reembed_stale=True, no_progress=True)
    call_command("retention_sweep", agent=str(agent.pk), no_progress=True)
    for kind in consolidation.RUN_KINDS:
        if problem := consolidation.consolidate(world.api, kind):
            raise ItemFailure(F.W1, f"consolidation after the erasures: {problem}")
    for spec in specs:
        written = world.people.get((spec.key, "person"))
        if written is not None and spec.key not in world.errors:
            world.retries[spec.key] = world.api.episode(
                written.episode_body, idempotency_key=written.episode_key
            )
    return world


# ------------------------------------------------------------------ checks


def _absent(api: ForgettingApi, token: str, response: ApiResponse, where: str) -> Verdict:
    if response.status >= 500:
        # the read path failed, so residue cannot be ruled out: counted as residue (fail closed)
        return miss(F.R3, f"{where} failed: {response.describe()}")
    if token in response.text:
        return miss(F.R3, f"{where} still shows the erased token {token}")
    return CORRECT


def _present(token: str, response: ApiResponse, where: str) -> Verdict:
    if response.status != 200 or token not in response.text:
        return miss(
            F.R2, f"{where} lost {token}, which was not erased: {response.describe(limit=200)}"
        )
    return CORRECT


def _kind_path(api: ForgettingApi, kind: str, person: dict, written: Written) -> ApiResponse:
    """The read path that shows a kind of memory of a person."""
    if kind == "fact":
        return api.current(person["name"], "badge_code")
    if kind == "episode":
        return api.get(f"/api/v1/episodes/{written.episode_id}")
    if kind == "note":
        return api.get(f"/api/v1/episodes/{written.note_id}")
    return api.get(f"/api/v1/sources/{written.source_id}/chunks")


def _quotes(api: ForgettingApi, written: Written) -> ApiResponse:
    """The working state and the intention that quote the episode, as one answer."""
    state = api.get(f"/api/v1/threads/{written.thread_id}/state")
    intention = api.get(f"/api/v1/intentions/{written.intention_id}")
    return joined(state, intention)


def check(ctx: ItemContext, spec: ItemSpec, world: World) -> dict[str, Any]:
    tally = Tally(planned=dict(spec.metrics["planned"]))
    broken = world.errors.get(spec.key)
    mode, person, twin = spec.data["mode"], spec.data["person"], spec.data["twin"]
    gone = GONE[mode]
    if broken is not None:
        for metric, count in spec.metrics["planned"].items():
            for i in range(count):
                tally.record(metric, f"{metric} {i}", broken)
        return tally.outcome(mode=mode)
    api = world.api
    own, theirs = world.people[(spec.key, "person")], world.people[(spec.key, "twin")]

    receipt = world.receipts[spec.key]
    body = receipt.body if isinstance(receipt.body, dict) else {}
    if receipt.status != 201:
        tally.record(
            "receipt", "erasure", miss(F.W0, f"POST /erasure refused: {receipt.describe()}")
        )
    elif (body.get("status"), body.get("residue_found")) != ("completed", 0):
        tally.record(
            "receipt", "erasure", miss(F.R3, f"the receipt's residue check: {shown_residue(body)}")
        )
    else:
        tally.record("receipt", "erasure", CORRECT)

    for kind in sorted(gone):
        token = person["tokens"][kind]
        paths = {
            "events": api.everything("/api/v1/events"),
            "episodes": api.everything("/api/v1/episodes"),
            "episode search": api.search("episodes", token),
            "source search": api.search("sources", token),
            "recall": api.recall(f"change ticket {token}"),
            kind: _quotes(api, own) if kind == "episode" else _kind_path(api, kind, person, own),
        }
        for where, response in paths.items():
            tally.record(
                "residue", f"{kind} {token} in {where}", _absent(api, token, response, where)
            )
        # The rebuilds, re-embed and sweep ran in prepare, after every erasure:
        # these read the state they left.
        for where, response in {
            "the ledger after the rebuilds": api.everything("/api/v1/events"),
            "search after the rebuilds": api.search(
                "sources" if kind == "document" else "episodes", token
            ),
            "its read path after the rebuilds": _kind_path(api, kind, person, own),
        }.items():
            tally.record(
                "regenerated", f"{kind} {token}: {where}", _absent(api, token, response, where)
            )

    twin_facts_right = 0
    for kind in KINDS:
        token = twin["tokens"][kind]
        shown = _kind_path(api, kind, twin, theirs)
        if kind == "fact":
            found, where = api.chain(twin["name"], "badge_code"), "the chain"
        else:
            found = api.search("sources" if kind == "document" else "episodes", token)
            where = "search"
        for label, verdict in (
            (f"twin's {kind}", _present(token, shown, "its read path")),
            (f"twin's {kind} found", _present(token, found, where)),
        ):
            tally.record("collateral", label, verdict)
            twin_facts_right += kind == "fact" and verdict.ok
    for kind in KINDS:
        if kind not in gone:
            token = person["tokens"][kind]
            shown = _kind_path(api, kind, person, own)
            tally.record(
                "collateral", f"own {kind} (not asked)", _present(token, shown, "its read path")
            )
    copy = world.other.get(f"/api/v1/episodes/{world.other_copies[spec.key]}")
    tally.record(
        "collateral",
        "another agent's copy",
        _present(person["tokens"]["episode"], copy, "the other agent"),
    )

    if "episode" in gone:
        retry = world.retries[spec.key]
        tally.record(
            "regenerated",
            "the original write retried",
            CORRECT
            if retry.status == 410
            else miss(F.R3, f"a retry of the erased write answered {retry.describe(limit=200)}"),
        )
    return tally.outcome(
        mode=mode, held_out=spec.metrics["held_out"], twin_facts_right=twin_facts_right
    )


suite.generated("forgetting", generate=generate, prepare=prepare, check=check)


def _consolidation_items(rng):
    return [*consolidation_draw.generate(rng), *skill_draw.generate(rng)]


suite.generated(
    "consolidation",
    generate=_consolidation_items,
    prepare=consolidation.prepare,
    check=consolidation.check,
)
