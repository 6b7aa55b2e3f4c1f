"""Skill matching with 10,000 skill versions (issue #5, "Speed": match p50 ≤ 15 ms).

    .venv/bin/python bench/skills_match_bench.py [--reload] [--samples 1000] [--warmup 200]
        [--only match,pieces,http] [--http-samples 500]

Builds, in the benchmark database (PIPER_DB_NAME=piper_bench), one bench agent
holding 2,000 skills and 10,000 versions between them (3-7 a skill), and three
other agents holding 2,000 versions each (400 skills), so the version table
is multi-tenant. Each skill is a distinct (verb, object) pair in one of 30
domains, written through one of 8 purpose templates with varied details;
its versions re-word the purpose and may add a precondition. Its trigger needs
both the verb and the object (some as a regex); it has 0-2 preconditions over
the context (os, domain, tool access, quota) and 1-2 contraindications (a
task keyword such as "production", or a context condition). Statuses: 80%
validated, 7% experimental, 4% candidate, 7% deprecated, 2% retired — the
worst case for matching, which scans every validated version of the agent
(the lifecycle would normally deprecate a skill's older versions when a newer
one is validated; here most stay validated, so 8,000 are scanned).

How the rows are made. 2% of the bench agent's skills (about 200 versions) go
through `definitions.skill_create` / `definitions.version_create`, the
services the API calls, and reach their status through `lifecycle.move`
(the compare-and-set every promotion and deprecation uses; the evidence that
would justify a promotion — sandbox validations, executions — is not made).
The queued examples validation each such version asks for is not sent to a
sandbox worker (`runs._enqueue_validation` is a no-op here). The rest are bulk
inserts of rows identical in shape, built the way the services build them:
the definition checked by `definitions._check`, the intent embedding from
`definitions.intent_text` through the embedder's batch call (`embed`, 64 a
batch), one `skill.created` event per skill, one `skill.version_created`
event per version carrying `definitions._definition_payload`, one
`skill.version_transitioned` event and VersionTransition row per status move
— every event appended through `ledger.services.events_append` (the hash
chain) — then Skill, SkillVersion and VersionTransition rows with
`bulk_create`, a chunk of skills per transaction. Bulk rows do not get the
queued examples Validation row (and its event) the service writes; matching
never reads it. A shape check makes one skill with two versions both ways
(in a throwaway agent) and compares every version column, the embedding
(within 1e-5: a batch pads), the ledger events and the transitions.

The load is kept: a later run finds the complete bench agent by name prefix
(its load report is in the agent's description) and only measures;
`--reload` loads new agents (versions are history: they are never deleted).

match   `skills.selectors.skill_match` in-process, as MatchApi calls it, with
        (a) a task text never seen before (a fresh ticket number and wording
        each time: the embedding is computed in the call — an agent's honest
        request), (b) one of 50 task texts asked again and again (the
        embedding comes from the process's lru_cache). Half the tasks are
        written for a skill with a validated version in a context satisfying
        its preconditions (a version of that skill must be applicable), half
        add a word of one of its contraindications (no version of it may be
        applicable, and one must be a near miss "contraindicated"); every
        answer is checked outside the timing.
pieces  the same steps one at a time: `embed_one` on new text; the two SQL
        statements with a precomputed vector (EXPLAIN (ANALYZE, BUFFERS) of
        the validated one printed); the Python examination of the fetched rows.
http    POST /api/v1/skills/match over gunicorn shaped like the Procfile (2
        workers x 4 threads), one client on keep-alive, new and repeated tasks.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import time
from datetime import UTC, datetime
from unittest import mock

import httpx
from _harness import (
    git_commit,
    gunicorn,
    load_average,
    machine,
    migrate,
    setup_django,
    summary_ms_p95,
)

AGENT_PREFIX = "bench-skills-match"
SKILLS = 2000
VERSIONS = 10_000
OTHER_AGENTS = 3
OTHER_VERSIONS = 2000
SERVICE_SHARE = 0.02
CHUNK = 100  # skills per bulk transaction
STATUS_WEIGHTS = {
    "validated": 0.80,
    "experimental": 0.07,
    "candidate": 0.04,
    "deprecated": 0.07,
    "retired": 0.02,
}
PATHS = {  # how the service gets there from candidate, with the reason move() records
    "candidate": [],
    "experimental": [("experimental", "examples passed")],
    "validated": [("experimental", "examples passed"), ("validated", "verified successes")],
    "deprecated": [
        ("experimental", "examples passed"),
        ("validated", "verified successes"),
        ("deprecated", "recent success rate fell"),
    ],
    "retired": [("retired", "never to be used again")],
}

VERBS = (  # noqa: SIM905 (word lists read better as text)
    "rotate compute validate reconcile archive export import summarise translate deduplicate "
    "migrate backup restore index compress encrypt decrypt schedule cancel refund audit "
    "provision deprovision resize snapshot benchmark profile lint format deploy rollback "
    "notify escalate triage anonymise redact classify forecast scrape crawl"
).split()
OBJECTS = (  # noqa: SIM905
    "invoice credential certificate ledger report dashboard cluster bucket table queue "
    "mailbox calendar contract payslip timesheet dataset model pipeline container volume "
    "firewall route domain ticket changelog release package repository branch playlist "
    "catalogue inventory shipment order receipt budget forecast survey transcript podcast "
    "thumbnail sitemap webhook token secret quota tenant subscription coupon refund wallet "
    "statement checkpoint cache index replica partition schema"
).split()
DOMAINS = (  # noqa: SIM905
    "billing payroll kubernetes marketing support logistics warehouse analytics security "
    "compliance legal finance procurement sales research mobile frontend backend data "
    "ml devops hr recruiting travel facilities media publishing education health retail"
).split()
TOOLS_VIA = [
    "through the REST API",
    "with the command line client",
    "in the admin console",
    "with a SQL script",
    "using the vendor SDK",
    "over SFTP",
    "through the message bus",
    "with a spreadsheet export",
]
DETAILS = [
    "every night",
    "on request",
    "with a dry run first",
    "respecting rate limits",
    "in batches of a hundred",
    "keeping an audit trail",
    "before the monthly close",
    "after each release",
    "for a single customer",
    "across every region",
    "and email a summary",
    "and open a ticket on failure",
]
TEMPLATES = [
    "{Verb} the {object} of the {domain} team {via}, {detail}.",
    "{Verb} {domain} {object}s {via} {detail}.",
    "Given a {domain} {object}, {verb} it {via} and report what changed.",
    "When asked to {verb} a {object} for {domain}, do it {via}, {detail}.",
    "{Verb} one {object} ({domain}) {via}; {detail}.",
    "Safely {verb} the {domain} {object} {via}, {detail}.",
    "Procedure to {verb} {object}s owned by {domain} {via}.",
    "{Verb} and verify a {object} in {domain} {via}, {detail}.",
]
CONTRA_WORDS = [
    "production",
    "prod db",
    "customer data",
    "legal hold",
    "friday deploy",
    "live traffic",
    "personal data",
    "month end",
    "shared drive",
    "root account",
]
LEADS = ["Please", "Could you", "I need to", "Next step:", "Go ahead and", "Time to", "Can you"]
TAILS = [
    "before lunch",
    "for the quarterly review",
    "as discussed with Ada",
    "so Grace can review it",
    "today",
    "after the standup",
    "when you have a minute",
    "as in the runbook",
]
SCHEMA = {
    "type": "object",
    "properties": {"target": {"type": "string"}, "dry_run": {"type": "boolean"}},
    "required": ["target"],
    "additionalProperties": False,
}
PROCEDURE = "def run(params, tools):\n    return {'target': params['target'], 'done': True}\n"
VALIDATOR = "def validate(params, result, tools):\n    return result.get('done') is True\n"


def say(text: str = "") -> None:
    print(text, flush=True)


# ---------------------------------------------------------------------- the skills


def skill_spec(rng: random.Random, verb: str, obj: str, domain: str, n_versions: int) -> dict:
    """One skill: what its versions share and what each says."""
    via = rng.choice(TOOLS_VIA)
    if rng.random() < 0.25:
        trigger = {"regex": rf"\b{verb}\b.*\b{obj}s?\b|\b{obj}s?\b.*\b{verb}\b"}
    else:
        trigger = {"keywords": [verb, obj], "min_keywords": 2}
        if rng.random() < 0.3:
            trigger = {"keywords": [verb, obj, domain], "min_keywords": 2}
    preconditions = []
    for kind in rng.sample(["os", "domain", "tool", "quota"], rng.choice([0, 1, 1, 2])):
        if kind == "os":
            preconditions.append({"path": "env.os", "op": "in", "value": ["linux", "macos"]})
        elif kind == "domain":
            preconditions.append({"path": "team", "op": "eq", "value": domain})
        elif kind == "tool":
            preconditions.append(
                {"path": "access.tools", "op": "exists", "reason": "needs tool access"}
            )
        else:
            preconditions.append({"path": "quota.remaining", "op": "gte", "value": 1})
    contra_word = rng.choice(CONTRA_WORDS)
    contraindications = [{"keywords": [contra_word], "reason": f"never on {contra_word}"}]
    if rng.random() < 0.5:
        contraindications.append(
            {"path": "env.readonly", "op": "eq", "value": True, "reason": "read-only environment"}
        )
    versions = []
    for k in range(n_versions):
        template = TEMPLATES[(rng.randrange(len(TEMPLATES)) + k) % len(TEMPLATES)]
        purpose = template.format(
            Verb=verb.capitalize(),
            verb=verb,
            object=obj,
            domain=domain,
            via=via if k % 2 == 0 else rng.choice(TOOLS_VIA),
            detail=rng.choice(DETAILS),
        )
        extra = []
        if k >= 2 and rng.random() < 0.3:
            extra = [{"path": "approved", "op": "eq", "value": True, "reason": "needs approval"}]
        versions.append(
            {
                "purpose": purpose,
                "scope": f"{domain} {obj}s",
                "preconditions": preconditions + extra,
                "required_permissions": ["write"] if rng.random() < 0.2 else [],
            }
        )
    return {
        "verb": verb,
        "object": obj,
        "domain": domain,
        "trigger": trigger,
        "contraindications": contraindications,
        "contra_word": contra_word,
        "versions": versions,
    }


def version_input(spec: dict, k: int):
    from skills.services.definitions import VersionInput

    v = spec["versions"][k]
    return VersionInput(
        purpose=v["purpose"],
        trigger=spec["trigger"],
        parameter_schema=SCHEMA,
        procedure=PROCEDURE,
        validator=VALIDATOR,
        examples=[{"params": {"target": "a"}, "expected": {"target": "a", "done": True}}],
        holdout=[{"params": {"target": "b"}, "expected": {"target": "b", "done": True}}],
        scope=v["scope"],
        preconditions=v["preconditions"],
        contraindications=spec["contraindications"],
        required_permissions=v["required_permissions"],
        provenance_episodes=[f"episode-{spec['verb']}-{spec['object']}-{k}"],
    )


def skill_specs(rng: random.Random, n_skills: int, n_versions: int) -> list[dict]:
    pairs = [(v, o) for v in VERBS for o in OBJECTS]
    rng.shuffle(pairs)
    assert len(pairs) >= n_skills
    counts = [rng.randint(3, 7) for _ in range(n_skills)]
    # Adjust so they add up to exactly n_versions, keeping each within 1-9.
    i = 0
    while sum(counts) != n_versions:
        step = 1 if sum(counts) < n_versions else -1
        if 1 <= counts[i % n_skills] + step <= 9:
            counts[i % n_skills] += step
        i += 1
    specs = []
    for (verb, obj), n in zip(pairs[:n_skills], counts, strict=True):
        spec = skill_spec(rng, verb, obj, rng.choice(DOMAINS), n)
        statuses = rng.choices(list(STATUS_WEIGHTS), weights=list(STATUS_WEIGHTS.values()), k=n)
        spec["statuses"] = statuses
        specs.append(spec)
    return specs


# ------------------------------------------------------------------------- writing


def _no_sandbox():
    from skills.services import runs

    return mock.patch.object(runs, "_enqueue_validation", lambda validation_id: None)


def service_skill(agent, name: str, spec: dict) -> list:
    """The skill through the services the API calls; statuses through lifecycle.move."""
    from django.db import transaction

    from skills.services import definitions, lifecycle

    versions = []
    with _no_sandbox():
        skill, version = definitions.skill_create(
            agent=agent, name=name, data=version_input(spec, 0), actor="bench"
        )
        versions.append(version)
        for k in range(1, len(spec["versions"])):
            versions.append(
                definitions.version_create(
                    agent=agent, skill=skill, data=version_input(spec, k), actor="bench"
                )
            )
    for version, status in zip(versions, spec["statuses"], strict=True):
        with transaction.atomic():
            locked = lifecycle.locked_version(agent, version.pk)
            for to_status, reason in PATHS[status]:
                lifecycle.move(locked, to_status, reason, actor="bench")
    return versions


def bulk_skills(agent, named_specs: list[tuple[str, dict]], embedder) -> None:
    """Rows identical in shape to service_skill's, in one transaction."""
    from django.db import transaction

    from ledger.services import EventDraft, events_append
    from piper.ids import uuid7
    from piper.provenance import SourceType
    from skills.models import Skill, SkillVersion, VersionStatus, VersionTransition
    from skills.services import definitions

    inputs = []
    for _, spec in named_specs:
        for k in range(len(spec["versions"])):
            data = version_input(spec, k)
            definitions._check(data)
            inputs.append(data)
    vectors = iter(embedder.embed([definitions.intent_text(d) for d in inputs]))
    data_iter = iter(inputs)
    with transaction.atomic():
        skill_events = events_append(
            agent=agent,
            drafts=[
                EventDraft(event_type="skill.created", payload={"name": name}, actor="bench")
                for name, _ in named_specs
            ],
        )
        skills = [
            Skill(agent=agent, name=name, source_event=event)
            for (name, _), event in zip(named_specs, skill_events, strict=True)
        ]
        Skill.objects.bulk_create(skills)
        versions, statuses = [], []
        for skill, (_, spec) in zip(skills, named_specs, strict=True):
            previous = None
            for k, status in enumerate(spec["statuses"]):
                data = next(data_iter)
                version = SkillVersion(
                    id=uuid7(),
                    agent=agent,
                    skill=skill,
                    number=k + 1,
                    purpose=data.purpose.strip(),
                    scope=data.scope,
                    trigger=data.trigger,
                    intent_embedding=next(vectors),
                    preconditions=data.preconditions,
                    contraindications=data.contraindications,
                    required_tools=list(data.required_tools),
                    required_permissions=sorted(set(data.required_permissions)),
                    parameter_schema=data.parameter_schema,
                    procedure=data.procedure,
                    entry_point=data.entry_point,
                    validator=data.validator,
                    rollback=data.rollback,
                    examples=data.examples,
                    holdout=data.holdout,
                    provenance_episodes=list(data.provenance_episodes),
                    supersedes=previous,
                    status=status,
                )
                versions.append(version)
                statuses.append(status)
                previous = version
        created = events_append(
            agent=agent,
            drafts=[
                EventDraft(
                    event_type="skill.version_created",
                    payload=definitions._definition_payload(v, []),
                    actor="bench",
                )
                for v in versions
            ],
        )
        for version, event in zip(versions, created, strict=True):
            version.source_event = event
        SkillVersion.objects.bulk_create(versions)
        moves = []  # (version, from, to, reason)
        for version, status in zip(versions, statuses, strict=True):
            current = VersionStatus.CANDIDATE.value
            for to_status, reason in PATHS[status]:
                moves.append((version, current, to_status, reason))
                current = to_status
        moved = events_append(
            agent=agent,
            drafts=[
                EventDraft(
                    event_type="skill.version_transitioned",
                    payload={
                        "skill_id": str(v.skill_id),
                        "version_id": str(v.pk),
                        "number": v.number,
                        "from": a,
                        "to": b,
                        "reason": reason,
                    },
                    actor="bench",
                    source_type=SourceType.AGENT_INFERENCE,
                )
                for v, a, b, reason in moves
            ],
        )
        transitions = [
            VersionTransition(
                agent=agent,
                version=v,
                from_status="",
                to_status="candidate",
                reason="created",
                actor="bench",
                event=v.source_event,
            )
            for v in versions
        ]
        transitions += [
            VersionTransition(
                agent=agent, version=v, from_status=a, to_status=b, reason=r, actor="bench", event=e
            )
            for (v, a, b, r), e in zip(moves, moved, strict=True)
        ]
        VersionTransition.objects.bulk_create(transitions)


