"""Suite C6 "asked through recall": a fact whose value changed, asked in plain
words through POST /api/v1/recall (route auto), as an agent asks.

C1-C5 ask the facts endpoints by subject and predicate, so they never see a
similar stale value outrank the current one. Here the old values are
textually close to the current one ("Room 4.12" then "Room 4.21", "v2.3.1"
then "v2.3.7", "Copper Pantry" then "Copper Bistro"), and the question names
neither the predicate nor the value the way they were stored.

The vocabulary. Eight attribute families, each for a group of subject nouns
(events, desks, machines, vehicles), with predicate names, subject nouns and
question phrasings in two parts:
* `seen`: the question asks in a word of the predicate's own name ("Which
  room is the Quokka retro in?" for `room`), about a subject with a seen
  noun;
* `held_out`: other predicate names, nouns and phrasings, written for this
  family only; a held-out question never uses a word of the predicate's name
  ("Where do we gather for the Quokka gala?" for `hall`).
No distinctive word of either part is in the lists recall decides with (the
router's rules and prototypes, about.py's curated phrases and question cues,
lexicon.py's kind anchors): recall/tests/test_asked_vocabulary.py
checks it, so the held-out figures measure what the service understands from
WordNet and the embedding, not what it was told.

Items (pure: a function of the random.Random given), alternately seen and
held out, their kind cycling through KINDS:
* `chain`: 2-3 values told in valid-time order; the last is current.
* `late`: the current value told first, the older ones after it (late
  evidence: the newest record is not the newest value).
* `corrected`: an old value, then a new one, then that new one corrected
  (POST /facts/{id}/correct: it was a typo) to the current value.
* `ended`: 1-2 values, the last ended in the past: nothing is current.
* `never_stated`: the subject has other attributes, never this one (other
  subjects have it).
Every subject also has one or two other attributes of its group, so a
question must pick the right one.
"""

from __future__ import annotations

import random
import re
import string
from datetime import UTC, datetime, timedelta
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F
from .draw import ACTOR, iso

SEEN, HELD_OUT = "seen", "held_out"
SPLITS = (SEEN, HELD_OUT)
KINDS = ("chain", "late", "never_stated", "corrected", "chain", "ended")
ANSWER_KINDS = ("chain", "late", "corrected")
COUNTS = {"c6": 72}  # 36 seen, 36 held out; 24 of each to answer

EARLIEST = datetime(2005, 1, 1, tzinfo=UTC)
LATEST = datetime(2023, 6, 1, tzinfo=UTC)  # every valid time is in the past
# One source throughout: a new value supersedes (a weaker one would be contested: C3).
AUTHORITY = "user_statement"

GROUPS: dict[str, dict[str, tuple[str, ...]]] = {
    "event": {SEEN: ("offsite", "retro"), HELD_OUT: ("gala", "huddle")},
    "desk": {SEEN: ("helpdesk", "reception"), HELD_OUT: ("hotline", "switchboard")},
    "machine": {SEEN: ("gateway", "scheduler"), HELD_OUT: ("relay", "indexer")},
    "vehicle": {SEEN: ("van", "truck"), HELD_OUT: ("scooter", "minibus")},
}

