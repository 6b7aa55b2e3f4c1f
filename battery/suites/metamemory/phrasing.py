"""Suite G2 in words the router was not written with (issue 20).

G2's first 60 questions come from templates (draw.py) that match the
router's own rules one for one ("How do I …" for how_to, "According to the
…" for source), so they measure whether the rules still fire, not whether
recall tells the memory types apart. The questions here ask the same six
things in other words, about things named in other words (systems, document
titles, events), split in two:

* `seen`: words the router does not hold as they were written; a change to
  the router may learn from them (they are then no longer a fair measure);
* `held_out`: never to be learned from. A test
  (recall/tests/test_route_vocabulary.py) checks that no distinctive
  word of theirs, nor of the questions drawn from them, appears in the
  router's rules or prototype questions, in any form the code compares:
  `route_accuracy_held_out` measures what the router understands, not what
  it was told. Function words (what, which, is, of) are not distinctive.

Every slot's material is per split too: the systems asked about, the events
an episode tells, the tasks a skill does, the documents' kinds and topics.
"""

from __future__ import annotations

import re
from typing import Any

SEEN, HELD_OUT = "seen", "held_out"
SPLITS = (SEEN, HELD_OUT)

# The things asked about ("the Vela ledger"), a codename and a noun.
CODENAMES = (
    "Aster",
    "Bramble",
    "Calypso",
    "Dahlia",
    "Ember",
    "Fennel",
    "Galena",
    "Hazel",
    "Ivory",
    "Jade",
    "Kyanite",
    "Lupin",
    "Mistral",
    "Nova",
    "Opal",
    "Peony",
    "Quill",
    "Rune",
    "Sable",
    "Topaz",
)
NOUNS = {
    SEEN: ("ledger", "scheduler", "indexer", "dispatcher"),
    HELD_OUT: ("relay", "mailer", "tracker", "uploader"),
}

# current_fact: a subject's attribute, the predicates of draw.CURRENT_QUESTIONS.
CURRENT = {
    SEEN: {
        "owning_team": (
            "Which group takes care of the {subject}?",
            "Which crew answers for the {subject}?",
        ),
        "primary_region": (
            "In which region does the {subject} sit?",
            "Which cloud region serves the {subject}?",
        ),
        "database_engine": (
            "Which database underpins the {subject}?",
            "What storage engine sits under the {subject}?",
        ),
    },
    HELD_OUT: {
        "owning_team": (
            "Which squad looks after the {subject}?",
            "Which unit has custody of the {subject}?",
        ),
        "primary_region": (
            "Where in the cloud does the {subject} reside?",
            "Which geography houses the {subject}?",
        ),
        "database_engine": (
            "What database software powers the {subject}?",
            "Which DBMS holds the records of the {subject}?",
        ),
    },
}

# what_happened: an episode of {actor} doing {event} to {system}.
EVENTS = {
    SEEN: (
        {
            "event": "upgrade",
            "summary": "{actor} upgraded the {system} to version {version}",
            "action": "Upgraded the {system} in prod-eu to {version}",
            "observation": "The upgrade took {n} minutes",
        },
        {
            "event": "scale-out",
            "summary": "{actor} scaled the {system} out to {n} replicas",
            "action": "Raised the replica count of the {system} to {n}",
            "observation": "CPU per replica dropped after the scale-out",
        },
        {
            "event": "load test",
            "summary": "{actor} load-tested the {system} at {n} thousand requests per second",
            "action": "Drove {n} thousand requests per second at the {system}",
            "observation": "Latency held until the last step of the ramp",
        },
    ),
    HELD_OUT: (
        {
            "event": "patch",
            "summary": "{actor} patched a vulnerability in the {system}",
            "action": "Applied the vendor patch to the {system} in prod-eu",
            "observation": "The scanner no longer flagged the CVE after {n} minutes",
        },
        {
            "event": "migration",
            "summary": "{actor} migrated the {system} to the new cluster",
            "action": "Moved the {system} workloads to the new cluster",
            "observation": "Cutover took {n} minutes of reduced capacity",
        },
        {
            "event": "disk resize",
            "summary": "{actor} resized the disks of the {system} to {n} terabytes",
            "action": "Grew the {system} volumes online to {n} terabytes",
            "observation": "Write latency spiked for a few seconds during the resize",
        },
    ),
}
HAPPENED = {
    SEEN: (
        "How did {actor}'s {event} of the {system} pan out?",
        "Tell me about {actor}'s {event} of the {system}.",
        "Any surprises during {actor}'s {event} of the {system}?",
    ),
    HELD_OUT: (
        "Any news from {actor}'s {event} of the {system}?",
        "Fill me in on {actor}'s {event} of the {system}.",
        "Did anything misfire in {actor}'s {event} of the {system}?",
    ),
}