def shape_check(embedder) -> None:
    """One skill with two versions both ways; every column, event and transition compared."""
    from ledger.models import Event
    from piper.tenancy.services import agent_create
    from skills.models import Skill, SkillVersion, VersionTransition

    stamp = int(time.time() * 1000)
    rng = random.Random(99)
    spec = skill_spec(rng, "reconcile", "ledger", "finance", 2)
    spec["statuses"] = ["deprecated", "validated"]
    a = agent_create(name=f"{AGENT_PREFIX}-shape-service-{stamp}")
    b = agent_create(name=f"{AGENT_PREFIX}-shape-bulk-{stamp}")
    service_skill(a, "reconcile-ledger", spec)
    bulk_skills(b, [("reconcile-ledger", spec)], embedder)
    skip = {"id", "agent", "skill", "source_event", "supersedes", "created_at", "status_changed_at"}
    fields = [f.attname for f in SkillVersion._meta.concrete_fields if f.name not in skip]

    def rows(agent):
        out = []
        for v in SkillVersion.objects.filter(agent=agent).order_by("number"):
            event = Event.objects.get(pk=v.source_event_id)
            payload = {
                k: x
                for k, x in event.payload.items()
                if k not in ("skill_id", "version_id", "supersedes")
            }
            trans = [
                (t.from_status, t.to_status, t.reason, t.actor, t.event.event_type)
                for t in VersionTransition.objects.filter(version=v)
                .select_related("event")
                .order_by("id")
            ]
            trans_payloads = [
                {k: x for k, x in t.event.payload.items() if k not in ("skill_id", "version_id")}
                for t in VersionTransition.objects.filter(version=v)
                .select_related("event")
                .order_by("id")
                if t.from_status
            ]
            out.append(
                (
                    {f: getattr(v, f) for f in fields if f != "intent_embedding"},
                    list(v.intent_embedding),
                    v.supersedes_id is not None,
                    (event.event_type, event.actor, event.source_type, payload),
                    trans,
                    trans_payloads,
                )
            )
        return out

    ra, rb = rows(a), rows(b)
    assert len(ra) == len(rb) == 2
    for x, y in zip(ra, rb, strict=True):
        assert x[0] == y[0], (x[0], y[0])
        assert max(abs(p - q) for p, q in zip(x[1], y[1], strict=True)) < 1e-5
        assert x[2:] == y[2:], (x[2:], y[2:])
    skill_events = [
        (e.event_type, e.payload)
        for e in Event.objects.filter(
            pk__in=Skill.objects.filter(agent__in=[a, b]).values("source_event")
        )
    ]
    assert skill_events[0] == skill_events[1], skill_events
    say(
        f"shape check: a bulk version equals a service version column for column ({len(fields)} columns), "
        "with the same events and transitions"
    )