# Each family: the groups it fits and its phrasings per part ({s} is the
# subject). A seen predicate name has its own phrasings, which use a word of
# it; the held-out names share phrasings that use none. How its values are
# made: `values`, below.
FAMILIES: dict[str, dict[str, Any]] = {
    "room": {
        "groups": ("event", "desk"),
        "held_out_names": ("hall", "reserved_space"),
        "phrasings": {
            SEEN: {
                "room": (
                    "Which room is the {s} in?",
                    "What room has the {s} got?",
                ),
                "meeting_room": (
                    "What is the meeting room of the {s}?",
                    "Which meeting room is the {s} in?",
                ),
            },
            HELD_OUT: (
                "Where do we gather for the {s}?",
                "Where should I head for the {s}?",
                "Which door do I knock on for the {s}?",
            ),
        },
    },
    "caterer": {
        "groups": ("event",),
        "held_out_names": ("food_provider", "kitchen_contractor"),
        "phrasings": {
            SEEN: {
                "caterer": (
                    "Who is the caterer for the {s}?",
                    "Which caterer does the {s} have?",
                ),
                "catering": (
                    "Who does the catering for the {s}?",
                    "Who handles catering at the {s}?",
                ),
            },
            HELD_OUT: (
                "Who feeds the guests at the {s}?",
                "Who cooks for the {s}?",
                "Who brings the meals to the {s}?",
            ),
        },
    },
    "channel": {
        "groups": ("event", "desk", "machine", "vehicle"),
        "held_out_names": ("chatroom", "discussion_thread"),
        "phrasings": {
            SEEN: {
                "channel": (
                    "Which channel is for the {s}?",
                    "What channel does the {s} have?",
                ),
                "chat_channel": (
                    "What is the chat channel of the {s}?",
                    "Which chat channel is the {s} in?",
                ),
            },
            HELD_OUT: (
                "Where is the {s} discussed?",
                "Where do we send messages about the {s}?",
                "Where can I ask questions about the {s}?",
            ),
        },
    },
    "revision": {
        "groups": ("machine",),
        "held_out_names": ("firmware", "image_tag"),
        "phrasings": {
            SEEN: {
                "revision": (
                    "Which revision is the {s} on?",
                    "What revision does the {s} have?",
                ),
                "build_tag": (
                    "What is the build tag of the {s}?",
                    "Which build tag is the {s} on?",
                ),
            },
            HELD_OUT: (
                "What code is the {s} shipping?",
                "Which patch level is the {s} at?",
                "Which edition of the software does the {s} have?",
            ),
        },
    },
    "rack_slot": {
        "groups": ("machine",),
        "held_out_names": ("cabinet_position", "enclosure_spot"),
        "phrasings": {
            SEEN: {
                "rack_slot": (
                    "Which rack slot is the {s} in?",
                    "What rack slot does the {s} occupy?",
                ),
                "rack": (
                    "What rack is the {s} mounted in?",
                    "In which rack does the {s} sit?",
                ),
            },
            HELD_OUT: (
                "Where is the {s} physically installed?",
                "Where in the datacenter is the {s} installed?",
                "Where does a technician unplug the {s}?",
            ),
        },
    },
    "extension": {
        "groups": ("desk",),
        "held_out_names": ("internal_line", "dialin"),
        "phrasings": {
            SEEN: {
                "extension": (
                    "What extension does the {s} have?",
                    "Which extension is the {s} on?",
                ),
                "dial_extension": (
                    "What is the dial extension of the {s}?",
                    "Which dial extension reaches the {s}?",
                ),
            },
            HELD_OUT: (
                "Which digits reach the {s} by telephone?",
                "What should I dial for the {s}?",
                "What do I dial to get through to the {s}?",
            ),
        },
    },
    "parking_bay": {
        "groups": ("vehicle",),
        "held_out_names": ("stall", "garage_berth"),
        "phrasings": {
            SEEN: {
                "parking_bay": (
                    "Which parking bay is the {s} in?",
                    "Where is the parking bay of the {s}?",
                ),
                "parking_spot": (
                    "What is the parking spot of the {s}?",
                    "Which parking spot does the {s} have?",
                ),
            },
            HELD_OUT: (
                "Where is the {s} left overnight?",
                "Where does the {s} stand when idle?",
                "Where can I pick up the {s}?",
            ),
        },
    },
    "driver": {
        "groups": ("vehicle",),
        "held_out_names": ("chauffeur", "wheelman"),
        "phrasings": {
            SEEN: {
                "driver": (
                    "Who is the driver of the {s}?",
                    "Which driver has the {s}?",
                ),
                "usual_driver": (
                    "Who is the usual driver of the {s}?",
                    "Who is the {s}'s usual driver?",
                ),
            },
            HELD_OUT: (
                "Who sits behind the wheel of the {s}?",
                "Who steers the {s}?",
                "Who is at the controls of the {s}?",
            ),
        },
    },
}

