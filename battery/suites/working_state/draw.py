"""Suite A's seeded draw: the checkpoints each item writes, the noise around
them, and what the successor must find after the handover.

Pure: a function of the random.Random it is given and nothing else, so the
same seed draws the same items. Every item runs on one timeline: checkpoints
and noise are written at T0, every thread is handed over at T0, and the
successors resume at T1 = T0 + GAP (the agent's simulated clock).

An item's `data`:
* `thread`: its key; `session`, `successor`: who hands over to whom.
* `versions`: the checkpoints it writes in order (drafts first); the last is
  the one the successor must find, field for field.
* `noise` (A2): other threads' checkpoints, ledger events and facts, all
  written after the checkpoint and before the handover.
* `external`: each artifact or tool handle's name and whether it must be
  re-checked at T1 (`stale`): its last check is older than its freshness, or
  (A4) the fact it watches changed while the thread was handed over.
* `world` (A4): the facts the watched dependencies are about: `before`,
  asserted with the checkpoints; `during`, asserted after the handover and
  before the resume (a new value true after the last check, or one that was
  already true before it).
* `checks`: what is graded, each under one metric: `field` (a critical field
  of the checkpoint), `recheck` (one external dependency listed or not),
  `handover` (the handover itself).
"""

from __future__ import annotations

import copy
import random
import string
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F

COUNTS = {"a1": 24, "a2": 18, "a3": 18, "a4": 12}

T0 = datetime(2031, 5, 5, 9, 0, tzinfo=UTC)
GAP = timedelta(hours=3)  # from the handover to the resume
T1 = T0 + GAP
ACTOR = "battery-reference-agent"

# The fields the issue names for succession: each is scored on its own.
CRITICAL = (
    "goal",
    "subgoal",
    "assumptions",
    "unresolved_questions",
    "artifacts",
    "failed_branches",
    "next_action",
)
METRICS = ("field", "recheck", "handover")

SYSTEMS = (
    "billing service",
    "search index",
    "payments gateway",
    "auth proxy",
    "data warehouse",
    "mobile app",
    "CI pipeline",
    "email relay",
    "feature-flag service",
    "customer portal",
    "ledger replica",
    "image resizer",
)
TARGETS = (
    "PostgreSQL 17",
    "the eu-central-1 region",
    "Kubernetes 1.31",
    "the new VPC",
    "Python 3.13",
    "a read replica",
    "the blue cluster",
    "OpenTelemetry",
)
VERBS = ("Migrate", "Upgrade", "Move", "Cut over", "Re-platform", "Harden")
STEPS = (
    "Snapshot the schema",
    "Backfill the audit table",
    "Dry-run the cutover",
    "Rotate the service credentials",
    "Pin the client library",
    "Drain the old queue",
    "Diff the row counts",
    "Warm the cache",
)
FACTS_ABOUT = (
    "the staging database mirrors production as of {day}",
    "the feature flag `{flag}` stays off until the cutover",
    "the rate limit is {n} requests per minute",
    "nobody else deploys to {system} this week",
    "the nightly backup at 02:00 UTC succeeded on {day}",
    "{person} approves schema changes",
    "the old endpoint keeps answering until {day}",
    "traffic stays below {n} rps during the window",
    "the vendor SLA allows {n} minutes of downtime",
)
QUESTIONS = (
    "Does {system} still read from the legacy table?",
    "Who owns the {flag} flag after the reorg?",
    "Is the {n}-second timeout on the client configurable?",
    "Will {person} sign off before {day}?",
    "Can the backfill run while writes continue?",
)
PEOPLE = ("Ana Lima", "Bo Chen", "Chidi Okafor", "Dana Weiß", "Émile Roux", "Farah Haddad")
FLAGS = ("new_checkout", "fast_path", "dual_write", "shadow_reads", "strict_tls")
ARTIFACT_KINDS = (
    ("schema-dump", "s3://battery-artifacts/{token}/schema.sql"),
    ("migration-plan", "https://docs.example.com/plans/{token}"),
    ("runbook", "git+ssh://git.example.com/ops.git#runbooks/{token}.md"),
    ("row-count-report", "s3://battery-artifacts/{token}/counts.csv"),
    ("load-test", "https://grafana.example.com/d/{token}"),
)
TOOLS = ("psql", "kubectl", "terraform", "browser", "sftp")
BRANCHES = (
    (
        "pg_dump piped straight into the new cluster",
        "timed out after 40 minutes on the audit table",
    ),
    ("logical replication with the default slot", "the slot filled the disk within an hour"),
    ("blue/green flip through DNS", "clients cached the old address for 6 hours"),
    ("in-place upgrade", "extension {flag} is not available on the new version"),
    ("batch size 10000 for the backfill", "lock waits blocked the checkout path"),
)
NEXT_TOOLS = ("shell", "http.get", "sql", "ticket.comment", "deploy")

