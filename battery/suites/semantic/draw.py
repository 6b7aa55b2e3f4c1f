"""Suite C's seeded draw: the world each item writes and the questions it asks.

Pure: a function of the random.Random it is given and nothing else (no
clock, no I/O, no iteration over sets), so the same seed draws the same items.
Every valid time is in the past (2003-2023), so "now" is after all of them.

An item's `data`:
* `writes`: what it tells the service, each in a `round`. Rounds run in
  order, each as few requests as possible, so one round shares one record
  time per batch; C4 needs its arrivals in separate rounds for that reason.
  `op` is `assert` (a claim), `correct` or `end` (of an earlier write, named
  by its `ref`).
* `questions`: what it asks, each counted under one `metric`. A question with
  `at: r` is asked right after round r (the state it checks is gone by the
  end); the others after every round. Value questions carry the expected
  value (`expect`: {"value": v}, or None for "nothing"), the values that
  would be `stale` (superseded, outdated) and the values that are `forbidden`
  (known only later, or never in force).
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F

# How many items of each kind a run draws (540 in all).
COUNTS = {"c1": 200, "c2": 120, "c3": 80, "c4": 80, "c5": 60}

EPOCH = datetime(2003, 1, 1, tzinfo=UTC)
HORIZON = datetime(2024, 1, 1, tzinfo=UTC)  # every valid time is before this
MICROSECOND = timedelta(microseconds=1)
ACTOR = "battery-reference-agent"

METRICS = ("current_value", "as_of", "authority_temporal_resolution", "bitemporal", "multihop")

# Authorities, most trusted first, with the source type that carries each.
AUTHORITIES = (
    ("operator", "operator"),
    ("system_observation", "observation"),
    ("user_statement", "user_statement"),
    ("tool_result", "tool_result"),
    ("agent_inference", "agent_inference"),
    ("third_party", "third_party"),
)
SOURCE_OF = dict(AUTHORITIES)
RANKED = [authority for authority, _ in AUTHORITIES]

# Confusable on purpose: neighbours differ by a letter or two.
FIRST = [
    "Mara",
    "Maria",
    "Marta",
    "Nadia",
    "Nadine",
    "Omar",
    "Omari",
    "Lena",
    "Lina",
    "Ivan",
    "Ivana",
    "Theo",
    "Thea",
    "Jonas",
    "Jonah",
    "Elif",
    "Elise",
    "Ravi",
    "Rafi",
    "Sofia",
    "Sophia",
    "Anton",
    "Antonia",
    "Yusuf",
    "Yuki",
    "Keiko",
    "Kenji",
    "Ada",
    "Adah",
    "Bruno",
    "Bruna",
]
LAST = [
    "Okafor",
    "Okafort",
    "Brooks",
    "Brookes",
    "Lindqvist",
    "Lindquist",
    "Moreau",
    "Moreaux",
    "Haddad",
    "Hadad",
    "Novak",
    "Nowak",
    "Reyes",
    "Reyas",
    "Tanaka",
    "Tanaka-Ito",
    "Schmidt",
    "Schmitt",
    "Costa",
    "Coste",
    "Ferreira",
    "Pereira",
    "Kowalski",
    "Kowalsky",
]
CITIES = (
    "Porto",
    "Porto Alegre",
    "Portland",
    "Lisbon",
    "Lisboa",
    "Vienna",
    "Vienne",
    "Sydney",
    "Sidney",
    "Córdoba",
    "Cordova",
    "Santiago",
    "San Diego",
    "Georgetown",
    "George Town",
    "Frankfurt am Main",
    "Frankfurt an der Oder",
    "Zürich",
    "Zurich",
    "São Paulo",
    "San Pablo",
    "東京",
    "Kyoto",
    "Kobe",
)
ORG_WORDS = [
    "Orion",
    "Vela",
    "Lyra",
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
]
ORG_SUFFIXES = ("Labs", "Lab", "Systems", "Logistics", "Holdings", "Group", "Works")
LANGUAGES = ("en", "pt", "de", "fr", "ja", "es", "pl", "tr", "hi")
DOMAINS = ("example.com", "example.org", "mail.example.net")


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _moment(rng: random.Random, start: datetime, end: datetime) -> datetime:
    """A whole second in [start, end)."""
    seconds = int((end - start).total_seconds())
    return start + timedelta(seconds=rng.randrange(seconds))


def _moments(rng: random.Random, count: int, start: datetime, end: datetime) -> list[datetime]:
    """`count` distinct sorted whole seconds in [start, end), at least a day apart."""
    while True:
        drawn = sorted(_moment(rng, start, end) for _ in range(count))
        if all(b - a >= timedelta(days=1) for a, b in zip(drawn, drawn[1:], strict=False)):
            return drawn


def _inside(rng: random.Random, start: datetime, end: datetime | None) -> datetime:
    """A moment in [start, end) (end None: up to HORIZON), to the microsecond."""
    end = end or HORIZON
    span = int((end - start) / MICROSECOND)
    return start + rng.randrange(span) * MICROSECOND


def _holder(valid_froms: Sequence[datetime], moment: datetime) -> int | None:
    """Index of the version valid at `moment` when versions run from each valid_from to the next."""
    held = None
    for index, valid_from in enumerate(valid_froms):
        if valid_from <= moment:
            held = index
    return held


class Draw:
    """One run's draw: its randomness and the names it has handed out."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.taken: set[str] = set()  # names are unique per agent, case-insensitively

    def name(self, make: Callable[[], str]) -> str:
        for _ in range(1000):
            candidate = make()
            if candidate.lower() not in self.taken:
                self.taken.add(candidate.lower())
                return candidate
        raise RuntimeError("the draw ran out of names")

    def token(self, length: int = 4) -> str:
        return "".join(self.rng.choice(string.digits) for _ in range(length))

    def person(self) -> str:
        return self.name(lambda: f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}")

    def org(self) -> str:
        return self.name(
            lambda: f"{self.rng.choice(ORG_WORDS)} {self.rng.choice(ORG_SUFFIXES)} {self.token(3)}"
        )

    def lookalike(self, name: str) -> str:
        """Another name one small edit away: a swapped neighbour word, a letter, a suffix."""
        rng = self.rng

        def edit() -> str:
            words = name.split(" ")
            choice = rng.randrange(4)
            if choice == 0:
                for pool in (FIRST, LAST, ORG_SUFFIXES):
                    for index, word in enumerate(words):
                        neighbours = [
                            w
                            for w in pool
                            if word in pool
                            and w != word
                            and (w[:3] == word[:3] or w[-4:] == word[-4:])
                        ]
                        if neighbours:
                            neighbour = rng.choice(neighbours)
                            return " ".join([*words[:index], neighbour, *words[index + 1 :]])
            if choice == 1:
                return f"{name} Jr."
            if choice == 2 and words[-1].isdigit():
                digits = list(words[-1])
                digits[rng.randrange(len(digits))] = rng.choice(string.digits)
                return " ".join([*words[:-1], "".join(digits)])
            position = rng.randrange(1, len(name))
            return name[:position] + rng.choice("aeiou") + name[position:]

        return self.name(edit)

    def authority(self) -> str:
        return self.rng.choice(["system_observation", "user_statement", "tool_result"])

    def provenance(self, authority: str | None = None) -> dict[str, Any]:
        authority = authority or self.authority()
        return {
            "source_type": SOURCE_OF[authority],
            "authority": authority,
            "source_ref": f"battery:{self.token(8)}",
            "confidence": self.rng.choice([0.6, 0.75, 0.9, 1.0]),
            "actor": ACTOR,
        }