CODENAMES = (
    "Quokka",
    "Marlin",
    "Tamarin",
    "Ocelot",
    "Pangolin",
    "Axolotl",
    "Kestrel",
    "Heron",
    "Ibis",
    "Jackal",
    "Lemur",
    "Narwhal",
    "Osprey",
    "Puffin",
    "Raven",
    "Stoat",
    "Tapir",
    "Urchin",
    "Vole",
    "Walrus",
    "Yak",
    "Zebu",
    "Bison",
    "Civet",
    "Dingo",
    "Egret",
    "Ferret",
    "Gecko",
    "Impala",
    "Koala",
    "Lynx",
    "Mink",
    "Newt",
    "Otter",
    "Quail",
    "Shrew",
    "Toucan",
    "Wombat",
)
KITCHENS = ("Copper", "Bluebell", "Saltmarsh", "Hazel", "Larkspur")
KITCHEN_WORDS = ("Pantry", "Bistro", "Kitchen", "Kitchens", "Table", "Tables")
CHANNEL_WORDS = ("alerts", "alarms", "alert", "ops", "updates", "notices")
DRIVER_FIRST = ("Amara", "Amira", "Dario", "Daria", "Oskar", "Oscar", "Ines", "Inez")
DRIVER_LAST = (
    ("Albers", "Alberts", "Albrecht"),
    ("Gallo", "Galli", "Gallio"),
    ("Jansen", "Janssen", "Jenssen"),
)


# ----------------------------------------------------------------------- values


def _edit_digits(rng: random.Random, text: str) -> str:
    """The text with two neighbouring digits swapped, or one digit changed."""
    chars = list(text)
    pairs = [i for i in range(len(text) - 1) if text[i].isdigit() and text[i + 1].isdigit()]
    if pairs and rng.random() < 0.5:
        i = rng.choice(pairs)
        chars[i], chars[i + 1] = chars[i + 1], chars[i]
    else:
        i = rng.choice([i for i, ch in enumerate(text) if ch.isdigit()])
        chars[i] = rng.choice([d for d in string.digits if d != chars[i]])
    return "".join(chars)


def _near(rng: random.Random, current: str, count: int) -> list[str]:
    """`count` different values, the current one last, every other one digit
    edit away from it ("Room 4.12" before "Room 4.21")."""
    values = [current]
    while len(values) < count:
        value = _edit_digits(rng, current)
        if value not in values:
            values.insert(0, value)
    return values


def _digits(rng: random.Random, count: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(count))


def _one_word_changed(rng: random.Random, fixed: str, words: tuple[str, ...], count: int):
    return [f"{fixed} {word}" for word in rng.sample(words, count)]


def values(rng: random.Random, family: str, subject: str, count: int) -> list[str]:
    """`count` pairwise different values of the family, oldest first: every old
    one is the current (last) one with one digit or one word changed."""
    if family == "room":
        return _near(rng, f"Room {rng.randrange(1, 9)}.{_digits(rng, 2)}", count)
    if family == "caterer":
        return _one_word_changed(rng, rng.choice(KITCHENS), KITCHEN_WORDS, count)
    if family == "channel":
        prefix = "#" + subject.split()[0].lower()
        return [f"{prefix}-{word}" for word in rng.sample(CHANNEL_WORDS, count)]
    if family == "revision":
        base = f"v{rng.randrange(1, 5)}.{rng.randrange(0, 10)}.{rng.randrange(0, 20)}"
        return _near(rng, base, count)
    if family == "rack_slot":
        return _near(rng, f"R{_digits(rng, 2)}-U{_digits(rng, 2)}", count)
    if family == "extension":
        return _near(rng, f"ext. {rng.randrange(1, 10)}{_digits(rng, 3)}", count)
    if family == "parking_bay":
        return _near(rng, f"P{rng.randrange(1, 5)}-{rng.randrange(100, 1000)}", count)
    if family == "driver":
        first = rng.choice(DRIVER_FIRST)
        return _one_word_changed(rng, first, rng.choice(DRIVER_LAST), count)
    raise ValueError(f"unknown family {family!r}")