# The freshness of one external dependency at T1, by how it was drawn.
STALE_KINDS = ("went_stale", "boundary_stale", "already_stale")
FRESH_KINDS = ("still_fresh", "boundary_fresh", "undeclared")
# A4: long freshness windows, each watching a fact. `changed`: a new value of it
# became true during the handover (re-check); `watched_unchanged`: it did not
# change; `changed_before_check`: it changed, but before the last check.
WATCHED_STALE = ("changed",)
WATCHED_FRESH = ("watched_unchanged", "changed_before_check")
WATCHED = (*WATCHED_STALE, *WATCHED_FRESH)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class Draw:
    """One run's draw: its randomness and the names it has handed out."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.taken: set[str] = set()

    def token(self, length: int = 6) -> str:
        alphabet = string.ascii_lowercase + string.digits
        while True:
            token = "".join(self.rng.choice(alphabet) for _ in range(length))
            if token not in self.taken and not token.isdigit():
                self.taken.add(token)
                return token

    def lookalike(self, token: str) -> str:
        """Another unused token one character away from `token`."""
        alphabet = string.ascii_lowercase + string.digits
        while True:
            index = self.rng.randrange(len(token))
            candidate = token[:index] + self.rng.choice(alphabet) + token[index + 1 :]
            if candidate != token and candidate not in self.taken:
                self.taken.add(candidate)
                return candidate

    def fill(self, template: str) -> str:
        rng = self.rng
        return template.format(
            day=iso(T0 - timedelta(days=rng.randrange(1, 20)))[:10],
            flag=rng.choice(FLAGS),
            n=rng.choice((30, 45, 120, 600, 1200, 2500)),
            system=rng.choice(SYSTEMS),
            person=rng.choice(PEOPLE),
        )


# ----------------------------------------------------------------- checkpoints


def _external(draw: Draw, kind: str, token: str, freshness: str, index: int) -> dict[str, Any]:
    """One artifact or tool handle whose last check, seen from T1, is `freshness`."""
    rng = draw.rng
    gap = int(GAP.total_seconds())
    if kind == "artifacts":
        name, ref = ARTIFACT_KINDS[
            (index + rng.randrange(len(ARTIFACT_KINDS))) % len(ARTIFACT_KINDS)
        ]
        item: dict[str, Any] = {
            "name": f"{name}-{token}-{index + 1}",
            "ref": ref.format(token=token),
            "sha256": "".join(rng.choice("0123456789abcdef") for _ in range(16)),
        }
    else:
        tool = rng.choice(TOOLS)
        item = {
            "name": f"{tool}-session-{token}-{index + 1}",
            "handle": f"{tool}://{token}/{rng.randrange(1000, 9999)}",
            "scopes": rng.sample(["read", "write", "admin", "exec"], 2),
        }
    if freshness == "undeclared":
        return item
    if freshness in WATCHED:
        item["watch"] = {"subject": f"dep-{token}-{kind[:-1]}-{index + 1}", "predicate": "release"}
    # age_t0: how old the check is at the handover; the resume comes GAP later.
    if freshness == "still_fresh" or freshness in WATCHED:
        fresh = rng.choice((86400, 7 * 86400, 30 * 86400))
        age_t0 = rng.randrange(60, fresh - gap)
    elif freshness == "boundary_fresh":  # exactly as old as allowed at T1: not older
        fresh = rng.randrange(gap + 60, 4 * gap)
        age_t0 = fresh - gap
    elif freshness == "boundary_stale":  # one second older than allowed at T1
        fresh = rng.randrange(gap + 60, 4 * gap)
        age_t0 = fresh - gap + 1
    elif freshness == "went_stale":  # fresh at the handover, stale at the resume
        fresh = rng.randrange(600, 4 * gap)
        age_t0 = fresh - rng.randrange(1, min(fresh, gap))
    elif freshness == "already_stale":
        fresh = rng.randrange(60, 3600)
        age_t0 = fresh + rng.randrange(1, 86400)
    else:
        raise ValueError(freshness)
    item["checked_at"] = iso(T0 - timedelta(seconds=age_t0))
    item["freshness_seconds"] = fresh
    return item


def _next_action(draw: Draw, token: str) -> Any:
    rng = draw.rng
    tool = rng.choice(NEXT_TOOLS)
    if rng.random() < 0.25:
        return f"Run the {rng.choice(STEPS).lower()} step for {token} again"
    return {
        "tool": tool,
        "args": {
            "target": f"{token}-{rng.choice(('primary', 'replica', 'canary'))}",
            "retries": rng.randrange(0, 5),
            "dry_run": rng.choice((True, False)),
            "timeout_s": rng.choice((2.5, 30, 90)),
            "labels": rng.sample(["db", "ops", "urgent", "löw-risk", "night"], 2),
        },
        "why": f"{rng.choice(STEPS)} before the window closes",
    }


def _checkpoint(draw: Draw, token: str, freshness: dict[str, list[str]]) -> dict[str, Any]:
    rng = draw.rng
    system = rng.choice(SYSTEMS)
    deadline = iso(T0 + timedelta(days=rng.randrange(2, 30)))[:10]
    state: dict[str, Any] = {
        "goal": f"{rng.choice(VERBS)} the {system} to {rng.choice(TARGETS)} by {deadline} ({token})",
        "subgoal": f"{rng.choice(STEPS)} for the {system}",
        "assumptions": [draw.fill(t) for t in rng.sample(FACTS_ABOUT, 3)],
        "unresolved_questions": [draw.fill(rng.choice(QUESTIONS))],
        "artifacts": [
            _external(draw, "artifacts", token, f, i) for i, f in enumerate(freshness["artifacts"])
        ],
        "failed_branches": [_branch(draw, token)],
        "next_action": _next_action(draw, token),
        "plan": [f"{i + 1}. {step}" for i, step in enumerate(rng.sample(STEPS, 3))],
        "last_observation": {"exit_code": rng.choice((0, 1, 137)), "rows": rng.randrange(10**6)},
    }
    if freshness.get("tool_handles"):
        state["tool_handles"] = [
            _external(draw, "tool_handles", token, f, i)
            for i, f in enumerate(freshness["tool_handles"])
        ]
    return state


def _branch(draw: Draw, token: str) -> dict[str, Any]:
    rng = draw.rng
    branch, reason = rng.choice(BRANCHES)
    return {
        "branch": branch,
        "reason": draw.fill(reason),
        "attempts": rng.randrange(1, 4),
        "ref": f"battery:{token}:branch",
    }


def _altered(
    draw: Draw, state: dict[str, Any], token: str, fields: list[str], *, neighbour: str = ""
) -> dict[str, Any]:
    """A look-alike of `state` whose `fields` hold other values: an earlier
    draft of it, or (with `neighbour`, that thread's token) a neighbouring
    thread's checkpoint. The two are altered differently, so an answer that
    holds one can be told from an answer that holds the other."""
    rng = draw.rng
    other = copy.deepcopy(state)
    note = " (per the other team)" if neighbour else " (unconfirmed)"
    for name in fields:
        if name == "goal":
            goal = state["goal"].replace(" by ", " before " if neighbour else " no later than ", 1)
            other["goal"] = goal.replace(token, neighbour) if neighbour else goal
        elif name == "subgoal":
            word = " for the other " if neighbour else " for the new "
            other["subgoal"] = state["subgoal"].replace(" for the ", word, 1)
        elif name in ("assumptions", "unresolved_questions"):
            values = list(state[name])
            index = rng.randrange(len(values))
            ending = "?" if name == "unresolved_questions" else ""
            values[index] = f"{values[index].rstrip('?')}{note}{ending}"
            other[name] = values
        elif name == "artifacts":
            other["artifacts"] = [dict(a) for a in state["artifacts"]]
            index = rng.randrange(len(state["artifacts"]))
            other["artifacts"][index]["sha256"] = ("f" if neighbour else "0") * 16
        elif name == "failed_branches":
            attempts = 7 if neighbour else 9
            other["failed_branches"] = [{**state["failed_branches"][0], "attempts": attempts}]
        elif name == "next_action":
            other["next_action"] = _next_action(draw, neighbour or token)
            while other["next_action"] == state["next_action"]:
                other["next_action"] = _next_action(draw, neighbour or token)
    return other


# ----------------------------------------------------------------------- items


def _checks(item_external: list[dict[str, Any]], *, noise: bool) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = [{"metric": "field", "q": "field", "field": f} for f in CRITICAL]
    checks += [
        {
            "metric": "recheck",
            "q": "recheck",
            "kind": e["kind"],
            "name": e["name"],
            "stale": e["stale"],
            "freshness": e["freshness"],
        }
        for e in item_external
    ]
    checks += [
        {"metric": "handover", "q": "failed_branches_surfaced"},
        {"metric": "handover", "q": "acknowledged"},
        {"metric": "handover", "q": "held_by_successor"},
        {"metric": "handover", "q": "state_after_acknowledge"},
    ]
    if noise:
        checks.append({"metric": "handover", "q": "version_unchanged"})
    return checks


def _item(
    draw: Draw,
    kind: str,
    number: int,
    title: str,
    *,
    freshness: dict[str, list[str]],
    noise: bool = False,
) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    final = _checkpoint(draw, token, freshness)
    drafts = [
        _altered(draw, final, token, rng.sample(list(CRITICAL), rng.randrange(2, len(CRITICAL))))
        for _ in range(rng.choice((0, 1, 1, 2)))
    ]
    external = [
        {
            "kind": kind_name[:-1],
            "name": e["name"],
            "stale": f in STALE_KINDS or f in WATCHED_STALE,
            "freshness": f,
        }
        for kind_name in ("artifacts", "tool_handles")
        for e, f in zip(final.get(kind_name, []), freshness.get(kind_name, []), strict=True)
    ]
    watched = [
        (e, f)
        for kind_name in ("artifacts", "tool_handles")
        for e, f in zip(final.get(kind_name, []), freshness.get(kind_name, []), strict=True)
        if f in WATCHED
    ]
    thread = f"{kind}-{token}-{rng.choice(('migration', 'incident', 'release', 'research'))}"
    data: dict[str, Any] = {
        "thread": thread,
        "session": f"session-{token}-1",
        "successor": f"session-{token}-2",
        "note": f"handing over {token}: {final['subgoal'].lower()}",
        "versions": [*drafts, final],
        "external": external,
        "noise": _noise(draw, token, thread, final) if noise else None,
        "world": _world(draw, token, watched) if watched else None,
    }
    data["checks"] = _checks(external, noise=noise)
    planned: dict[str, int] = {}
    for check in data["checks"]:
        planned[check["metric"]] = planned.get(check["metric"], 0) + 1
    return ItemSpec(
        key=f"{kind}_{number:04d}",
        title=title,
        default_code=F.R2,
        data=data,
        metrics={"kind": kind.upper(), "planned": planned},
    )


def _release_claim(watch: dict[str, str], value: str, valid_from: datetime, token: str) -> dict:
    return {
        "subject": watch["subject"],
        "predicate": watch["predicate"],
        "value": value,
        "value_type": "string",
        "valid_from": iso(valid_from),
        "cardinality": "one",
        "subject_type": "system",
        "source_type": "tool_result",
        "authority": "tool_result",
        "source_ref": f"battery:{token}:release:{watch['subject']}",
        "confidence": 1.0,
        "actor": ACTOR,
    }


def _world(draw: Draw, token: str, watched: list[tuple[dict, str]]) -> dict[str, Any]:
    """The releases the watched dependencies are about, and how they move."""
    rng = draw.rng
    before, during = [], []
    for item, freshness in watched:
        checked = datetime.fromisoformat(item["checked_at"].replace("Z", "+00:00"))
        major, minor = rng.randrange(1, 9), rng.randrange(0, 20)
        first = f"{major}.{minor}.{rng.randrange(0, 9)}"
        later = f"{major}.{minor}.{rng.randrange(10, 40)}"  # close to the first: a patch
        before.append(_release_claim(item["watch"], first, checked - timedelta(days=3), token))
        if freshness == "changed":  # true between the handover and the resume
            at = T0 + timedelta(seconds=rng.randrange(60, int(GAP.total_seconds()) - 60))
            during.append(_release_claim(item["watch"], later, at, token))
        elif freshness == "changed_before_check":  # learnt late, but true before the check
            at = checked - timedelta(seconds=rng.randrange(60, 86400))
            during.append(_release_claim(item["watch"], later, at, token))
    return {"before": before, "during": during}


def _noise(draw: Draw, token: str, thread: str, state: dict[str, Any]) -> dict[str, Any]:
    """Unrelated writes that look like the thread's: neighbour threads with
    look-alike keys and checkpoints, notes in the ledger that quote other
    goals, and facts about the same system."""
    rng = draw.rng
    threads = []
    for _ in range(rng.randrange(2, 4)):
        other = draw.lookalike(token)
        versions = [
            _altered(draw, state, token, list(CRITICAL), neighbour=other)
            for _ in range(rng.randrange(1, 3))
        ]
        threads.append(
            {
                "key": thread.replace(token, other),
                "session": f"session-{other}-1",
                "versions": versions,
            }
        )
    events = []
    for index in range(rng.randrange(3, 7)):
        event_type = rng.choice(("note.added", "plan.revised", "goal.discussed", "tool.called"))
        events.append(
            {
                "event_type": event_type,
                "payload": {
                    "thread": thread,
                    "goal": _altered(draw, state, token, ["goal"])["goal"],
                    "next_action": _next_action(draw, token),
                    "n": index,
                },
                "session_id": f"session-{token}-1",
                "actor": ACTOR,
                "source_type": "agent_inference",
            }
        )
    facts = [
        {
            "subject": f"system-{token}",
            "predicate": predicate,
            "value": value,
            "value_type": "string",
            "valid_from": iso(T0 - timedelta(hours=rng.randrange(1, 48))),
            "cardinality": "one",
            "subject_type": "system",
            "source_type": "tool_result",
            "authority": "tool_result",
            "source_ref": f"battery:{token}:fact:{predicate}",
            "confidence": 1.0,
            "actor": ACTOR,
        }
        for predicate, value in rng.sample(
            [
                ("goal", _altered(draw, state, token, ["goal"])["goal"]),
                ("next_step", rng.choice(STEPS)),
                ("owner", rng.choice(PEOPLE)),
                ("deadline", iso(T0 + timedelta(days=rng.randrange(1, 9)))[:10]),
            ],
            rng.randrange(2, 5),
        )
    ]
    return {"threads": threads, "events": events, "facts": facts}


def a1_succession(draw: Draw, count: int) -> list[ItemSpec]:
    """A full checkpoint handed over to a new session, every field scored."""
    specs = []
    for number in range(1, count + 1):
        freshness = {"artifacts": ["still_fresh", draw.rng.choice(("still_fresh", "undeclared"))]}
        specs.append(
            _item(
                draw,
                "a1",
                number,
                "A1 succession: a full checkpoint to a new session",
                freshness=freshness,
            )
        )
    return specs


def a2_noise(draw: Draw, count: int) -> list[ItemSpec]:
    """The checkpoint, then unrelated writes that look like it, then the handover."""
    specs = []
    for number in range(1, count + 1):
        freshness = {"artifacts": ["still_fresh", "still_fresh"]}
        specs.append(
            _item(
                draw,
                "a2",
                number,
                "A2 noise: neighbour threads, ledger notes and facts written before the handover",
                freshness=freshness,
                noise=True,
            )
        )
    return specs


def a3_recheck(draw: Draw, count: int) -> list[ItemSpec]:
    """External dependencies, some going stale while the thread is handed over."""
    rng = draw.rng
    specs = []
    kinds = (*STALE_KINDS, *FRESH_KINDS)
    for number in range(1, count + 1):
        while True:
            freshness = {
                "artifacts": [rng.choice(kinds), rng.choice(kinds)],
                "tool_handles": [rng.choice(kinds) for _ in range(rng.randrange(1, 3))],
            }
            drawn = freshness["artifacts"] + freshness["tool_handles"]
            # Every item has at least one to re-check and one that is still good.
            if any(f in STALE_KINDS for f in drawn) and any(f not in STALE_KINDS for f in drawn):
                break
        stale = sum(f in STALE_KINDS for f in drawn)
        specs.append(
            _item(
                draw,
                "a3",
                number,
                f"A3 re-check: {stale} of {len(drawn)} external dependencies went stale",
                freshness=freshness,
            )
        )
    return specs


def a4_changed(draw: Draw, count: int) -> list[ItemSpec]:
    """Dependencies whose world really changed during the handover, inside their
    freshness window: only the watch can tell the successor."""
    rng = draw.rng
    specs = []
    for number in range(1, count + 1):
        while True:
            freshness = {
                "artifacts": [rng.choice(WATCHED), rng.choice(WATCHED)],
                "tool_handles": [rng.choice(WATCHED)],
            }
            drawn = freshness["artifacts"] + freshness["tool_handles"]
            if "changed" in drawn and any(f != "changed" for f in drawn):
                break
        changed = drawn.count("changed")
        specs.append(
            _item(
                draw,
                "a4",
                number,
                f"A4 changed: {changed} of {len(drawn)} watched dependencies changed during "
                "the handover",
                freshness=freshness,
            )
        )
    return specs


KINDS: dict[str, Callable[[Draw, int], list[ItemSpec]]] = {
    "a1": a1_succession,
    "a2": a2_noise,
    "a3": a3_recheck,
    "a4": a4_changed,
}


def generate(rng: random.Random, counts: dict[str, int] | None = None) -> list[ItemSpec]:
    """Every item of a run, A1 to A4, in that order."""
    counts = {**COUNTS, **(counts or {})}
    draw = Draw(rng)
    return [spec for kind, make in KINDS.items() for spec in make(draw, counts[kind])]
