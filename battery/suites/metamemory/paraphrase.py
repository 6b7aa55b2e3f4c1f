"""Suite G3 "asked in other words": facts stored as an agent writes key-value
state, asked in plain words that paraphrase the predicate.

Each family is one kind of attribute (a deadline, a place, what a team works
on, …) with several predicate names an agent might store it under and
several ways a person asks for it. Both are split in two: `seen` and
`held_out`. The held-out names and phrasings were written for this suite
only, and a test (recall/tests/test_paraphrase.py) checks that no
distinctive word of theirs appears in the lists recall decides with (the
curated phrases and question cues of recall/about.py, the router's
rules and prototypes): the held-out items measure what the service
understands from WordNet and the embedding, not what it was told. Function
words (when, where, who, is, of) are not distinctive.

Items (a seeded draw, pure):
* `answer`: a subject with the family's value stated twice (the first value
  superseded by the second) and one or two other attributes; the question
  paraphrases the family. The current value must come first, and the
  superseded one must never be presented as current.
* `never_stated`: the subject is known, with other attributes, but no value
  of the family asked was ever stated about it (other subjects have one).
  Abstain.
* `lookalike`: the question names a subject the agent was never told about,
  named like one it was (same noun, another codename). Abstain.
"""

from __future__ import annotations

import random
from typing import Any

SEEN, HELD_OUT = "seen", "held_out"
ITEM_KINDS = ("answer", "answer", "never_stated", "lookalike")

# Each family: the nouns of subjects it fits, the predicate names (seen /
# held out), the two values stated (old, then current) drawn from `values`,
# and the phrasings ({s} is the subject).
FAMILIES: dict[str, dict[str, Any]] = {
    "deadline": {
        "nouns": ("report", "export", "migration", "audit", "rollout", "redesign"),
        "names": {SEEN: ("deadline", "due_date"), HELD_OUT: ("cutoff_date", "delivery_date")},
        "values": ("March 3", "April 14", "May 30", "June 2", "July 21", "September 9"),
        "phrasings": {
            SEEN: (
                "When is the {s} due?",
                "By when does the {s} need to be done?",
                "When is the {s} due by?",
                "What is the deadline for the {s}?",
            ),
            HELD_OUT: (
                "When does the {s} have to be finished?",
                "When must the {s} be delivered?",
                "How long do we have to complete the {s}?",
                "When should the {s} be wrapped up?",
            ),
        },
    },
    "location": {
        "nouns": ("offsite", "workshop", "summit", "retreat", "hackathon"),
        "names": {SEEN: ("location", "venue"), HELD_OUT: ("site", "meeting_spot")},
        "values": ("Lisbon office", "Hotel Arca", "Room 4B", "the Oslo hub", "Castle Hall"),
        "phrasings": {
            SEEN: (
                "Where is the {s} being held?",
                "Where is the {s} taking place?",
                "Where does the {s} happen?",
                "What is the location of the {s}?",
            ),
            HELD_OUT: (
                "Where will the {s} convene?",
                "Where are we gathering for the {s}?",
                "In which town is the {s}?",
                "Where should attendees travel to for the {s}?",
            ),
        },
    },
    "allocation": {
        "nouns": ("squad", "crew", "pod", "guild"),
        "names": {SEEN: ("allocation", "assignment"), HELD_OUT: ("current_project", "workstream")},
        "values": ("Project Kite", "Project Loom", "the billing rewrite", "Project Ember"),
        "phrasings": {
            SEEN: (
                "Which project is the {s} working on?",
                "What is the {s} assigned to?",
                "What is the {s} busy with?",
                "What is the allocation of the {s}?",
            ),
            HELD_OUT: (
                "Which initiative has the {s} been put on?",
                "What is the {s} focused on these days?",
                "What effort is the {s} staffed on?",
                "Which programme does the {s} spend its time on?",
            ),
        },
    },
    "owner": {
        "nouns": (
            *("report", "export", "migration", "audit", "rollout", "redesign"),
            *("offsite", "workshop", "summit", "retreat", "hackathon"),
            *("squad", "crew", "pod", "guild"),
        ),
        "names": {SEEN: ("owner", "responsible_person"), HELD_OUT: ("steward", "custodian")},
        "values": ("Amara Albers", "Dario Dubois", "Priya Jansen", "Oskar Gallo", "Ines Bianchi"),
        "phrasings": {
            SEEN: (
                "Who owns the {s}?",
                "Who is responsible for the {s}?",
                "Who is in charge of the {s}?",
                "Who is the owner of the {s}?",
            ),
            HELD_OUT: (
                "Who looks after the {s}?",
                "Who should I talk to about the {s}?",
                "Who cares for the {s}?",
                "Who is the caretaker of the {s}?",
            ),
        },
    },
    "headcount": {
        "nouns": ("squad", "crew", "pod", "guild"),
        "names": {SEEN: ("headcount", "team_size"), HELD_OUT: ("staff_count", "member_count")},
        "values": (4, 5, 7, 9, 12, 15),
        "phrasings": {
            SEEN: (
                "How many people are on the {s}?",
                "How big is the {s}?",
                "What is the headcount of the {s}?",
                "How many people does the {s} have?",
            ),
            HELD_OUT: (
                "How many engineers does the {s} have?",
                "How large is the {s}?",
                "How many members does the {s} count?",
                "How many folks sit in the {s}?",
            ),
        },
    },
    "status": {
        "nouns": ("report", "export", "migration", "audit", "rollout", "redesign"),
        "names": {SEEN: ("status", "state"), HELD_OUT: ("phase", "progress")},
        "values": ("planning", "in review", "blocked", "rolling out", "done"),
        "phrasings": {
            SEEN: (
                "What is the status of the {s}?",
                "What state is the {s} in?",
                "How is the {s} doing?",
                "What's the status of the {s} now?",
            ),
            HELD_OUT: (
                "How is the {s} going?",
                "How far along is the {s}?",
                "What condition is the {s} in?",
                "What stage has the {s} reached?",
            ),
        },
    },
    "budget": {
        "nouns": ("migration", "redesign", "offsite", "summit", "hackathon", "squad", "guild"),
        "names": {SEEN: ("budget",), HELD_OUT: ("spending_cap", "funding")},
        "values": ("12000 EUR", "40000 EUR", "7500 USD", "90000 USD", "3000 GBP"),
        "phrasings": {
            SEEN: (
                "How much money does the {s} have?",
                "What is the budget of the {s}?",
                "How much is budgeted for the {s}?",
            ),
            HELD_OUT: (
                "How much can the {s} spend?",
                "How much funding does the {s} get?",
                "What may the {s} cost at most?",
            ),
        },
    },
    "start": {
        "nouns": ("migration", "rollout", "redesign", "workshop", "summit", "retreat", "hackathon"),
        "names": {SEEN: ("start_date",), HELD_OUT: ("kickoff", "opening_day")},
        "values": ("February 2", "March 16", "April 1", "May 11", "October 5"),
        "phrasings": {
            SEEN: (
                "When does the {s} start?",
                "When is the {s} starting?",
                "What is the start date of the {s}?",
            ),
            HELD_OUT: (
                "When does the {s} begin?",
                "When will the {s} kick off?",
                "On what day does the {s} commence?",
            ),
        },
    },
}