# -------------------------------------------------------------------- vocabulary


def _words(text: str) -> set[str]:
    text = text.lower().replace("{s}'s", "").replace("{s}", "")
    return set(re.findall(r"[a-z]+", text))


def vocabulary_words(split: str) -> set[str]:
    """Every word of a part's subject nouns, predicate names and phrasings
    (lower case), and of the codenames every subject is named with."""
    found: set[str] = set()
    for group in GROUPS.values():
        found.update(group[split])
    for family in FAMILIES.values():
        for name in names(family, split):
            found.update(name.split("_"))
        for name in names(family, split):
            for phrasing in phrasings(family, split, name):
                found.update(_words(phrasing))
    found.update(name.lower() for name in CODENAMES)
    return found


def names(family: dict[str, Any], split: str) -> tuple[str, ...]:
    """The family's predicate names in one part."""
    if split == SEEN:
        return tuple(family["phrasings"][SEEN])
    return family["held_out_names"]


def phrasings(family: dict[str, Any], split: str, name: str) -> tuple[str, ...]:
    """How a question asks for the family's attribute stored under `name`."""
    if split == SEEN:
        return family["phrasings"][SEEN][name]
    return family["phrasings"][HELD_OUT]


def _group_of(noun: str) -> str:
    return next(g for g, nouns in GROUPS.items() if noun in nouns[SEEN] + nouns[HELD_OUT])


def families_for(noun: str) -> list[str]:
    return [name for name, family in FAMILIES.items() if _group_of(noun) in family["groups"]]


# -------------------------------------------------------------------------- draw