# ----------------------------------------------------------------------- values


def _phone(rng: random.Random) -> str:
    return f"+{rng.choice(['1', '44', '351', '81'])} {rng.randrange(100, 1000)} {rng.randrange(100, 1000)} {rng.randrange(1000, 10000)}"


def _phone_like(rng: random.Random, phone: str) -> str:
    """The same number with two neighbouring digits swapped (or a digit changed)."""
    digits = [i for i, ch in enumerate(phone) if ch.isdigit()]
    for _ in range(20):
        i = rng.choice(digits[1:-1])
        j = i + 1 if i + 1 in digits else i - 1
        chars = list(phone)
        chars[i], chars[j] = chars[j], chars[i]
        swapped = "".join(chars)
        if swapped != phone:
            return swapped
    chars = list(phone)
    chars[digits[-1]] = str((int(chars[digits[-1]]) + 1) % 10)
    return "".join(chars)


def _email(rng: random.Random, person: str) -> str:
    local = ".".join(part.lower() for part in person.replace("-", " ").split()[:2])
    return f"{local}{rng.choice(['', '1', '.work', '+crm'])}@{rng.choice(DOMAINS)}"


ValueMaker = Callable[[random.Random, str], Any]

# C1 predicate families: confusable predicates that share a value type and a value maker.
C1_FAMILIES: tuple[tuple[str, tuple[str, ...], ValueMaker], ...] = (
    ("string", ("home_city", "work_city", "birth_city"), lambda rng, s: rng.choice(CITIES)),
    ("string", ("phone", "mobile_phone", "work_phone"), lambda rng, s: _phone(rng)),
    ("string", ("email", "work_email", "contact.email"), _email),
    ("integer", ("age", "shoe_size", "office_floor"), lambda rng, s: rng.randrange(1, 100)),
    (
        "number",
        ("credit_limit", "balance", "height_m"),
        lambda rng, s: rng.randrange(1, 10**7) / 100,
    ),
    ("boolean", ("is_vip", "has_pets"), lambda rng, s: rng.random() < 0.5),
    (
        "object",
        ("preferences", "postal_address"),
        lambda rng, s: {
            "seat": rng.choice(["aisle", "window"]),
            "meal": rng.choice(["vegan", "halal", "none", "kosher"]),
            "floor": rng.randrange(0, 40),
            "note": rng.choice(["", "née Müller", "«quiet»", "call after 6"]),
        },
    ),
    (
        "array",
        ("languages", "allergies"),
        lambda rng, s: sorted(rng.sample(LANGUAGES, rng.randrange(1, 4))),
    ),
)