CODENAMES = (
    "Amber",
    "Basalt",
    "Cinder",
    "Drift",
    "Ember",
    "Fjord",
    "Garnet",
    "Harbor",
    "Indigo",
    "Jasper",
    "Kelp",
    "Lagoon",
    "Moss",
    "Nectar",
    "Onyx",
    "Pebble",
    "Quartz",
    "Reef",
    "Saffron",
    "Thistle",
    "Umber",
    "Violet",
    "Willow",
    "Yarrow",
    "Zephyr",
    "Alder",
    "Birch",
    "Cedar",
    "Dune",
    "Elm",
    "Flint",
    "Glade",
    "Heath",
    "Iris",
    "Juniper",
    "Knoll",
    "Larch",
    "Maple",
    "Nettle",
    "Oak",
    "Pine",
    "Rowan",
    "Sorrel",
    "Tansy",
    "Vale",
)


def families_for(noun: str) -> list[str]:
    return [name for name, family in FAMILIES.items() if noun in family["nouns"]]


NOUNS = tuple(sorted({noun for family in FAMILIES.values() for noun in family["nouns"]}))


def vocabulary_words(split: str) -> set[str]:
    """Every word of a split's predicate names and phrasings (lower case)."""
    import re

    words: set[str] = set()
    for family in FAMILIES.values():
        for name in family["names"][split]:
            words.update(name.split("_"))
        for phrasing in family["phrasings"][split]:
            words.update(re.findall(r"[a-z]+", phrasing.lower().replace("{s}", "")))
    return words


class ParaphraseDraw:
    """Unique subjects ("Amber squad") and who was told what."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        subjects = [(c, n) for c in CODENAMES for n in NOUNS]
        rng.shuffle(subjects)
        self.free = subjects
        self.told: list[tuple[str, str]] = []  # (codename, noun) of subjects with facts

    def subject(self, noun: str | None = None) -> tuple[str, str]:
        for index, (_, n) in enumerate(self.free):
            if noun is None or n == noun:
                return self.free.pop(index)
        raise ValueError(f"suite G3: no unused subject left for {noun!r}")

    def left(self, noun: str) -> int:
        return sum(1 for _, n in self.free if n == noun)

    def lookalike(self, noun: str) -> str:
        """A subject never told about, with the noun of one that was."""
        codename, _ = self.subject(noun)
        return f"{codename} {noun}"


def draw_item(draw: ParaphraseDraw, number: int, split: str) -> dict[str, Any]:
    """One G3 item's facts and question (see the module)."""
    rng = draw.rng
    kind = ITEM_KINDS[(number - 1) % len(ITEM_KINDS)]
    noun = rng.choice([n for n in NOUNS if len(families_for(n)) >= 3 and draw.left(n) >= 2])
    fits = families_for(noun)
    asked = rng.choice(fits)
    codename, _ = draw.subject(noun)
    subject = f"{codename} {noun}"
    ref = f"g3_{number:04d}"
    others = [f for f in fits if f != asked]
    rng.shuffle(others)
    stated = others[: rng.choice((1, 2))]
    if kind in ("answer", "lookalike"):
        stated = [asked, *stated]  # a look-alike's twin holds what is asked
    facts: list[dict[str, Any]] = []
    expects = None
    for family_name in stated:
        family = FAMILIES[family_name]
        predicate = rng.choice(family["names"][split])
        old, new = rng.sample(list(family["values"]), 2)
        if family_name == asked:
            facts.append(
                {"ref": f"{ref}:old", "subject": subject, "predicate": predicate, "value": old}
            )
            facts.append(
                {"ref": f"{ref}:fact", "subject": subject, "predicate": predicate, "value": new}
            )
            expects = {"value": new, "stale": old, "predicate": predicate}
        else:
            facts.append(
                {
                    "ref": f"{ref}:{family_name}",
                    "subject": subject,
                    "predicate": predicate,
                    "value": new,
                }
            )
    asked_about = draw.lookalike(noun) if kind == "lookalike" else subject
    phrasing = rng.choice(FAMILIES[asked]["phrasings"][split])
    return {
        "kind": kind,
        "split": split,
        "family": asked,
        "facts": facts,
        "question": {"text": phrasing.format(s=asked_about), "expects": expects},
    }