class AskedDraw:
    """Unique subjects ("Quokka retro") per part."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.free = {
            split: [
                (codename, noun)
                for codename in CODENAMES
                for group in GROUPS.values()
                for noun in group[split]
            ]
            for split in SPLITS
        }
        for pairs in self.free.values():
            rng.shuffle(pairs)

    def subject(self, split: str) -> tuple[str, str]:
        if not self.free[split]:
            raise ValueError(f"suite C6: no unused {split} subject left")
        codename, noun = self.free[split].pop()
        return f"{codename} {noun}", noun


def _moments(rng: random.Random, count: int) -> list[datetime]:
    """`count` sorted whole seconds in [EARLIEST, LATEST), at least 30 days apart."""
    span = int((LATEST - EARLIEST).total_seconds())
    while True:
        drawn = sorted(EARLIEST + timedelta(seconds=rng.randrange(span)) for _ in range(count))
        if all(b - a >= timedelta(days=30) for a, b in zip(drawn, drawn[1:], strict=False)):
            return drawn


def _claim(rng: random.Random, subject: str, predicate: str, value: str, start: datetime):
    return {
        "subject": subject,
        "predicate": predicate,
        "value": value,
        "value_type": "string",
        "cardinality": "one",
        "subject_type": _group_of(subject.split()[-1]),
        "valid_from": iso(start),
        **_provenance(rng),
    }


def _provenance(rng: random.Random) -> dict[str, Any]:
    return {
        "source_type": AUTHORITY,
        "authority": AUTHORITY,
        "source_ref": f"battery:c6:{_digits(rng, 8)}",
        "confidence": 0.9,
        "actor": ACTOR,
    }


def _asked_writes(
    rng: random.Random, kind: str, subject: str, predicate: str, chain: list[str]
) -> list[dict[str, Any]]:
    """The writes of the asked attribute: `chain` is every value, oldest
    first; for `corrected`, the last is the correction of the one before."""
    told = chain[:-1] if kind == "corrected" else chain
    starts = _moments(rng, len(told))
    claims = [
        {
            "op": "assert",
            "ref": f"v{index + 1}",
            "claim": _claim(rng, subject, predicate, value, start),
        }
        for index, (value, start) in enumerate(zip(told, starts, strict=True))
    ]
    if kind == "late":
        claims.reverse()  # the newest value arrives first, the older ones after it
    writes = [{**write, "round": number} for number, write in enumerate(claims, start=1)]
    if kind == "corrected":
        writes.append(
            {
                "round": len(writes) + 1,
                "op": "correct",
                "ref": f"v{len(chain)}",
                "target": f"v{len(told)}",
                "body": {"value": chain[-1], **_provenance(rng)},
            }
        )
    if kind == "ended":
        end = starts[-1] + (LATEST - starts[-1]) / 2
        writes.append(
            {
                "round": len(writes) + 1,
                "op": "end",
                "ref": "ended",
                "target": f"v{len(told)}",
                "body": {"valid_to": iso(end.replace(microsecond=0)), **_provenance(rng)},
            }
        )
    return writes


def _item(draw: AskedDraw, number: int) -> ItemSpec:
    rng = draw.rng
    split = SPLITS[(number - 1) % len(SPLITS)]
    kind = KINDS[(number - 1) // len(SPLITS) % len(KINDS)]
    subject, noun = draw.subject(split)
    fits = families_for(noun)
    asked = rng.choice(fits)
    predicate = rng.choice(names(FAMILIES[asked], split))
    others = [f for f in fits if f != asked]
    rng.shuffle(others)
    writes: list[dict[str, Any]] = []
    for family in others[: rng.choice((1, 2))]:
        name = rng.choice(names(FAMILIES[family], split))
        (value,) = values(rng, family, subject, 1)
        start = _moments(rng, 1)[0]
        writes.append(
            {
                "round": 1,
                "op": "assert",
                "ref": f"other:{family}",
                "claim": _claim(rng, subject, name, value, start),
            }
        )
    expect: dict[str, Any] | None = None
    stale: list[str] = []
    if kind != "never_stated":
        versions = 3 if kind == "corrected" else rng.choice((1, 2) if kind == "ended" else (2, 3))
        chain = values(rng, asked, subject, versions)
        writes.extend(_asked_writes(rng, kind, subject, predicate, chain))
        if kind == "ended":
            stale = chain
        else:
            expect, stale = {"value": chain[-1], "ref": f"v{len(chain)}"}, chain[:-1]
    phrasing = rng.choice(phrasings(FAMILIES[asked], split, predicate))
    question = {
        "text": phrasing.format(s=subject),
        "subject": subject,
        "predicate": predicate,
        "expect": expect,
        "stale": stale,
    }
    checks = {
        "chain": ("stale", "found"),
        "late": ("stale", "found"),
        "corrected": ("stale", "found"),
        "ended": ("stale", "false_answer"),
        "never_stated": ("false_answer",),
    }[kind]
    title = f"C6 asked through recall ({split}, {kind}): {question['text']}"
    return ItemSpec(
        key=f"c6_{number:04d}",
        title=title,
        default_code=F.R2 if kind in ANSWER_KINDS else F.R3,
        data={"writes": writes, "question": question, "checks": list(checks)},
        metrics={"kind": "C6", "c6": kind, "split": split, "family": asked, "checks": list(checks)},
    )


def generate(rng: random.Random, counts: dict[str, int] | None = None) -> list[ItemSpec]:
    """Every C6 item of a run."""
    counts = {**COUNTS, **(counts or {})}
    draw = AskedDraw(rng)
    return [_item(draw, number) for number in range(1, counts["c6"] + 1)]