def value_key(value: Any) -> str:
    """A value's identity: 100 and 100.0 are one number, 1 and true are not."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return f"number:{float(value)!r}"
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def same(a: Any, b: Any) -> bool:
    return value_key(a) == value_key(b)


def _distinct(
    rng: random.Random, make: Callable[[], Any], count: int, *, strict: bool = True
) -> list[Any]:
    """`count` values from `make`, pairwise different (unless not strict and it cannot be)."""
    values: list[Any] = []
    for _ in range(count * 50):
        value = make()
        if all(not same(value, v) for v in values):
            values.append(value)
            if len(values) == count:
                return values
    if not strict:
        return values + [make() for _ in range(count - len(values))]
    raise RuntimeError("could not draw distinct values")


STATUSES = ("open", "triaged", "in progress", "blocked", "in review", "resolved", "closed")
PLANS = ("free", "starter", "team", "business", "enterprise", "legacy", "trial")
TEAMS = ("payments", "search", "platform", "growth", "identity", "billing", "infra")

# Single-valued predicates whose values change: (name, value_type, maker of n distinct values).
CHANGING: tuple[tuple[str, str, Callable[[random.Random, int], list[Any]]], ...] = (
    ("status", "string", lambda rng, n: rng.sample(STATUSES, n)),
    ("plan", "string", lambda rng, n: rng.sample(PLANS, n)),
    ("owner_team", "string", lambda rng, n: rng.sample(TEAMS, n)),
    (
        "version",
        "string",
        lambda rng, n: _distinct(
            rng, lambda: f"{rng.randrange(1, 6)}.{rng.randrange(0, 20)}.{rng.randrange(0, 9)}", n
        ),
    ),
    (
        "price_eur",
        "number",
        lambda rng, n: _distinct(rng, lambda: rng.randrange(100, 99999) / 100, n),
    ),
    ("headcount", "integer", lambda rng, n: _distinct(rng, lambda: rng.randrange(1, 5000), n)),
    ("location", "string", lambda rng, n: rng.sample(CITIES, n)),
)
# C3's predicates: facts sources disagree on.
DISPUTED: tuple[tuple[str, str, Callable[[random.Random, int], list[Any]]], ...] = (
    ("legal_name", "string", lambda rng, n: [f"{w} Ltd" for w in rng.sample(ORG_WORDS, n)]),
    ("billing_city", "string", lambda rng, n: rng.sample(CITIES, n)),
    ("risk_level", "string", lambda rng, n: rng.sample(["low", "medium", "high", "critical"], n)),
    ("vat_rate", "number", lambda rng, n: rng.sample([0.0, 0.06, 0.13, 0.19, 0.2, 0.23], n)),
    ("seats", "integer", lambda rng, n: _distinct(rng, lambda: rng.randrange(1, 500), n)),
)

# Relations: (predicate, cardinality). Only many-valued ones get decoy edges of
# their own predicate; only single-valued ones can be ended by a new value.
RELATIONS = (
    ("works_at", "one"),
    ("part_of", "one"),
    ("located_in", "one"),
    ("reports_to", "one"),
    ("supplies", "many"),
    ("member_of", "many"),
    ("partners_with", "many"),
)
CARDINALITY = dict(RELATIONS)


# --------------------------------------------------------------------- builders


def _claim(
    draw: Draw,
    *,
    subject: str,
    predicate: str,
    valid_from: datetime,
    value: Any = None,
    object_entity: str | None = None,
    value_type: str | None = None,
    cardinality: str = "one",
    subject_type: str = "thing",
    object_type: str = "thing",
    valid_to: datetime | None = None,
    authority: str | None = None,
) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "subject": subject,
        "predicate": predicate,
        "valid_from": iso(valid_from),
        "cardinality": cardinality,
        "subject_type": subject_type,
        **draw.provenance(authority),
    }
    if object_entity is not None:
        claim.update(object_entity=object_entity, object_type=object_type, value_type="entity")
    else:
        claim.update(value=value, value_type=value_type)
    if valid_to is not None:
        claim["valid_to"] = iso(valid_to)
    return claim


def _value_question(
    kind: str,
    metric: str,
    subject: str,
    predicate: str,
    expect: Any,
    *,
    nothing: bool = False,
    stale: Sequence[Any] = (),
    forbidden: Sequence[Any] = (),
    **extra: Any,
) -> dict[str, Any]:
    return {
        "q": kind,
        "metric": metric,
        "subject": subject,
        "predicate": predicate,
        "expect": None if nothing else {"value": expect},
        "stale": _unique(v for v in stale if nothing or not same(v, expect)),
        "forbidden": _unique(v for v in forbidden if nothing or not same(v, expect)),
        **extra,
    }


def _unique(values) -> list[Any]:
    kept: list[Any] = []
    for value in values:
        if not any(same(value, k) for k in kept):
            kept.append(value)
    return kept


def _spec(kind: str, number: int, title: str, default_code: F, writes, questions) -> ItemSpec:
    planned: dict[str, int] = {}
    for question in questions:
        planned[question["metric"]] = planned.get(question["metric"], 0) + 1
    return ItemSpec(
        key=f"{kind}_{number:04d}",
        title=title,
        default_code=default_code,
        data={"writes": writes, "questions": questions},
        metrics={"kind": kind.upper(), "planned": planned},
    )


def _case_variant(rng: random.Random, name: str) -> str:
    """How the agent spells the name when it asks: names are case-insensitive."""
    return rng.choice([name, name, name.lower(), name.upper()])


# ---------------------------------------------------------------- C1 retention


def c1_retention(draw: Draw, count: int) -> list[ItemSpec]:
    """Facts stated once, among look-alike subjects, confusable predicates and
    similar values, recalled exactly after everything else was written."""
    rng = draw.rng
    specs: list[ItemSpec] = []
    while len(specs) < count:
        first = draw.person()
        cluster = [first] + [draw.lookalike(first) for _ in range(rng.randrange(1, 3))]
        family_type, predicates, make = rng.choice(C1_FAMILIES)
        chosen = rng.sample(predicates, rng.randrange(1, len(predicates) + 1))
        for predicate in chosen:
            values = _distinct(
                rng,
                lambda s=first, m=make: m(rng, s),
                len(cluster),
                strict=family_type != "boolean",
            )
            if family_type == "string" and predicate.endswith("phone"):
                values = [values[0]] + [_phone_like(rng, values[0]) for _ in cluster[1:]]
            for subject, value in zip(cluster, values, strict=True):
                if len(specs) == count:
                    break
                number = len(specs) + 1
                others = [v for v in values if not same(v, value)]
                claim = _claim(
                    draw,
                    subject=subject,
                    predicate=predicate,
                    value=value,
                    value_type=family_type,
                    subject_type="person",
                    valid_from=_moment(rng, EPOCH, HORIZON - timedelta(days=30)),
                )
                question = _value_question(
                    "current",
                    "current_value",
                    _case_variant(rng, subject),
                    predicate,
                    value,
                    forbidden=(),
                    confusable=others,
                )
                specs.append(
                    _spec(
                        "c1",
                        number,
                        f"C1 retention: {subject}.{predicate}, stated once among look-alikes",
                        F.R2,
                        [{"round": 1, "op": "assert", "ref": "fact", "claim": claim}],
                        [question],
                    )
                )
    return specs


# ------------------------------------------------------------- C2 supersession


def c2_supersession(draw: Draw, count: int) -> list[ItemSpec]:
    """Chains of 2-6 versions at random valid times, told in order: the current
    value, the value at T1, the value from T2 to T3, and nothing before the first."""
    return [_c2_item(draw, number) for number in range(1, count + 1)]


def _c2_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    subject = draw.name(lambda: f"Ticket {rng.choice(['PM', 'OPS', 'FIN'])}-{draw.token(4)}")
    predicate, value_type, make = rng.choice(CHANGING)
    versions = rng.randrange(2, 7)
    values = make(rng, versions)
    starts = _moments(rng, versions, EPOCH, HORIZON - timedelta(days=60))
    # One source throughout: a weaker one would be contested, not supersede (that is C3).
    authority = draw.authority()
    writes = [
        {
            "round": index + 1,
            "op": "assert",
            "ref": f"v{index + 1}",
            "claim": _claim(
                draw,
                subject=subject,
                predicate=predicate,
                value=value,
                value_type=value_type,
                valid_from=start,
                subject_type="ticket",
                authority=authority,
            ),
        }
        for index, (value, start) in enumerate(zip(values, starts, strict=True))
    ]

    def ends(index: int) -> datetime | None:
        return starts[index + 1] if index + 1 < versions else None

    def as_of(moment: datetime) -> dict[str, Any]:
        held = _holder(starts, moment)
        if held is None:
            return _value_question(
                "as_of",
                "as_of",
                subject,
                predicate,
                None,
                nothing=True,
                forbidden=values,
                valid_time=iso(moment),
            )
        return _value_question(
            "as_of",
            "as_of",
            subject,
            predicate,
            values[held],
            stale=values[:held],
            valid_time=iso(moment),
        )

    i = rng.randrange(versions)
    t1 = _inside(rng, starts[i], ends(i))
    j = rng.randrange(versions)
    t2 = starts[j] if rng.random() < 0.5 else _inside(rng, starts[j], ends(j))
    t3_end = ends(j) or HORIZON
    t3 = t3_end - MICROSECOND if rng.random() < 0.5 else _inside(rng, t2, t3_end)
    before = starts[0] - MICROSECOND * rng.choice([1, 10**6, 86400 * 10**6])
    questions = [
        _value_question(
            "current", "current_value", subject, predicate, values[-1], stale=values[:-1]
        ),
        as_of(t1),
        as_of(t2),
        as_of(t3),
        as_of(before),
    ]
    return _spec(
        "c2",
        number,
        f"C2 supersession: {subject}.{predicate} through {versions} versions",
        F.R3,
        writes,
        questions,
    )


# ------------------------------------------------------- C3 conflicting authority


def c3_authority(draw: Draw, count: int) -> list[ItemSpec]:
    """A high-authority value; a recent low-authority claim that must stay
    contested (asked right then); a later high-authority correction that wins
    and resolves the contest — by a new value from T2, or by /correct."""
    return [_c3_item(draw, number) for number in range(1, count + 1)]


def _c3_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    metric = "authority_temporal_resolution"
    subject = draw.org()
    predicate, value_type, make = rng.choice(DISPUTED)
    high, low, fix = make(rng, 3)
    if rng.random() < 0.25:
        fix = low  # the trusted source confirms what the weak one said
    high_rank = rng.randrange(0, 3)  # operator, system_observation or user_statement
    authority_high = RANKED[high_rank]
    authority_low = RANKED[rng.randrange(high_rank + 1, len(RANKED))]
    authority_fix = RANKED[rng.randrange(0, high_rank + 1)]
    variant = rng.choice(["assert", "correct"])
    t0 = _moment(rng, EPOCH, datetime(2015, 1, 1, tzinfo=UTC))
    t1 = _moment(rng, t0 + timedelta(days=30), HORIZON - timedelta(days=60))

    def claim(value, start, authority):
        return _claim(
            draw,
            subject=subject,
            predicate=predicate,
            value=value,
            value_type=value_type,
            valid_from=start,
            subject_type="company",
            authority=authority,
        )

    writes = [
        {"round": 1, "op": "assert", "ref": "high", "claim": claim(high, t0, authority_high)},
        {"round": 2, "op": "assert", "ref": "low", "claim": claim(low, t1, authority_low)},
    ]
    if variant == "assert":
        t2 = _moment(rng, t0 + timedelta(days=1), HORIZON - timedelta(days=30))
        writes.append(
            {"round": 3, "op": "assert", "ref": "fix", "claim": claim(fix, t2, authority_fix)}
        )
        # Before T2 the high-authority value still holds (in the contest's period too).
        probe = _inside(rng, max(t0, t1) if t1 < t2 else t0, t2)
        after = _value_question(
            "as_of",
            metric,
            subject,
            predicate,
            high,
            forbidden=[low, fix],
            valid_time=iso(probe),
        )
    else:
        writes.append(
            {
                "round": 3,
                "op": "correct",
                "ref": "fix",
                "target": "high",
                "body": {"value": fix, **draw.provenance(authority_fix)},
            }
        )
        probe = _inside(rng, t0, None)
        after = _value_question(
            "as_of", metric, subject, predicate, fix, stale=[high], valid_time=iso(probe)
        )
    during = _inside(rng, t1, None)
    questions = [
        {"q": "outcome", "metric": metric, "ref": "low", "expect": "contested", "at": 2},
        _value_question("current", metric, subject, predicate, high, forbidden=[low], at=2),
        _value_question(
            "as_of",
            metric,
            subject,
            predicate,
            high,
            forbidden=[low],
            valid_time=iso(during),
            at=2,
        ),
        {
            "q": "contest_in_chain",
            "metric": metric,
            "subject": subject,
            "predicate": predicate,
            "ref": "low",
            "open": True,
            "at": 2,
        },
        {
            "q": "contest_flagged",
            "metric": metric,
            "subject": subject,
            "predicate": predicate,
            "ref": "low",
            "flagged": True,
            "at": 2,
        },
        {"q": "resolves", "metric": metric, "ref": "fix", "contest": "low"},
        _value_question("current", metric, subject, predicate, fix, stale=[high]),
        after,
        {
            "q": "contest_in_chain",
            "metric": metric,
            "subject": subject,
            "predicate": predicate,
            "ref": "low",
            "open": False,
        },
        {
            "q": "contest_flagged",
            "metric": metric,
            "subject": subject,
            "predicate": predicate,
            "ref": "low",
            "flagged": False,
        },
    ]
    return _spec(
        "c3",
        number,
        f"C3 authority: {subject}.{predicate}, {authority_low} vs {authority_high}, "
        f"then {authority_fix} by {variant}",
        F.R3,
        writes,
        questions,
    )


# ----------------------------------------------------- C4 late-arriving evidence


def _belief(arrivals: Sequence[tuple[datetime, Any]], upto: int, moment: datetime):
    """What was believed about `moment` after the first `upto` arrivals: the
    value with the latest valid_from at or before it (None: nothing)."""
    known = [(start, value) for start, value in arrivals[:upto] if start <= moment]
    return max(known, key=lambda pair: pair[0])[1] if known else None


def c4_late_evidence(draw: Draw, count: int) -> list[ItemSpec]:
    """3-5 values told out of valid-time order, one arrival per round: as_of
    must reflect the full reconstruction; as_known_at(T, R) what was believed
    at R, just before and at the late arrival."""
    return [_c4_item(draw, number) for number in range(1, count + 1)]


def _c4_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    subject = draw.name(lambda: f"Shipment SH-{draw.token(5)}")
    predicate, value_type, make = rng.choice(CHANGING)
    versions = rng.randrange(3, 6)
    values = make(rng, versions)
    starts = _moments(rng, versions, EPOCH, HORIZON - timedelta(days=60))
    order = list(range(versions))
    while order == sorted(order):
        rng.shuffle(order)
    arrivals = [(starts[i], values[i]) for i in order]  # in arrival (record) order
    authority = draw.authority()  # one source: late evidence is not an authority contest
    writes = [
        {
            "round": r + 1,
            "op": "assert",
            "ref": f"r{r + 1}",
            "claim": _claim(
                draw,
                subject=subject,
                predicate=predicate,
                value=value,
                value_type=value_type,
                valid_from=start,
                subject_type="shipment",
                authority=authority,
            ),
        }
        for r, (start, value) in enumerate(arrivals)
    ]

    def final_end(index: int) -> datetime | None:
        return starts[index + 1] if index + 1 < versions else None

    def as_of(moment: datetime) -> dict[str, Any]:
        expected = _belief(arrivals, versions, moment)
        held = _holder(starts, moment)
        stale = [_belief(arrivals, upto, moment) for upto in range(1, versions)]
        stale += values[:held]
        return _value_question(
            "as_of",
            "as_of",
            subject,
            predicate,
            expected,
            stale=[v for v in stale if v is not None],
            valid_time=iso(moment),
        )

    def known_at(moment: datetime, upto: int, round_: int, offset_us: int):
        expected = _belief(arrivals, upto, moment)
        earlier = [_belief(arrivals, u, moment) for u in range(1, upto)]
        known = [value for _, value in arrivals[:upto]]
        # Known by then and valid before the expected one: outdated at `moment`.
        held = [v for start, v in sorted(arrivals[:upto], key=lambda a: a[0]) if start <= moment]
        stale = [v for v in earlier + held[:-1] if v is not None]
        later = [v for v in values if not any(same(v, k) for k in known)]
        return _value_question(
            "as_known_at",
            "bitemporal",
            subject,
            predicate,
            expected,
            nothing=expected is None,
            stale=stale,
            forbidden=later,
            valid_time=iso(moment),
            record_ref=f"r{round_}",
            record_offset_us=offset_us,
        )

    # The first arrival that landed before something already known.
    late = next(r for r in range(1, versions) if arrivals[r][0] < max(s for s, _ in arrivals[:r]))
    late_start = arrivals[late][0]
    known_after = [s for s, _ in arrivals[:late] if s > late_start]
    probe = _inside(rng, late_start, min(known_after))
    other = _inside(rng, starts[0] - timedelta(days=365), None)
    other_round = rng.randrange(1, versions + 1)
    picks = rng.sample(range(versions), 2)
    questions = [
        _value_question(
            "current", "current_value", subject, predicate, values[-1], stale=values[:-1]
        ),
        as_of(_inside(rng, starts[picks[0]], final_end(picks[0]))),
        as_of(_inside(rng, starts[picks[1]], final_end(picks[1]))),
        known_at(probe, late, late + 1, -1),  # just before the late value arrived
        known_at(probe, late + 1, late + 1, 0),  # as it arrived
        known_at(other, other_round, other_round, 0),
    ]
    return _spec(
        "c4",
        number,
        f"C4 late evidence: {subject}.{predicate}, {versions} values in arrival order "
        + ",".join(str(i + 1) for i in order),
        F.R3,
        writes,
        questions,
    )


# ------------------------------------------------------------- C5 multi-hop


def c5_multihop(draw: Draw, count: int) -> list[ItemSpec]:
    """Relation chains of 2-4 hops among decoy edges to look-alike entities.
    Half end one hop (by /end, by a new value, or with valid_to given) and
    continue to a new target: paths must follow the relations valid at the
    query's valid time, and only those."""
    return [_c5_item(draw, number) for number in range(1, count + 1)]