def find_loaded_agent():
    from piper.tenancy.models import Agent

    for agent in Agent.objects.filter(name__startswith=f"{AGENT_PREFIX}-{VERSIONS}-").order_by(
        "-created_at"
    ):
        try:
            report = json.loads(agent.description).get("skills_match_bench")
        except (ValueError, AttributeError):
            report = None
        if report and report.get("complete"):
            return agent, report
        say(f"(ignoring {agent.name}: its load did not complete)")
    return None, None


def load() -> tuple:
    from django.db import connection

    from piper.embeddings import get_embedder
    from piper.tenancy.services import agent_create, agent_update

    embedder = get_embedder()
    shape_check(embedder)
    stamp = int(time.time())
    agent = agent_create(
        name=f"{AGENT_PREFIX}-{VERSIONS}-{stamp}", description="skills_match_bench load in progress"
    )
    others = [agent_create(name=f"{AGENT_PREFIX}-tenant{n}-{stamp}") for n in range(OTHER_AGENTS)]
    rng = random.Random(5)
    specs = skill_specs(rng, SKILLS, VERSIONS)
    other_specs = [
        skill_specs(random.Random(100 + n), OTHER_VERSIONS // 5, OTHER_VERSIONS)
        for n in range(OTHER_AGENTS)
    ]
    names = [f"{s['verb']}-{s['object']}-{i:04d}" for i, s in enumerate(specs)]
    by_service = set(rng.sample(range(SKILLS), int(SKILLS * SERVICE_SHARE)))
    t0 = time.perf_counter()
    service_s = 0.0
    service_versions = 0
    for first in range(0, SKILLS, CHUNK):
        chunk = range(first, min(SKILLS, first + CHUNK))
        bulk = [(names[i], specs[i]) for i in chunk if i not in by_service]
        bulk_skills(agent, bulk, embedder)
        for i in chunk:
            if i in by_service:
                s0 = time.perf_counter()
                service_versions += len(service_skill(agent, names[i], specs[i]))
                service_s += time.perf_counter() - s0
        # The other tenants' rows interleaved with ours.
        for n, tenant in enumerate(others):
            part = other_specs[n][first // 5 : (first + CHUNK) // 5]
            if part:
                bulk_skills(
                    tenant,
                    [(f"{s['verb']}-{s['object']}-{first + j}", s) for j, s in enumerate(part)],
                    embedder,
                )
        say(
            f"  {min(SKILLS, first + CHUNK)}/{SKILLS} skills, {time.perf_counter() - t0:.0f} s, "
            f"{load_average()}"
        )
    with connection.cursor() as cursor:
        for table in ("skills_skillversion", "skills_skill", "skills_versiontransition"):
            cursor.execute(f"VACUUM ANALYZE {table}")
    statuses = {}
    for spec in specs:
        for s in spec["statuses"]:
            statuses[s] = statuses.get(s, 0) + 1
    report = {
        "complete": True,
        "skills": SKILLS,
        "versions": VERSIONS,
        "statuses": statuses,
        "service_versions": service_versions,
        "service_s": round(service_s, 1),
        "loaded_on": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "wall_s": round(time.perf_counter() - t0, 1),
        "load_average_after": load_average(),
        "other_agents": [a.name for a in others],
        "seed": 5,
    }
    agent = agent_update(
        agent=agent, description=json.dumps({"skills_match_bench": report}), is_active=True
    )
    return agent, report


# ------------------------------------------------------------------------- the tasks


def bench_specs() -> list[dict]:
    """The bench agent's skills as the loader generated them (same seed)."""
    return skill_specs(random.Random(5), SKILLS, VERSIONS)


def context_for(spec: dict) -> dict:
    """A context in which every precondition of every version of `spec` holds."""
    return {
        "env": {"os": "linux", "readonly": False},
        "team": spec["domain"],
        "access": {"tools": ["shell"]},
        "quota": {"remaining": 5},
        "approved": True,
    }


class Tasks:
    """Task texts for skills that have a validated version; each new text unseen."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.specs = [s for s in bench_specs() if "validated" in s["statuses"]]
        self.ticket = self.rng.randrange(10**6)

    def one(self, contraindicated: bool) -> tuple[str, dict, dict]:
        spec = self.rng.choice(self.specs)
        self.ticket += self.rng.randint(1, 97)
        lead, tail = self.rng.choice(LEADS), self.rng.choice(TAILS)
        text = f"{lead} {spec['verb']} the {spec['domain']} {spec['object']} {tail}"
        if contraindicated:
            text += f" on the {spec['contra_word']}"
        text += f" (#{self.ticket})"
        return text, context_for(spec), spec


def check(result, spec: dict, contraindicated: bool, skill_names: dict) -> bool:
    name = skill_names[(spec["verb"], spec["object"])]
    applicable = [c.version.skill.name for c in result.applicable]
    near = [
        c.version.skill.name
        for c in result.near_misses
        if any(r["type"] == "contraindicated" for r in c.reasons)
    ]
    if contraindicated:
        return name not in applicable and name in near
    return name in applicable


# ---------------------------------------------------------------------- measurements


def measure_match(agent, args, names) -> dict:
    from skills import selectors

    out = {}
    tasks = Tasks(seed=11)
    repeated = [tasks.one(i % 2 == 1) for i in range(50)]
    for mode in ("new", "repeated"):
        samples, ok, total = [], 0, 0
        for i in range(args.warmup + args.samples):
            if mode == "new":
                text, context, spec = tasks.one(i % 2 == 1)
                contra = i % 2 == 1
            else:
                text, context, spec = repeated[i % 50]
                contra = (i % 50) % 2 == 1
            t0 = time.perf_counter()
            result = selectors.skill_match(agent=agent, task=text, context=context, scopes=None)
            elapsed = time.perf_counter() - t0
            if i >= args.warmup:
                samples.append(elapsed)
                total += 1
                good = check(result, spec, contra, names)
                ok += good
                if not good:
                    say(
                        f"  WRONG ({'contraindicated' if contra else 'applicable'} expected): "
                        f"{text!r} -> applicable "
                        f"{[c.version.skill.name for c in result.applicable]}, near misses "
                        f"{[(c.version.skill.name, [r['type'] for r in c.reasons]) for c in result.near_misses]}"
                    )
        out[mode] = {**summary_ms_p95(samples), "answers_ok": f"{ok}/{total}"}
        say(f"skill_match, {mode} task text: {out[mode]}  ({load_average()})")
    return out


def measure_pieces(agent, args) -> dict:
    from django.conf import settings
    from django.db import connection

    from piper.embeddings import get_embedder
    from skills import selectors

    embedder = get_embedder()
    tasks = Tasks(seed=23)
    n = max(300, args.samples // 3)
    out = {}
    embed, vectors = [], []
    for i in range(n + 50):
        text, context, _ = tasks.one(i % 2 == 1)
        t0 = time.perf_counter()
        vector = embedder.embed_one(text)
        if i >= 50:
            embed.append(time.perf_counter() - t0)
            vectors.append((text, context, vector))
    out["embed_one"] = summary_ms_p95(embed)
    say(f"embed_one (new text): {out['embed_one']}  ({load_average()})")

    # The SQL and the examination with the vector already computed.
    sql, examine, statements = [], [], []
    acc = {"sql": 0.0, "n": 0, "examine": 0.0}
    original = selectors._examine

    def timed_sql(execute, statement, params, many, ctx):
        t0 = time.perf_counter()
        try:
            return execute(statement, params, many, ctx)
        finally:
            acc["sql"] += time.perf_counter() - t0
            acc["n"] += 1

    def timed_examine(*a, **kw):
        t0 = time.perf_counter()
        try:
            return original(*a, **kw)
        finally:
            acc["examine"] += time.perf_counter() - t0

    with mock.patch.object(selectors, "_examine", timed_examine):
        for text, context, vector in vectors:
            acc.update(sql=0.0, n=0, examine=0.0)
            with (
                mock.patch.object(selectors, "_task_embedding", lambda task, v=vector: tuple(v)),
                connection.execute_wrapper(timed_sql),
            ):
                selectors.skill_match(agent=agent, task=text, context=context)
            sql.append(acc["sql"])
            examine.append(acc["examine"])
            statements.append(acc["n"])
    out["sql_per_match"] = summary_ms_p95(sql)
    out["statements_per_match"] = max(statements)
    out["python_examine"] = summary_ms_p95(examine)
    say(f"SQL per match ({max(statements)} statements): {out['sql_per_match']}  ({load_average()})")
    say(f"_examine of the fetched versions: {out['python_examine']}")
    # EXPLAIN of the statements as the selector sends them.
    text, context, vector = vectors[0]
    captured = []

    def capture(execute, statement, params, many, ctx):
        captured.append((statement, params))
        return execute(statement, params, many, ctx)

    with (
        mock.patch.object(selectors, "_task_embedding", lambda task: tuple(vector)),
        connection.execute_wrapper(capture),
    ):
        selectors.skill_match(agent=agent, task=text, context=context)
    with connection.cursor() as cursor:
        for statement, params in captured:
            if "skills_skillversion" not in statement:
                continue
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
            plan = re.sub(
                r"'\[[-0-9.e,]+\]'", "'[…384 floats…]'", "\n".join(r[0] for r in cursor.fetchall())
            )
            say(plan)
            out.setdefault("explain", []).append(plan)
    out["candidates"] = settings.SKILLS_MATCH_CANDIDATES
    return out


def measure_http(agent, args, names) -> dict:
    from piper.tenancy.models import MAX_RATE_PER_MINUTE
    from piper.tenancy.services import api_key_create

    _, raw = api_key_create(
        agent=agent,
        name=f"bench-{int(time.time())}",
        scopes=["read"],
        rate_per_minute=MAX_RATE_PER_MINUTE,
    )
    out = {}
    tasks = Tasks(seed=31)
    repeated = [tasks.one(i % 2 == 1) for i in range(50)]
    with (
        gunicorn(8791) as base,
        httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {raw}"}, timeout=30
        ) as client,
    ):
        for mode in ("new", "repeated"):
            samples, ok = [], 0
            for i in range(100 + args.http_samples):  # warm-up loads the model in both workers
                text, context, spec = tasks.one(i % 2 == 1) if mode == "new" else repeated[i % 50]
                t0 = time.perf_counter()
                response = client.post(
                    "/api/v1/skills/match", json={"task": text, "context": context}
                )
                elapsed = time.perf_counter() - t0
                assert response.status_code == 200, response.text
                if i >= 100:
                    samples.append(elapsed)
                    body = response.json()
                    name = names[(spec["verb"], spec["object"])]
                    ok += name in json.dumps(body)
            out[mode] = {**summary_ms_p95(samples), "skill_in_answer": f"{ok}/{len(samples)}"}
            say(f"POST /api/v1/skills/match, {mode} task text: {out[mode]}  ({load_average()})")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reload", action="store_true")
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--http-samples", type=int, default=500)
    parser.add_argument("--only", default="match,pieces,http")
    args = parser.parse_args()
    setup_django()
    migrate()
    only = set(args.only.split(","))
    say(f"{machine()}; commit {git_commit()}; {load_average()}")
    agent, report = (None, None) if args.reload else find_loaded_agent()
    if agent is None:
        agent, report = load()
    say(f"bench agent {agent.name}: {json.dumps(report)}")
    names = {
        (s["verb"], s["object"]): f"{s['verb']}-{s['object']}-{i:04d}"
        for i, s in enumerate(bench_specs())
    }
    results = {"agent": agent.name, "machine": machine(), "commit": git_commit()}
    if "match" in only:
        results["match"] = measure_match(agent, args, names)
    if "pieces" in only:
        results["pieces"] = measure_pieces(agent, args)
    if "http" in only:
        results["http"] = measure_http(agent, args, names)
    results["load_average_end"] = load_average()
    say(
        json.dumps(
            {k: v for k, v in results.items() if k != "pieces"}
            | {"pieces": {k: v for k, v in results.get("pieces", {}).items() if k != "explain"}}
        )
    )


if __name__ == "__main__":
    main()