# how_to: a skill that does {task}; the keyword its trigger needs.
TASKS = {
    SEEN: (
        ("restore the {system} from a backup", "backup restore"),
        ("add a read replica to the {system}", "read replica"),
        ("purge the cache of the {system}", "cache purge"),
    ),
    HELD_OUT: (
        ("renew the TLS certificate of the {system}", "certificate renewal"),
        ("reindex the {system}", "reindex"),
        ("enable tracing on the {system}", "tracing"),
    ),
}
HOW_TO = {
    SEEN: (
        "What's the drill to {task}?",
        "Teach me to {task}.",
        "Any tips to {task}?",
    ),
    HELD_OUT: (
        "Explain the method to {task}.",
        "I have to {task}; where do I start?",
        "Coach me to {task}.",
    ),
}

# what_to_do: an open intention about {system} for {person}.
ERRANDS = {
    SEEN: (
        "Send {person} the capacity plan for the {system}",
        "Book the load test of the {system} with {person}",
        "Call {person} about the {system} budget",
    ),
    HELD_OUT: (
        "Hand {person} the migration plan for the {system}",
        "Renew the support contract of the {system} before {person} leaves",
        "Pair with {person} on the {system} cost cuts",
    ),
}
TODO = {
    SEEN: (
        "What have I signed up to deliver for {person}?",
        "Is anything waiting on me for the {system}?",
        "Which errands are open for the {system}?",
    ),
    HELD_OUT: (
        "Which chores await me on the {system}?",
        "What have I taken on for {person}?",
        "Have I left {person} hanging on something?",
    ),
}

# source: a document of its own kind, titled "{System} <kind>", one sentence
# of which answers a question about its topic.
DOCUMENTS = {
    SEEN: (
        {
            "title": "{system} primer",
            "topic": "reboots",
            "sentence": "Reboots of the {system} wait until its connections drain, "
            "at least {n} seconds.",
        },
        {
            "title": "{system} capacity dossier",
            "topic": "peak traffic",
            "sentence": "At peak the {system} served {n} thousand requests per minute "
            "with headroom to spare.",
        },
    ),
    HELD_OUT: (
        {
            "title": "{system} support charter",
            "topic": "ticket replies",
            "sentence": "The vendor answers {system} tickets within {n} hours, weekdays only.",
        },
        {
            "title": "{system} encryption bulletin",
            "topic": "backups",
            "sentence": "{system} backups are encrypted with keys replaced every {n} days.",
        },
    ),
}
SOURCE = {
    SEEN: (
        "What does the {title} tell us about {topic}?",
        "Look up {topic} in the {title}.",
        "Per the {title}, what about {topic}?",
    ),
    HELD_OUT: (
        "What does the {title} cover on {topic}?",
        "Which part of the {title} touches on {topic}?",
        "Per the {title}, what holds for {topic}?",
    ),
}

# multi_hop: {person} works for a company headquartered in a city.
MULTI_HOP = {
    SEEN: (
        "Where does the business that employs {person} have its head office?",
        "Which city is home to {person}'s place of employment?",
        "In which city does {person}'s paymaster sit?",
    ),
    HELD_OUT: (
        "Which town is home to the outfit that pays {person}'s salary?",
        "From which city does {person}'s paymaster operate?",
        "Where is the head office of the business that hired {person}?",
    ),
}

SLOT = re.compile(r"\{[a-z_]+\}")


def phrasings(split: str) -> list[str]:
    """Every question template of a split, slots and all."""
    out = [q for qs in CURRENT[split].values() for q in qs]
    for group in (HAPPENED, HOW_TO, TODO, SOURCE, MULTI_HOP):
        out.extend(group[split])
    return out


def material(split: str) -> list[str]:
    """What a split's slots are filled with: nouns, events, tasks, titles, topics."""
    out = list(NOUNS[split])
    out += [event["event"] for event in EVENTS[split]]
    out += [task for task, _ in TASKS[split]]
    out += [f"{doc['title']} {doc['topic']}" for doc in DOCUMENTS[split]]
    return out


def vocabulary_words(split: str) -> set[str]:
    """Every word of a split's templates and slot material (lower case)."""
    text = " ".join([*phrasings(split), *material(split)])
    return words(SLOT.sub(" ", text))


def words(text: str) -> set[str]:
    """Lower-case words, a possessive or contracted 's dropped (what's → what)."""
    return set(re.findall(r"[a-z]+", re.sub(r"'s\b", "", text.lower())))


def cap(text: str) -> str:
    return text[0].upper() + text[1:]


def draw_question(rng, route: str, split: str, things: dict[str, Any]) -> str:
    """A question of `route` in the split's words, its slots from `things`."""
    templates = {
        "what_happened": HAPPENED,
        "how_to": HOW_TO,
        "what_to_do": TODO,
        "source": SOURCE,
        "multi_hop": MULTI_HOP,
    }
    if route == "current_fact":
        chosen = rng.choice(CURRENT[split][things["predicate"]])
    else:
        chosen = rng.choice(templates[route][split])
    return chosen.format(**things)