def _c5_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    hops = rng.randrange(2, 5)
    predicates = [rng.choice(RELATIONS)[0] for _ in range(hops)]
    nodes = [draw.org() for _ in range(hops + 1)]
    starts = [_moment(rng, EPOCH, datetime(2012, 1, 1, tzinfo=UTC)) for _ in range(hops)]
    complete = max(starts)  # the whole chain holds from here
    variant = rng.choice([None, None, None, "end", "supersede", "valid_to"])
    broken = rng.randrange(hops)
    if variant == "supersede" and CARDINALITY[predicates[broken]] != "one":
        variant = "end"
    ended_at = _moment(rng, datetime(2015, 1, 1, tzinfo=UTC), datetime(2020, 1, 1, tzinfo=UTC))
    authority = draw.authority()  # one source, so a new relation supersedes the old

    def relation(subject, predicate, obj, start, *, valid_to=None):
        return _claim(
            draw,
            subject=subject,
            predicate=predicate,
            object_entity=obj,
            cardinality=CARDINALITY[predicate],
            subject_type="org",
            object_type="org",
            valid_from=start,
            valid_to=valid_to,
            authority=authority,
        )

    writes = []
    for hop in range(hops):
        valid_to = ended_at if variant == "valid_to" and hop == broken else None
        writes.append(
            {
                "round": 1,
                "op": "assert",
                "ref": f"hop{hop}",
                "claim": relation(
                    nodes[hop], predicates[hop], nodes[hop + 1], starts[hop], valid_to=valid_to
                ),
            }
        )
    # Decoys: edges off the chain to look-alikes of the next node. A
    # single-valued predicate cannot have a second value, so its decoys
    # use another predicate.
    for hop in range(hops):
        for _ in range(rng.randrange(1, 3)):
            predicate = predicates[hop]
            if CARDINALITY[predicate] == "one":
                predicate = rng.choice([p for p, c in RELATIONS if c == "many"])
            writes.append(
                {
                    "round": 1,
                    "op": "assert",
                    "ref": f"decoy{len(writes)}",
                    "claim": relation(
                        nodes[hop],
                        predicate,
                        draw.lookalike(nodes[hop + 1]),
                        _moment(rng, EPOCH, datetime(2012, 1, 1, tzinfo=UTC)),
                    ),
                }
            )

    def paths(end, expected, *, valid_time=None, by_predicates=True, forbidden=()):
        question = {
            "q": "paths",
            "metric": "multihop",
            "start": nodes[0],
            "end": end,
            "expect": expected,
            "forbidden": list(forbidden),
        }
        if by_predicates:
            question["predicates"] = predicates
        else:
            question["hops"] = hops
        if valid_time is not None:
            question["valid_time"] = iso(valid_time)
        return question

    old_path = {"nodes": nodes, "predicates": predicates}
    before = _inside(rng, EPOCH - timedelta(days=1), complete)
    if variant is None:
        questions = [
            paths(nodes[-1], [old_path]),
            paths(nodes[-1], [old_path], by_predicates=False),
            paths(nodes[-1], [], valid_time=before, forbidden=[old_path]),
        ]
        title = f"C5 multi-hop: {hops} hops {' > '.join(predicates)}"
    else:
        # The broken hop's source goes on to a new target from ended_at.
        new_nodes = nodes[: broken + 1] + [draw.org() for _ in range(hops - broken)]
        new_path = {"nodes": new_nodes, "predicates": predicates}
        replacement_round = {"valid_to": 1, "supersede": 2, "end": 3}[variant]
        for hop in range(broken, hops):
            writes.append(
                {
                    "round": replacement_round,
                    "op": "assert",
                    "ref": f"new{hop}",
                    "claim": relation(
                        new_nodes[hop],
                        predicates[hop],
                        new_nodes[hop + 1],
                        ended_at if hop == broken else _moment(rng, EPOCH, ended_at),
                    ),
                }
            )
        if variant == "end":
            authority = writes[broken]["claim"]["authority"]
            writes.append(
                {
                    "round": 2,
                    "op": "end",
                    "ref": "ended",
                    "target": f"hop{broken}",
                    "body": {"valid_to": iso(ended_at), **draw.provenance(authority)},
                }
            )
        middle = _inside(rng, complete, ended_at)
        after = _inside(rng, ended_at, None) if rng.random() < 0.5 else None
        questions = [
            paths(nodes[-1], [old_path], valid_time=middle, forbidden=[new_path]),
            paths(nodes[-1], [], valid_time=after, forbidden=[old_path]),
            paths(new_nodes[-1], [new_path], forbidden=[old_path]),
            paths(new_nodes[-1], [], valid_time=middle, forbidden=[new_path]),
        ]
        title = (
            f"C5 multi-hop: {hops} hops {' > '.join(predicates)}, "
            f"hop {broken + 1} ended ({variant})"
        )
    return _spec("c5", number, title, F.R2, writes, questions)


def generate(rng: random.Random, counts: dict[str, int] | None = None) -> list[ItemSpec]:
    """Every item of a run, C1 to C5, in that order."""
    counts = {**COUNTS, **(counts or {})}
    draw = Draw(rng)
    return [
        *c1_retention(draw, counts["c1"]),
        *c2_supersession(draw, counts["c2"]),
        *c3_authority(draw, counts["c3"]),
        *c4_late_evidence(draw, counts["c4"]),
        *c5_multihop(draw, counts["c5"]),
    ]
