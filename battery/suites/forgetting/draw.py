"""Suite F's seeded draw: people whose memories are erased, and look-alikes whose are not.

Each F1 item is one person with every kind of memory — facts (a home that
changed, an employer, a badge code), two episodes that name them, a document
about them, a working state and an intention that quote one of the
episodes, a recall that returned it — and a *twin*: another person sharing a
name with them (same first or last name), with the same kinds of memories in
the same sentence shapes, that nothing erases. Every memory carries a token
of its own (a made-up code such as "QX-4417"), so "is it still there?" is a
search of every answer for the token, and "was anything else lost?" is the
twin's tokens (and the untouched kinds of the item's own) still found.

The erasure is asked four ways (F1 mode): by subject, by the episode's
events, by the document, by the actor who wrote it all. Which memories must
go follows from the mode. Half the vocabulary is held out: items drawn from
it are reported on their own (`_held_out` metrics).

Nothing here is shared with the code under test: the service has no word
lists for erasure; the names and sentences are the battery's own.
"""

from __future__ import annotations

import random
import string
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F

MODES = ("subject", "episode_events", "document", "actor")
ITEMS_PER_MODE = 6

FIRST = (
    "Anouk",
    "Bastien",
    "Chiara",
    "Dmitri",
    "Elif",
    "Farid",
    "Greta",
    "Hiroshi",
    "Ines",
    "Jonas",
    "Kalani",
    "Leontine",
    "Mateus",
    "Nadia",
    "Oskar",
    "Priya",
    "Quentin",
    "Rosalind",
    "Soren",
    "Tamsin",
    "Ulrich",
    "Valentina",
    "Wendell",
    "Ximena",
)
LAST = (
    "Abernathy",
    "Baptiste",
    "Castellanos",
    "Dobrev",
    "Eriksen",
    "Fontaine",
    "Gallagher",
    "Haddad",
    "Ibarra",
    "Jaworski",
    "Kowalczyk",
    "Lindqvist",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quiroga",
    "Rasmussen",
    "Sandoval",
    "Thorne",
    "Underhill",
    "Vasquez",
    "Whitlock",
    "Yamamoto",
)
CITIES = (
    "Tallinn",
    "Porto",
    "Ghent",
    "Bergen",
    "Lviv",
    "Bilbao",
    "Trieste",
    "Kraków",
    "Aarhus",
    "Graz",
    "Cluj",
    "Tampere",
    "Brno",
    "Malmö",
    "Split",
    "Lyon",
)
EMPLOYERS = (
    "Harbor Analytics",
    "Quillstone",
    "Bramblewood Labs",
    "Nettlefield",
    "Copperline",
    "Driftwood Systems",
    "Ambergate",
    "Foxglove Data",
    "Larkspur",
    "Mossbank",
)
DOINGS = (
    ("migrated the invoicing service to the {place} region", "checked the invoicing dashboards"),
    ("rotated the signing keys of the {place} gateway", "reviewed the gateway access logs"),
    ("rebuilt the search index for the {place} catalogue", "compared result counts"),
    ("moved the nightly export to the {place} cluster", "watched the export finish"),
    ("renewed the certificates of the {place} portal", "tested the portal login"),
    ("drained the queue backlog in the {place} datacentre", "restarted two consumers"),
)
DOCUMENT = (
    "Personnel note on {name}. Preferred contact hours are mornings. Access badge "
    "{token}. Emergency contact is listed with facilities on floor {floor}."
)


def _token(rng: random.Random) -> str:
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(2))
    return f"{letters}-{rng.randrange(1000, 9999)}"


def _person(rng: random.Random, first: str, last: str, taken: set[str]) -> dict[str, Any]:
    """One person's memories, each with a token of its own."""
    tokens = {}
    for kind in ("fact", "episode", "note", "document"):
        token = _token(rng)
        while token in taken:
            token = _token(rng)
        taken.add(token)
        tokens[kind] = token
    name = f"{first} {last}"
    place = rng.choice(CITIES)
    did, then = rng.choice(DOINGS)
    return {
        "name": name,
        "homes": rng.sample(CITIES, 2),
        "employer": rng.choice(EMPLOYERS),
        "tokens": tokens,
        "episode": f"{name} {did.format(place=place)}; change ticket {tokens['episode']}",
        "note": f"{name} {then} afterwards; follow-up ticket {tokens['note']}",
        "document": DOCUMENT.format(
            name=name, token=tokens["document"], floor=rng.randrange(2, 30)
        ),
    }


# What each mode must remove: the item's own memories by kind.
GONE = {
    "subject": {"fact", "episode", "note"},  # facts about the person, episodes naming them
    "episode_events": {"episode"},  # that episode alone (and the quotes of it)
    "document": {"document"},
    "actor": {"fact", "episode", "note", "document"},  # everything the actor wrote
}
KINDS = ("fact", "episode", "note", "document")


def generate(rng: random.Random) -> list[ItemSpec]:
    firsts, lasts = list(FIRST), list(LAST)
    rng.shuffle(firsts)
    rng.shuffle(lasts)
    # The second half of each list is held out of the first half's items.
    held_firsts, held_lasts = set(firsts[len(firsts) // 2 :]), set(lasts[len(lasts) // 2 :])
    taken: set[str] = set()
    specs = []
    n = 0
    for mode in MODES:
        for _ in range(ITEMS_PER_MODE):
            first, last = firsts[n % len(firsts)], lasts[n % len(lasts)]
            # The twin shares the first name or the last one: the same words.
            if n % 2:
                twin_first, twin_last = first, lasts[(n + 7) % len(lasts)]
            else:
                twin_first, twin_last = firsts[(n + 7) % len(firsts)], last
            person = _person(rng, first, last, taken)
            twin = _person(rng, twin_first, twin_last, taken)
            gone = GONE[mode]
            planned = {
                "residue": 6 * len(gone),  # read paths searched for each erased token
                # the twin's four kinds, two paths each; the item's own kinds not
                # asked for; the copy in another agent
                "collateral": 2 * len(KINDS) + len(KINDS) - len(gone) + 1,
                # three paths per erased token after the rebuilds; the retried write
                "regenerated": 3 * len(gone) + ("episode" in gone),
                "receipt": 1,
            }
            held_out = first in held_firsts and last in held_lasts
            specs.append(
                ItemSpec(
                    key=f"f1_{mode}_{n:02d}",
                    title=f"F1 erase by {mode.replace('_', ' ')}: {person['name']} "
                    f"(twin {twin['name']})",
                    default_code=F.R3,
                    data={"mode": mode, "person": person, "twin": twin, "actor": f"author-{n:02d}"},
                    metrics={"planned": planned, "mode": mode, "held_out": held_out},
                )
            )
            n += 1
    return specs
