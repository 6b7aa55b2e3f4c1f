"""Suite G's seeded draw: what the agent is told, and what it then asks.

Pure: a function of the random.Random it is given and nothing else, so the
same seed draws the same items.

G1 "do I need to look?" — one fact question each, asked on the current-fact
route:
* `stable`: the value is stored and can be trusted: its predicate has no
  volatility, or one far longer than the value's age. Answer it, no re-check.
* `stale`: the value is stored, but older than its predicate's volatility
  (a few seconds: prepare waits them out). Answer it, flagged for re-check.
* `unknowable`: nothing is stored about it — a subject never mentioned, or a
  subject the agent knows whose predicate it was never told. Abstain.

G2 route accuracy — one question per memory type, asked with route auto,
each about something of that type the item stored: a current fact, an
episode (what happened), a skill (how to), an intention (what am I supposed
to do), a document (what did source X say) and a chain of relations
(multi-hop). The route chosen must be the type's; the thing stored must
come back from it (as evidence, or as a near miss).

G2 in other words (issue 20) — the same six questions about the same kinds
of thing, in words the router holds in no rule or prototype (phrasing.py):
a seen and a held-out vocabulary in turn, six items (one per route) each.
The first 60 G2 items are the router's own templates (split `template`).

G3 "asked in other words" — facts stored as an agent writes key-value state,
asked with route auto in words that paraphrase the predicate, from a seen or
a held-out vocabulary (paraphrase.py): answer the current value, never show
the superseded one as current, abstain on a predicate never stated or a
look-alike subject.

An item's `data`:
* `facts`: claims for `POST /facts`, each with a `ref`; `predicates`: the
  volatility to define first (`PUT /predicates/{name}`), shared by the run.
* G2 also `episode`, `skill`, `intention` or `source`, what it stores.
* `question`: its text, route, and what it `expects`.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F
from ..episodic.draw import ACTIONS, INCIDENTS, PEOPLE, SYSTEMS, iso
from . import paraphrase, phrasing

# g2: the router's own template words; g2_words: G2 in other words
# (phrasing.py), drawn after G3 so that adding them changed no earlier item.
COUNTS = {"g1": 48, "g2": 60, "g3": 40, "g2_words": 60}
ACTOR = "battery-reference-agent"
VALID_FROM = datetime(2024, 1, 1, tzinfo=UTC)  # every fact holds from then on
EPISODE_AT = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)  # G2's episodes happened around then
G3_CHANGED_AT = datetime(2025, 1, 1, tzinfo=UTC)  # G3's values asked about changed then

STALE_SECONDS = 2  # the volatility of the predicates whose values go stale in the run
FRESH_SECONDS = 30 * 86400  # volatile, but far longer than the run

G1_KINDS = ("stable", "stale", "unknowable")
G1_METRICS = ("abstain", "value", "staleness")
ROUTES = ("current_fact", "what_happened", "how_to", "what_to_do", "source", "multi_hop")
G2_METRICS = ("route", "store")

CODENAMES = (
    "Vela",
    "Lyra",
    "Orion",
    "Atlas",
    "Helix",
    "Nimbus",
    "Quarry",
    "Juniper",
    "Cobalt",
    "Meridian",
    "Halcyon",
    "Tessera",
    "Vireo",
    "Kestrel",
    "Osprey",
    "Heron",
    "Falcon",
    "Marlin",
    "Puffin",
    "Condor",
    "Ibis",
    "Tern",
    "Plover",
    "Wren",
    "Finch",
    "Lark",
    "Petrel",
    "Egret",
    "Crane",
    "Robin",
    "Sparrow",
    "Magpie",
    "Starling",
    "Dipper",
    "Avocet",
    "Gannet",
    "Curlew",
    "Merlin",
    "Bittern",
    "Shrike",
)
NOUNS = ("service", "cluster", "pipeline", "portal", "gateway", "warehouse")

TEAMS = ("Platform", "Payments", "Growth", "Data", "Identity", "Search", "Mobile", "Infra")
REGIONS = ("eu-central-1", "us-east-2", "ap-southeast-1", "eu-west-3", "sa-east-1", "us-west-1")
ENGINES = ("PostgreSQL 17", "MySQL 8.4", "CockroachDB 24", "MariaDB 11", "SQL Server 2022")
WINDOWS = (
    "Tuesdays 14:00-16:00 UTC",
    "Thursdays 09:00-11:00 UTC",
    "weekdays 06:00-07:00 UTC",
    "Saturdays 22:00-23:00 UTC",
    "Mondays 13:00-15:00 UTC",
)
HEALTH = ("healthy", "degraded", "read-only", "draining", "in maintenance")

# name, question about "{subject}", values, volatility class
PREDICATES: dict[str, dict[str, Any]] = {
    "owning_team": {
        "question": "Which team owns the {subject}?",
        "values": TEAMS,
        "volatility": None,
    },
    "primary_region": {
        "question": "Which cloud region is the {subject} hosted in?",
        "values": REGIONS,
        "volatility": None,
    },
    "database_engine": {
        "question": "Which database engine does the {subject} use?",
        "values": ENGINES,
        "volatility": None,
    },
    "release_manager": {
        "question": "Who is the release manager of the {subject}?",
        "values": PEOPLE,
        "volatility": "fresh",
    },
    "deployment_window": {
        "question": "When is the deployment window of the {subject}?",
        "values": WINDOWS,
        "volatility": "fresh",
    },
    "on_call_engineer": {
        "question": "Who is the on-call engineer for the {subject}?",
        "values": PEOPLE,
        "volatility": "stale",
    },
    "health_status": {
        "question": "What is the health status of the {subject}?",
        "values": HEALTH,
        "volatility": "stale",
    },
    "replica_count": {
        "question": "How many replicas does the {subject} run?",
        "values": (2, 3, 4, 6, 8, 12),
        "volatility": "stale",
    },
}
VOLATILITY_SECONDS = {None: None, "fresh": FRESH_SECONDS, "stale": STALE_SECONDS}


def predicates_of(volatility: str | None) -> list[str]:
    return [name for name, p in PREDICATES.items() if p["volatility"] == volatility]


# G2: natural questions of each type, several ways of putting it.
CURRENT_QUESTIONS = {
    "owning_team": (
        "Which team owns the {subject} now?",
        "Who is responsible for the {subject} these days?",
        "What team currently owns the {subject}?",
    ),
    "primary_region": (
        "Which region does the {subject} run in now?",
        "Where is the {subject} hosted at the moment?",
        "What is the current region of the {subject}?",
    ),
    "database_engine": (
        "Which database does the {subject} use now?",
        "What database engine is the {subject} on at the moment?",
        "Is the {subject} still on the same database engine?",
    ),
}
HOW_TO_TASKS = (
    ("rotate the API credentials of the {system}", "credentials rotation"),
    ("restore the {system} from a backup", "backup restore"),
    ("add a read replica to the {system}", "read replica"),
    ("renew the TLS certificate of the {system}", "certificate renewal"),
    ("roll back a bad release of the {system}", "release rollback"),
    ("drain traffic away from the {system}", "traffic drain"),
    ("purge the cache of the {system}", "cache purge"),
    ("export the audit trail of the {system}", "audit export"),
)
HOW_TO_QUESTIONS = (
    "How do I {task}?",
    "What are the steps to {task}?",
    "Walk me through how to {task}.",
    "What's the right way to {task}?",
)
TODO_THINGS = (
    "Send {person} the migration plan for the {system}",
    "Review {person}'s pull request on the {system}",
    "Book the load test of the {system} with {person}",
    "Write the postmortem of the {system} outage for {person}",
    "Renew the support contract of the {system} before {person} leaves",
    "Call {person} about the {system} budget",
)
TODO_QUESTIONS = (
    "What am I supposed to do about the {system}?",
    "Did I promise {person} anything about the {system}?",
    "What's still on my plate for the {system}?",
    "Remind me what I owe {person}.",
)
SOURCE_KINDS = (
    {
        "title": "{system} runbook",
        "topic": "restarts",
        "sentence": "Before restarting the {system}, drain its connections and wait {n} seconds.",
        "questions": (
            "What does the {title} say about restarts?",
            "According to the {title}, what should happen before a restart?",
        ),
    },
    {
        "title": "{system} capacity report",
        "topic": "peak load",
        "sentence": "At peak the {system} served {n} thousand requests per minute with headroom to spare.",
        "questions": (
            "What did the {title} say about peak load?",
            "According to the {title}, how much traffic did it serve at peak?",
        ),
    },
    {
        "title": "{system} vendor contract",
        "topic": "support hours",
        "sentence": "The vendor answers {system} support tickets within {n} hours, weekdays only.",
        "questions": (
            "What does the {title} say about support hours?",
            "According to the {title}, how fast must the vendor answer?",
        ),
    },
    {
        "title": "{system} security review",
        "topic": "encryption",
        "sentence": "The review found that {system} backups are encrypted with keys rotated every {n} days.",
        "questions": (
            "What did the {title} conclude about encryption?",
            "In the {title}, what was found about the backups?",
        ),
    },
)
FILLER = (
    "This document is maintained by the operations group and reviewed every quarter.",
    "Questions about this document go to the team's chat channel.",
    "Earlier versions of this document are kept in the archive.",
    "Terms used here follow the company glossary.",
)
FIRST_NAMES = (
    "Amara",
    "Bastian",
    "Celine",
    "Dario",
    "Elif",
    "Fabian",
    "Greta",
    "Hamid",
    "Ines",
    "Jonas",
    "Kaito",
    "Leonie",
    "Mateo",
    "Nadia",
    "Oskar",
    "Priya",
)
LAST_NAMES = (
    "Albers",
    "Bianchi",
    "Castillo",
    "Dubois",
    "Eriksen",
    "Fischer",
    "Gallo",
    "Hoffmann",
    "Ivanova",
    "Jansen",
    "Kowalczyk",
    "Lindgren",
)
COMPANY_NAMES = (
    "Northwind",
    "Blue Harbor",
    "Copperleaf",
    "Redwood",
    "Silverline",
    "Granite Peak",
    "Lumen",
    "Tidewater",
    "Brightforge",
    "Ironbark",
)
COMPANY_KINDS = ("Traders", "Logistics", "Analytics", "Robotics", "Foods", "Health", "Energy")
CITIES = ("Rotterdam", "Valencia", "Gdansk", "Porto", "Leipzig", "Turin", "Bergen", "Ghent")
MULTI_HOP_QUESTIONS = (
    "In which city is the company that {person} works for based?",
    "Where is {person}'s employer headquartered?",
    "How is {person} connected to a city?",
)


class Draw:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        subjects = [f"{c} {n}" for c in CODENAMES for n in NOUNS]
        rng.shuffle(subjects)
        self.subjects = subjects
        self.systems = list(SYSTEMS)
        rng.shuffle(self.systems)
        people = [f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES]
        rng.shuffle(people)
        self.people = people
        companies = [f"{name} {kind}" for name in COMPANY_NAMES for kind in COMPANY_KINDS]
        rng.shuffle(companies)
        self.companies = companies
        self.incidents = list(range(len(INCIDENTS)))
        rng.shuffle(self.incidents)
        self.known: list[tuple[str, list[str]]] = []  # G1 subjects and the predicates told
        self.named: dict[str, list[str]] = {}  # G2 in other words: its systems, per split

    def name(self, split: str) -> str:
        """A system of G2 in other words, in the split's words, never used before.
        Shuffled on first use, so the items drawn before these draw as before."""
        if split not in self.named:
            named = [f"{c} {n}" for c in phrasing.CODENAMES for n in phrasing.NOUNS[split]]
            self.rng.shuffle(named)
            self.named[split] = named
        if not self.named[split]:
            raise ValueError(f"suite G2: more items than {split} systems")
        return self.named[split].pop()

    def subject(self) -> str:
        """A subject no other item uses (codename and noun)."""
        return self.subjects.pop()

    def lookalike(self) -> str:
        """An unused subject that shares its codename with one the agent was told
        about (another noun), or any unused one when there is none."""
        for known, _ in self.known[::-1]:
            codename = known.split()[0]
            free = [s for s in self.subjects if s.split()[0] == codename]
            if free:
                choice = self.rng.choice(free)
                self.subjects.remove(choice)
                return choice
        return self.subject()

    def system(self) -> str:
        if not self.systems:
            raise ValueError("suite G: more items than systems")
        return self.systems.pop()

    def person(self) -> str:
        return self.people.pop()


def _claim(ref: str, subject: str, predicate: str, value: Any, **extra: Any) -> dict[str, Any]:
    claim = {
        "subject": subject,
        "predicate": predicate,
        "valid_from": iso(VALID_FROM),
        "source_type": "tool_result",
        "source_ref": f"battery:g:{ref}",
        "actor": ACTOR,
        **extra,
    }
    if "object_entity" not in extra:
        claim["value"] = value
    return {"ref": ref, "claim": claim}


def _spec(kind: str, number: int, title: str, code: F, data: dict[str, Any], **metrics) -> ItemSpec:
    planned: dict[str, int] = {}
    for check in data["checks"]:
        planned[check] = planned.get(check, 0) + 1
    return ItemSpec(
        key=f"{kind}_{number:04d}",
        title=title,
        default_code=code,
        data=data,
        metrics={"kind": kind.upper(), "planned": planned, **metrics},
    )


# ------------------------------------------------------------ G1 do I need to look?


def g1_look(draw: Draw, count: int) -> list[ItemSpec]:
    specs = [_g1_item(draw, number) for number in range(1, count + 1)]
    return specs


def _g1_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    kind = G1_KINDS[(number - 1) % len(G1_KINDS)]
    variant = (number - 1) // len(G1_KINDS) % 2  # two ways of each kind, alternating
    facts: list[dict[str, Any]] = []
    ref = f"g1_{number:04d}"
    if kind == "unknowable":
        if variant == 0 or not draw.known:
            how = "unknown_subject"
            subject = draw.lookalike()  # never told anything, named like what was
            predicate = rng.choice(list(PREDICATES))
        else:
            how = "unknown_predicate"
            subject, told = draw.known[rng.randrange(len(draw.known))]
            predicate = rng.choice([p for p in PREDICATES if p not in told])
        value = None
    else:
        subject = draw.subject()
        if kind == "stable":
            how = "no_volatility" if variant == 0 else "fresh"
            predicate = rng.choice(predicates_of(None if variant == 0 else "fresh"))
        else:
            how = "older_than_volatility"
            predicate = rng.choice(predicates_of("stale"))
        value = rng.choice(PREDICATES[predicate]["values"])
        facts.append(_claim(f"{ref}:fact", subject, predicate, value))
        # Something else the agent knows about it, of another predicate.
        other = rng.choice(
            [p for p in PREDICATES if p != predicate and PREDICATES[p]["volatility"] is None]
        )
        facts.append(
            _claim(f"{ref}:other", subject, other, rng.choice(PREDICATES[other]["values"]))
        )
        draw.known.append((subject, [predicate, other]))
    checks = ["abstain"] if kind == "unknowable" else ["abstain", "value", "staleness"]
    question = {
        "text": PREDICATES[predicate]["question"].format(subject=subject),
        "route": "current_fact",
        "subject": subject,
        "predicate": predicate,
        "expects": None if value is None else {"value": value},
        "needs_recheck": kind == "stale",
    }
    data = {"facts": facts, "question": question, "checks": checks}
    title = f"G1 {kind} ({how.replace('_', ' ')}): {predicate} of a {subject.split()[-1]}"
    code = {"stable": F.R2, "stale": F.R0, "unknowable": F.R3}[kind]
    return _spec("g1", number, title, code, data, look=kind, how=how)


# ------------------------------------------------------------------- G2 routes


def g2_routes(draw: Draw, count: int) -> list[ItemSpec]:
    return [_g2_item(draw, number) for number in range(1, count + 1)]


def _g2_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    route = ROUTES[(number - 1) % len(ROUTES)]
    ref = f"g2_{number:04d}"
    data: dict[str, Any] = {"facts": [], "checks": list(G2_METRICS)}
    if route == "current_fact":
        subject = draw.subject()
        predicate = rng.choice(list(CURRENT_QUESTIONS))
        value = rng.choice(PREDICATES[predicate]["values"])
        data["facts"].append(_claim(f"{ref}:fact", subject, predicate, value))
        text = rng.choice(CURRENT_QUESTIONS[predicate]).format(subject=subject)
        expects = {"kind": "fact", "ref": f"{ref}:fact", "value": value}
    elif route == "what_happened":
        system, actor = draw.system(), rng.choice(PEOPLE)
        occurred = EPISODE_AT + timedelta(hours=rng.randrange(0, 24 * 30))
        if rng.random() < 0.5:
            incident = INCIDENTS[draw.incidents.pop()]
            texts = {k: incident[k] for k in ("summary", "action", "observation")}
            entities = list(incident["entities"])
            text = incident["question"]
        else:
            template = rng.choice(ACTIONS)
            slots = {"actor": actor, "system": system, "env": "prod-eu", "n": 7, "version": "4.2.0"}
            texts = {k: template[k].format(**slots) for k in ("summary", "action", "observation")}
            entities = [system]
            text = template["question"].format(**slots)
        data["episode"] = _episode(ref, occurred, texts, rng, actor, entities)
        expects = {"kind": "episode", "ref": f"{ref}:episode"}
    elif route == "how_to":
        system = draw.system()
        task, keyword = rng.choice(HOW_TO_TASKS)
        task = task.format(system=system)
        data["skill"] = _skill(ref, number, system, task, keyword)
        text = rng.choice(HOW_TO_QUESTIONS).format(task=task)
        expects = {"kind": "skill", "ref": f"{ref}:skill"}
    elif route == "what_to_do":
        system, person = draw.system(), draw.person()
        description = rng.choice(TODO_THINGS).format(system=system, person=person)
        data["intention"] = {
            "ref": f"{ref}:intention",
            "description": description,
            "trigger_type": "manual",
            "source_session": f"{ref}-session",
        }
        text = rng.choice(TODO_QUESTIONS).format(system=system, person=person)
        expects = {"kind": "intention", "ref": f"{ref}:intention"}
    elif route == "source":
        system = draw.system()
        kind = rng.choice(SOURCE_KINDS)
        title = kind["title"].format(system=system)
        title = title[0].upper() + title[1:]
        sentence = kind["sentence"].format(system=system, n=rng.randrange(5, 95))
        filler = rng.sample(list(FILLER), 3)
        content = "\n\n".join([f"{title}.", filler[0], sentence, filler[1], filler[2]])
        data["source"] = {"ref": f"{ref}:source", "title": title, "content": content}
        text = rng.choice(kind["questions"]).format(title=title)
        expects = {"kind": "chunk", "ref": f"{ref}:source", "sentence": sentence}
    else:  # multi_hop
        person, company, city = draw.person(), draw.companies.pop(), rng.choice(CITIES)
        data["facts"] += _employment(ref, person, company, city)
        text = rng.choice(MULTI_HOP_QUESTIONS).format(person=person)
        expects = {"kind": "path", "refs": [f"{ref}:works_for", f"{ref}:based_in"]}
    data["question"] = {"text": text, "route": "auto", "expected_route": route, "expects": expects}
    title = f"G2 route: {route.replace('_', ' ')}"
    return _spec("g2", number, title, F.R1, data, route=route, split="template")


def g2_worded(draw: Draw, count: int, first: int) -> list[ItemSpec]:
    """G2 in other words (phrasing.py): routes in turn, and the seen and the
    held-out vocabulary in turn, one route cycle each; numbered from `first`."""
    specs = []
    for index in range(count):
        route = ROUTES[index % len(ROUTES)]
        split = phrasing.SPLITS[index // len(ROUTES) % len(phrasing.SPLITS)]
        specs.append(_g2_worded_item(draw, first + index, route, split))
    return specs


def _g2_worded_item(draw: Draw, number: int, route: str, split: str) -> ItemSpec:
    rng = draw.rng
    ref = f"g2_{number:04d}"
    data: dict[str, Any] = {"facts": [], "checks": list(G2_METRICS)}
    if route == "multi_hop":
        person, company, city = draw.person(), draw.companies.pop(), rng.choice(CITIES)
        data["facts"] += _employment(ref, person, company, city)
        text = phrasing.draw_question(rng, route, split, {"person": person})
        expects = {"kind": "path", "refs": [f"{ref}:works_for", f"{ref}:based_in"]}
    else:
        system = draw.name(split)
    if route == "current_fact":
        predicate = rng.choice(list(CURRENT_QUESTIONS))
        value = rng.choice(PREDICATES[predicate]["values"])
        data["facts"].append(_claim(f"{ref}:fact", system, predicate, value))
        slots = {"subject": system, "predicate": predicate}
        text = phrasing.draw_question(rng, route, split, slots)
        expects = {"kind": "fact", "ref": f"{ref}:fact", "value": value}
    elif route == "what_happened":
        actor = rng.choice(PEOPLE)
        event = rng.choice(phrasing.EVENTS[split])
        occurred = EPISODE_AT + timedelta(hours=rng.randrange(0, 24 * 30))
        slots = {"actor": actor, "system": system, "n": rng.randrange(3, 30), "version": "4.2.0"}
        texts = {k: phrasing.cap(event[k].format(**slots)) for k in ("summary", "action")}
        texts["observation"] = event["observation"].format(**slots)
        data["episode"] = _episode(ref, occurred, texts, rng, actor, [system])
        slots["event"] = event["event"]
        text = phrasing.draw_question(rng, route, split, slots)
        expects = {"kind": "episode", "ref": f"{ref}:episode"}
    elif route == "how_to":
        task, keyword = rng.choice(phrasing.TASKS[split])
        task = task.format(system=system)
        data["skill"] = _skill(ref, number, system, task, keyword)
        text = phrasing.draw_question(rng, route, split, {"task": task})
        expects = {"kind": "skill", "ref": f"{ref}:skill"}
    elif route == "what_to_do":
        person = draw.person()
        description = rng.choice(phrasing.ERRANDS[split]).format(system=system, person=person)
        data["intention"] = {
            "ref": f"{ref}:intention",
            "description": description,
            "trigger_type": "manual",
            "source_session": f"{ref}-session",
        }
        slots = {"system": system, "person": person}
        text = phrasing.draw_question(rng, route, split, slots)
        expects = {"kind": "intention", "ref": f"{ref}:intention"}
    elif route == "source":
        document = rng.choice(phrasing.DOCUMENTS[split])
        title = phrasing.cap(document["title"].format(system=system))
        sentence = phrasing.cap(document["sentence"].format(system=system, n=rng.randrange(5, 95)))
        filler = rng.sample(list(FILLER), 3)
        content = "\n\n".join([f"{title}.", filler[0], sentence, filler[1], filler[2]])
        data["source"] = {"ref": f"{ref}:source", "title": title, "content": content}
        slots = {"title": title, "topic": document["topic"]}
        text = phrasing.draw_question(rng, route, split, slots)
        expects = {"kind": "chunk", "ref": f"{ref}:source", "sentence": sentence}
    question = {"text": text, "route": "auto", "expected_route": route, "expects": expects}
    data["question"] = {**question, "split": split}
    title = f"G2 route in other words ({split.replace('_', '-')}): {route.replace('_', ' ')}"
    return _spec("g2", number, title, F.R1, data, route=route, split=split)


def _episode(ref, occurred, texts, rng, actor, entities) -> dict[str, Any]:
    return {
        "ref": f"{ref}:episode",
        "occurred_at": iso(occurred),
        **texts,
        "outcome": rng.choice(("success", "failure", "partial")),
        "actor": actor,
        "environment": "prod-eu",
        "session_id": f"{ref}-session",
        "entities": entities,
        "source_type": "observation",
    }


def _skill(ref: str, number: int, system: str, task: str, keyword: str) -> dict[str, Any]:
    return {
        "ref": f"{ref}:skill",
        "name": f"{keyword.replace(' ', '-')}-{system.replace(' ', '-')}-{number}",
        "purpose": task[0].upper() + task[1:],
        "trigger": {"keywords": [*keyword.split(), *system.split()], "min_keywords": 2},
        "parameter_schema": {
            "type": "object",
            "properties": {"target": {"type": "string"}},
            "required": ["target"],
        },
        "procedure": "def run(params, tools):\n    return 'done: ' + params['target']\n",
        "examples": [{"params": {"target": system}, "expected": f"done: {system}"}],
    }


def _employment(ref: str, person: str, company: str, city: str) -> list[dict[str, Any]]:
    return [
        _claim(
            f"{ref}:works_for",
            person,
            "works_for",
            None,
            object_entity=company,
            subject_type="person",
            object_type="org",
        ),
        _claim(
            f"{ref}:based_in",
            company,
            "headquartered_in",
            None,
            object_entity=city,
            subject_type="org",
            object_type="place",
        ),
    ]


# ---------------------------------------------------------- G3 in other words


def g3_paraphrased(rng: random.Random, count: int) -> list[ItemSpec]:
    """Suite G3's items (paraphrase.py): in blocks of four (two to answer, one
    never stated, one look-alike), the seen and held-out vocabularies in turn."""
    draw = paraphrase.ParaphraseDraw(rng)
    specs = []
    for number in range(1, count + 1):
        split = paraphrase.SEEN if (number - 1) // 4 % 2 == 0 else paraphrase.HELD_OUT
        item = paraphrase.draw_item(draw, number, split)
        facts = [
            _claim(
                fact["ref"],
                fact["subject"],
                fact["predicate"],
                fact["value"],
                # The value asked about changed: the first one ended when the second began.
                valid_from=iso(VALID_FROM if fact["ref"].endswith(":old") else G3_CHANGED_AT),
            )
            for fact in item["facts"]
        ]
        kind = item["kind"]
        question = {**item["question"], "route": "auto", "kind": kind, "split": split}
        checks = ["stale"] if kind == "answer" else ["false_answer"]
        data = {"facts": facts, "question": question, "checks": checks}
        title = f"G3 {kind.replace('_', ' ')} ({split.replace('_', '-')}): {item['family']}"
        code = F.R3  # a stale value shown as current, or an answer where none is stored
        specs.append(_spec("g3", number, title, code, data, g3=kind, split=split))
    return specs


def generate(rng: random.Random, counts: dict[str, int] | None = None) -> list[ItemSpec]:
    """Every item of a run: G1, G2 in the router's template words, G3, then
    G2 in other words (numbered after the first G2 items)."""
    counts = {**COUNTS, **(counts or {})}
    draw = Draw(rng)
    return [
        *g1_look(draw, counts["g1"]),
        *g2_routes(draw, counts["g2"]),
        *g3_paraphrased(rng, counts.get("g3", 0)),
        *g2_worded(draw, counts.get("g2_words", 0), first=counts["g2"] + 1),
    ]


def predicate_definitions() -> dict[str, int | None]:
    """The volatility each predicate the run uses is defined with, by name."""
    return {name: VOLATILITY_SECONDS[p["volatility"]] for name, p in PREDICATES.items()}
