"""Suite D's seeded draw: house rules, the traces an agent sees of them, the
skills the reference agent writes from those traces, and the tasks it then
meets.

Pure: a function of the random.Random it is given and nothing else (no clock,
no I/O, no iteration over sets), so the same seed draws the same items.

A *house* is an invented organisation with its own arbitrary rule for one of
four families of procedure, every constant drawn from the seed, so that no
answer can be guessed or recalled from anywhere but the skill:

* checksum: a weighted, position-dependent character sum, offset and reduced
  modulo a house prime, written in the house's base, width, tag and separator,
  with or without a check letter;
* record: id, name and quantity in the house's field order, separator,
  widths, padding and case, followed by a house check number;
* label: each letter shifted by the house key, maybe reversed, maybe upper case;
* seal: a slice of the SHA-256 of the salted text (through the sandbox's
  declared `sha256` tool).

`expected(rule, params)` is the battery's own implementation of a rule; the
procedure the agent writes (`procedure_source`) is another, so a result is
checked against a value computed independently of the code that produced it.

An item's `data`:
* `rule` (and `revised`, D6): the house rule;
* `definition` (and `definition_v2`, D6): the body the agent POSTs to create
  the skill (or its next version);
* `events`: ledger events the agent has seen (traces, failures, audits,
  revisions), by `ref`;
* `provenance` (and `provenance_v2`): the events the version is distilled from;
* `promotion`: how the agent earns validation: `external` (the house's
  checker, with a key of its own, reports `verified`, the trace, as an
  externally verified execution with its ledger event as evidence) or `runs`
  (three sandbox executions on the agent's `trials` params, each checked by
  the validator, plus the replay on inputs the service draws, which runs by
  itself).
  D6's second version is always validated the external way (`verified_v2`);
* `uses`: tasks the agent meets later: it matches the task and executes the
  best applicable version on the params; `expected` is the house rule's value,
  `stale` (D6) the old rule's, `naive` (D2) what the failed attempt did;
* `probes` (D5): look-alike tasks whose context (or wording) the skill's
  contraindication covers: nothing may be applied; (D7, each with its `kind`
  and `vocabulary`) look-alike tasks no contraindication names — params
  outside the parameter_schema (`wrong_domain`: execute must refuse them), a
  declared precondition missing from or contradicted by the context
  (`precondition_unmet`: match must not offer it), the skill's words asked
  of an object of another kind (`unsaid_misuse`: match must not offer it);
* `checks`: what `check` grades, each under one metric.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F

COUNTS = {"d1": 16, "d2": 12, "d3": 16, "d4": 16, "d5": 16, "d6": 12, "d7": 16}
FAMILIES = ("checksum", "record", "label", "seal")
METRICS = (
    "held_out",
    "learned",
    "negative_transfer",
    "control",
    "lifecycle",
    "undeclared",
    "undeclared_held_out",
)
ACTOR = "battery-reference-agent"

PRIMES = (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73)
MODULI = (997, 1009, 1013, 4093, 4099, 7919, 9967, 9973, 65521, 99989, 99991)
SEPARATORS = ("-", "/", ":", "#", "=", "+")
RECORD_SEPARATORS = ("|", ";", "~", "/", ":")
PADS = (".", "_", "-")
ONSETS = ("b", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr")
ONSETS += ("gl", "kr", "sk", "st", "th", "tr", "vr", "wh")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "y")
CODAS = ("", "", "n", "r", "l", "s", "th", "m", "k", "x", "nd", "rk", "lt")
DOMAINS = (
    "shipping manifests",
    "grain tallies",
    "seed vault labels",
    "tide logs",
    "archive boxes",
    "ferry tickets",
    "wool bales",
    "lantern permits",
    "salt cellar stock",
    "orchard crates",
    "bell tower rotas",
    "courier pouches",
)

# What the agent knows a family is called, and the words its trigger accepts.
NOUNS = {"checksum": "checksum", "record": "record", "label": "label", "seal": "seal"}
SYNONYMS = {
    "checksum": ("checksum", "check sum", "digest", "control number", "tally code"),
    "record": ("record", "ledger line", "entry line", "register row"),
    "label": ("label", "tag", "marker"),
    "seal": ("seal", "signature", "fingerprint", "stamp"),
}
CANONICAL = {
    "checksum": "Compute the {house} house checksum for the text '{text}'",
    "record": "Format the {house} house record for id {id}, name {name}, quantity {qty}",
    "label": "Make the {house} house label for the word '{word}'",
    "seal": "Produce the {house} house seal for the text '{text}'",
}
# Near transfer (D4): synonyms, other word order, other sentence shapes.
NEAR = {
    "checksum": (
        "For the text '{text}', work out the digest the {house} house uses",
        "What is the control number of '{text}' under {house} house rules?",
        "'{text}' needs its {house} check sum",
        "{house} tally code wanted for '{text}'",
    ),
    "record": (
        "Write id {id}, quantity {qty} and name {name} as a {house} ledger line",
        "{house} house entry line needed: name {name}, qty {qty}, id {id}",
        "Quantity {qty} of {name} (id {id}): the {house} register row, please",
    ),
    "label": (
        "Encode '{word}' as a {house} tag",
        "{house} house: produce the marker for '{word}'",
        "The word '{word}' needs the tag of the {house} house",
    ),
    "seal": (
        "Stamp '{text}' the way the {house} house does",
        "What signature does the {house} house give the text '{text}'?",
        "{house} fingerprint of '{text}', please",
    ),
}
# D5: a contraindication in the context, and one in the wording.
CONTEXT_CONTRAINDICATIONS = (
    (
        {"path": "ledger.era", "op": "eq", "value": "legacy"},
        {"ledger": {"era": "legacy"}},
        "legacy ledgers still use the pre-reform rule",
    ),
    (
        {"path": "ledger.currency", "op": "in", "value": ["XAU", "XAG"]},
        {"ledger": {"currency": "XAG"}},
        "metal-backed ledgers are sealed by the assay office, not the house",
    ),
    (
        {"path": "audit.mode", "op": "eq", "value": "dry-run"},
        {"audit": {"mode": "dry-run"}},
        "a dry run must not produce a binding value",
    ),
    (
        {"path": "batch.size", "op": "gt", "value": 500},
        {"batch": {"size": 750}},
        "batches over 500 go through the bulk office's rule",
    ),
)
KEYWORD_CONTRAINDICATIONS = (
    (
        ["archived copy", "archive copy"],
        "for the archived copy",
        "archived copies keep the rule of their year",
    ),
    (["test ledger"], "in the test ledger", "the test ledger uses throwaway values"),
    (["reprint"], "for a reprint", "a reprint reuses the original value"),
    (["foreign branch"], "for the foreign branch", "foreign branches follow their own house"),
)
CLEAN_CONTEXTS = (
    {"ledger": {"era": "current", "currency": "EUR"}},
    {"ledger": {"era": "current"}, "audit": {"mode": "live"}},
    {"batch": {"size": 40}, "ledger": {"currency": "NOK"}},
    {"audit": {"mode": "live"}, "batch": {"size": 120}},
)


# D7: inappropriate uses no contraindication names. A precondition each D7
# skill declares: (condition, a context where it holds, one contradicting it).
PRECONDITIONS = (
    (
        {"path": "env.os", "op": "eq", "value": "linux"},
        {"env": {"os": "linux"}},
        {"env": {"os": "windows"}},
    ),
    (
        {"path": "ledger.currency", "op": "eq", "value": "EUR"},
        {"ledger": {"currency": "EUR"}},
        {"ledger": {"currency": "USD"}},
    ),
    (
        {"path": "units.weight", "op": "eq", "value": "kg"},
        {"units": {"weight": "kg"}},
        {"units": {"weight": "lb"}},
    ),
    (
        {"path": "house.region", "op": "in", "value": ["north", "west"]},
        {"house": {"region": "north"}},
        {"house": {"region": "south"}},
    ),
    (
        {"path": "batch.size", "op": "lte", "value": 500},
        {"batch": {"size": 200}},
        {"batch": {"size": 900}},
    ),
)
SEEN, HELD_OUT = "seen", "held_out"
UNDECLARED_KINDS = ("wrong_domain", "precondition_unmet", "unsaid_misuse")
# The task as the skill's own tasks are worded ({noun}: one of the family's
# trigger words; {value}: the params as the task shows them). Seen phrasings
# use the canonical phrases' words; held-out ones use no word (house names,
# trigger words and values aside) of skills/conditions.py or skills/selectors.py
# (battery/tests/test_suite_procedural.py checks).
LOOKALIKE = {
    SEEN: (
        "Make the {house} house {noun} for {value}",
        "Compute the {house} house {noun} for {value}",
        "Produce the {house} house {noun} for {value}",
        "Format the {house} house {noun} for {value}",
    ),
    HELD_OUT: (
        "{house} {noun} wanted: {value}",
        "Could you do {house} {noun} about {value}?",
        "Urgent {house} {noun} job, input {value}",
        "Please work out {house} {noun} covering {value}",
    ),
}
# The family's trigger words in another sense: an object of another kind.
MISUSE = {
    SEEN: {
        "checksum": (
            "Make the {house} house weekly news digest for the staff",
            "Produce the {house} house control number of the fire inspection certificate",
            "Make the {house} house tally code sheet for the football team",
        ),
        "record": (
            "Make the {house} house record of the board meeting minutes",
            "Make the {house} house record for the fastest crate unload",
            "Format the {house} house register row of seats for the concert",
        ),
        "label": (
            "Make the {house} house label for the parcel to Oslo",
            "Produce the {house} house marker pens for the whiteboards",
            "Make the {house} house price tag for the blue coat",
        ),
        "seal": (
            "Make the {house} house wax seal for the wedding invitations",
            "Produce the {house} house rubber stamp for the front desk",
            "Make the {house} house signature on the office lease",
        ),
    },
    HELD_OUT: {
        "checksum": (
            "Email {house} weekly news digest toward our staff",
            "Look up {house} control number printed upon fire inspection papers",
            "Draw up {house} tally code sheets tracking football team goals",
        ),
        "record": (
            "Play {house} vinyl record during Friday party",
            "Break {house} record pace unloading crates",
            "Book {house} register row seats beside stage",
        ),
        "label": (
            "Print {house} shipping label addressed toward Oslo",
            "Buy {house} marker pens alongside whiteboard erasers",
            "Find {house} price tag sewn onto blue coat",
        ),
        "seal": (
            "Press {house} wax seal onto wedding invitations",
            "Reset {house} fingerprint scanner beside vault door",
            "Obtain {house} director signature upon office lease",
        ),
    },
}
OTHER_ALPHABET = ("мост", "берег", "соль", "звезда", "κύμα", "λιμάνι")


# ------------------------------------------------------------------ house rules


def _record_check(body: str, span: int) -> int:
    return sum(ord(c) * (1 + i % span) for i, c in enumerate(body)) % 97


def expected(rule: dict[str, Any], params: dict[str, Any]) -> str:
    """The house rule's value for `params`: the battery's own implementation."""
    family = rule["family"]
    if family == "checksum":
        weights = rule["weights"]
        total = rule["offset"] + sum(
            ord(ch) * weights[i % len(weights)] * (i + 1) for i, ch in enumerate(params["text"])
        )
        value = total % rule["modulus"]
        digits = f"{value:0{rule['width']}{'X' if rule['base'] == 16 else 'd'}}"
        letter = chr(65 + value % 26) if rule["check_letter"] else ""
        return f"{rule['tag']}{rule['sep']}{digits}{letter}"
    if family == "record":
        name = params["name"].upper() if rule["upper"] else params["name"].lower()
        fields = {
            "id": str(params["id"]).rjust(rule["id_width"], "0"),
            "name": name + rule["pad"] * (rule["name_width"] - len(name)),
            "qty": str(params["qty"]).rjust(rule["qty_width"], "0"),
        }
        body = rule["sep"].join(fields[f] for f in rule["order"])
        return f"{body}{rule['sep']}{_record_check(body, rule['span']):02d}"
    if family == "label":
        key = rule["key"]
        shifted = [
            chr(97 + (ord(ch) - 97 + key[i % len(key)]) % 26) for i, ch in enumerate(params["word"])
        ]
        text = "".join(reversed(shifted) if rule["reverse"] else shifted)
        return f"{rule['tag']}{rule['sep']}{text.upper() if rule['upper'] else text}"
    if family == "seal":
        digest = hashlib.sha256(f"{rule['salt']}{params['text']}{rule['pepper']}".encode())
        start = rule["start"]
        return f"{rule['tag']}{rule['sep']}{digest.hexdigest()[start : start + rule['length']]}"
    raise ValueError(f"unknown family {family!r}")


def naive(rule: dict[str, Any], params: dict[str, Any]) -> str:
    """What an agent without the house rule does (D2's failed attempt): the
    textbook version of the family, with none of the house's constants."""
    family = rule["family"]
    if family == "checksum":
        return f"{sum(ord(ch) for ch in params['text']) % 1000:03d}"
    if family == "record":
        return f"{params['id']},{params['name']},{params['qty']}"
    if family == "label":
        return params["word"].upper()
    return hashlib.sha256(params["text"].encode()).hexdigest()[:12]


def schema(family: str) -> dict[str, Any]:
    word = {"type": "string", "pattern": "^[a-z]{3,12}$"}
    if family == "record":
        properties = {
            "id": {"type": "integer", "minimum": 0, "maximum": 99999},
            "name": word,
            "qty": {"type": "integer", "minimum": 0, "maximum": 9999},
        }
    elif family == "label":
        properties = {"word": word}
    else:
        properties = {"text": {"type": "string", "minLength": 1, "maxLength": 40}}
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


def procedure_source(rule: dict[str, Any]) -> str:
    """The procedure the agent writes down for the rule (run(params, tools))."""
    family = rule["family"]
    if family == "checksum":
        spec = "X" if rule["base"] == 16 else "d"
        return (
            f"WEIGHTS = {rule['weights']!r}\n"
            f"MODULUS = {rule['modulus']}\n"
            f"OFFSET = {rule['offset']}\n"
            f"FORMAT = {'0' + str(rule['width']) + spec!r}\n"
            f"PREFIX = {rule['tag'] + rule['sep']!r}\n"
            f"CHECK_LETTER = {rule['check_letter']!r}\n\n\n"
            "def run(params, tools):\n"
            "    value = OFFSET\n"
            "    for position, char in enumerate(params['text'], start=1):\n"
            "        value += ord(char) * WEIGHTS[(position - 1) % len(WEIGHTS)] * position\n"
            "    value %= MODULUS\n"
            "    out = PREFIX + format(value, FORMAT)\n"
            "    if CHECK_LETTER:\n"
            "        out += chr(ord('A') + value % 26)\n"
            "    return out\n"
        )
    if family == "record":
        return (
            f"ORDER = {rule['order']!r}\n"
            f"SEP = {rule['sep']!r}\n"
            f"WIDTHS = {{'id': {rule['id_width']}, 'name': {rule['name_width']}, "
            f"'qty': {rule['qty_width']}}}\n"
            f"PAD = {rule['pad']!r}\n"
            f"UPPER = {rule['upper']!r}\n"
            f"SPAN = {rule['span']}\n\n\n"
            "def check_number(body):\n"
            "    return sum(ord(c) * (1 + i % SPAN) for i, c in enumerate(body)) % 97\n\n\n"
            "def run(params, tools):\n"
            "    name = params['name'].upper() if UPPER else params['name'].lower()\n"
            "    fields = {\n"
            "        'id': str(params['id']).zfill(WIDTHS['id']),\n"
            "        'name': name.ljust(WIDTHS['name'], PAD),\n"
            "        'qty': str(params['qty']).zfill(WIDTHS['qty']),\n"
            "    }\n"
            "    body = SEP.join(fields[name] for name in ORDER)\n"
            "    return body + SEP + '%02d' % check_number(body)\n"
        )
    if family == "label":
        return (
            f"KEY = {rule['key']!r}\n"
            f"REVERSE = {rule['reverse']!r}\n"
            f"UPPER = {rule['upper']!r}\n"
            f"PREFIX = {rule['tag'] + rule['sep']!r}\n\n\n"
            "def run(params, tools):\n"
            "    alphabet = 'abcdefghijklmnopqrstuvwxyz'\n"
            "    letters = [\n"
            "        alphabet[(alphabet.index(c) + KEY[i % len(KEY)]) % 26]\n"
            "        for i, c in enumerate(params['word'])\n"
            "    ]\n"
            "    if REVERSE:\n"
            "        letters = letters[::-1]\n"
            "    text = ''.join(letters)\n"
            "    return PREFIX + (text.upper() if UPPER else text)\n"
        )
    return (
        f"SALT = {rule['salt']!r}\n"
        f"PEPPER = {rule['pepper']!r}\n"
        f"START = {rule['start']}\n"
        f"LENGTH = {rule['length']}\n"
        f"PREFIX = {rule['tag'] + rule['sep']!r}\n\n\n"
        "def run(params, tools):\n"
        "    digest = tools.sha256({'text': SALT + params['text'] + PEPPER})\n"
        "    return PREFIX + digest[START:START + LENGTH]\n"
    )


def validator_source(rule: dict[str, Any]) -> str:
    """The agent's validator: the result's shape and its internal check, not a
    second run of the procedure."""
    family, prefix = rule["family"], rule.get("tag", "") + rule.get("sep", "")
    if family == "checksum":
        return (
            f"PREFIX = {prefix!r}\n"
            f"WIDTH = {rule['width']}\n"
            f"BASE = {rule['base']}\n"
            f"MODULUS = {rule['modulus']}\n"
            f"CHECK_LETTER = {rule['check_letter']!r}\n\n\n"
            "def validate(params, result, tools):\n"
            "    if not isinstance(result, str) or not result.startswith(PREFIX):\n"
            "        return False\n"
            "    body = result[len(PREFIX):]\n"
            "    digits, letter = body[:WIDTH], body[WIDTH:]\n"
            "    try:\n"
            "        value = int(digits, BASE)\n"
            "    except ValueError:\n"
            "        return False\n"
            "    if len(digits) != WIDTH or value >= MODULUS:\n"
            "        return False\n"
            "    return letter == (chr(ord('A') + value % 26) if CHECK_LETTER else '')\n"
        )
    if family == "record":
        return (
            f"SEP = {rule['sep']!r}\n"
            f"ORDER = {rule['order']!r}\n"
            f"SPAN = {rule['span']}\n\n\n"
            "def validate(params, result, tools):\n"
            "    if not isinstance(result, str):\n"
            "        return False\n"
            "    parts = result.split(SEP)\n"
            "    if len(parts) != len(ORDER) + 1:\n"
            "        return False\n"
            "    body = SEP.join(parts[:-1])\n"
            "    check = sum(ord(c) * (1 + i % SPAN) for i, c in enumerate(body)) % 97\n"
            "    fields = dict(zip(ORDER, parts))\n"
            "    return (\n"
            "        parts[-1] == '%02d' % check\n"
            "        and int(fields['id']) == params['id']\n"
            "        and int(fields['qty']) == params['qty']\n"
            "        and fields['name'].lower().startswith(params['name'])\n"
            "    )\n"
        )
    if family == "label":
        return (
            f"PREFIX = {prefix!r}\n\n\n"
            "def validate(params, result, tools):\n"
            "    if not isinstance(result, str) or not result.startswith(PREFIX):\n"
            "        return False\n"
            "    text = result[len(PREFIX):]\n"
            "    return len(text) == len(params['word']) and text.isalpha()\n"
        )
    return (
        f"PREFIX = {prefix!r}\n"
        f"LENGTH = {rule['length']}\n\n\n"
        "def validate(params, result, tools):\n"
        "    if not isinstance(result, str) or not result.startswith(PREFIX):\n"
        "        return False\n"
        "    digest = result[len(PREFIX):]\n"
        "    return len(digest) == LENGTH and all(c in '0123456789abcdef' for c in digest)\n"
    )


def trigger(rule: dict[str, Any]) -> dict[str, Any]:
    """The agent's trigger: the house's name and any word for the family, in any order."""
    words = "|".join(re.escape(w).replace("\\ ", " ") for w in SYNONYMS[rule["family"]])
    return {"regex": rf"(?=.*\b{rule['house']}\b)(?=.*\b(?:{words})\b)"}


def purpose(rule: dict[str, Any]) -> str:
    """What the skill is for, in the words a task would use (the intent is embedded from it)."""
    house, family = rule["house"], rule["family"]
    words = ", ".join(SYNONYMS[family][1:])
    return f"Make the {house} house {NOUNS[family]} ({words}) by the {house} house's own rule"


def task_text(template: str, rule: dict[str, Any], params: dict[str, Any]) -> str:
    return template.format(house=rule["house"], **params)


# ----------------------------------------------------------------------- the draw


class Draw:
    """One run's draw: its randomness and the names and params it has handed out."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.houses: list[str] = []
        self.words: set[str] = set()

    def syllables(self, count: int) -> str:
        rng = self.rng
        return "".join(
            rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(count)
        )

    def house(self) -> str:
        while True:
            name = self.syllables(self.rng.choice((2, 3))).capitalize()
            lowered = name.lower()
            if 5 <= len(name) <= 12 and not any(
                lowered in other.lower() or other.lower() in lowered for other in self.houses
            ):
                self.houses.append(name)
                return name

    def word(self) -> str:
        while True:
            word = self.syllables(self.rng.choice((1, 2, 3)))
            if 3 <= len(word) <= 12 and word not in self.words:
                self.words.add(word)
                return word

    def params(self, family: str) -> dict[str, Any]:
        if family == "record":
            return {
                "id": self.rng.randrange(1, 99999),
                "name": self.word()[:8],
                "qty": self.rng.randrange(0, 9999),
            }
        if family == "label":
            return {"word": self.word()}
        text = self.word()
        if self.rng.random() < 0.5:
            text += f"-{self.rng.randrange(10, 999)}"
        return {"text": text}

    def fresh(self, family: str, count: int, avoid: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`count` params of the family that are none of `avoid` nor each other."""
        drawn: list[dict[str, Any]] = []
        while len(drawn) < count:
            params = self.params(family)
            if params not in avoid and params not in drawn:
                drawn.append(params)
        return drawn

    def rule(self, family: str) -> dict[str, Any]:
        rng = self.rng
        house = self.house()
        rule: dict[str, Any] = {
            "family": family,
            "house": house,
            "domain": rng.choice(DOMAINS),
            "tag": house[:3].upper() + str(rng.randrange(1, 10)),
            "sep": rng.choice(SEPARATORS),
        }
        if family == "checksum":
            modulus = rng.choice(MODULI)
            base = rng.choice((10, 16))
            least = len(f"{modulus - 1:{'X' if base == 16 else 'd'}}")
            rule.update(
                weights=rng.sample(PRIMES, rng.randrange(3, 6)),
                modulus=modulus,
                offset=rng.randrange(0, 500),
                base=base,
                width=least + rng.randrange(0, 3),
                check_letter=rng.random() < 0.5,
            )
        elif family == "record":
            order = ["id", "name", "qty"]
            rng.shuffle(order)
            rule.update(
                order=order,
                sep=rng.choice(RECORD_SEPARATORS),
                id_width=rng.randrange(5, 8),
                qty_width=rng.randrange(4, 6),
                name_width=rng.randrange(9, 12),
                pad=rng.choice(PADS),
                upper=rng.random() < 0.5,
                span=rng.randrange(2, 6),
            )
            del rule["tag"]
        elif family == "label":
            rule.update(
                key=[rng.randrange(1, 26) for _ in range(rng.randrange(2, 6))],
                reverse=rng.random() < 0.5,
                upper=rng.random() < 0.5,
            )
        else:
            rule.update(
                salt=self.word()[:6],
                pepper=str(rng.randrange(100, 9999)),
                start=rng.randrange(0, 20),
                length=rng.randrange(8, 17),
            )
        return rule

    def revise(self, rule: dict[str, Any]) -> dict[str, Any]:
        """The house's new rule (D6): one constant changed."""
        rng, revised = self.rng, dict(rule)
        family = rule["family"]
        if family == "checksum":
            revised["modulus"] = rng.choice([m for m in MODULI if m != rule["modulus"]])
            least = len(f"{revised['modulus'] - 1:{'X' if rule['base'] == 16 else 'd'}}")
            revised["width"] = max(rule["width"], least)
        elif family == "record":
            revised["sep"] = rng.choice([s for s in RECORD_SEPARATORS if s != rule["sep"]])
        elif family == "label":
            revised["key"] = [k % 25 + 1 for k in rule["key"]]
        else:
            revised["pepper"] = str(int(rule["pepper"]) + rng.randrange(1, 50))
        return revised


# ------------------------------------------------------------------- D7's probes


def shown(family: str, params: dict[str, Any]) -> str:
    """The params as a task shows them."""
    if family == "record":
        return f"{params.get('name')} #{params.get('id')} x{params.get('qty')}"
    value = params.get("word" if family == "label" else "text")
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, list):
        return ", ".join(f"'{v}'" for v in value)
    return str(value)


def wrong_domain(draw: Draw, family: str) -> list[tuple[dict[str, Any], str]]:
    """Params of another domain than the family's parameter_schema, each with
    what is wrong with them: (params, why). None fits the schema."""
    rng = draw.rng
    word, number = draw.word()[:8], rng.randrange(10000, 99999)
    if family == "record":
        base = {"id": rng.randrange(1, 99999), "name": word, "qty": rng.randrange(1, 999)}
        qty = base["qty"]
        return [
            ({**base, "qty": f"{qty} kg"}, "a weight with its unit where a count is expected"),
            ({**base, "qty": f"EUR {qty}.50"}, "an amount of money where a count is expected"),
            ({**base, "qty": qty + 0.5}, "a fractional quantity where a whole count is expected"),
            (
                {**base, "id": f"INV-{number}"},
                "an invoice reference where a numeric id is expected",
            ),
            ({**base, "id": number * 100}, "an id from another register, above 99999"),
            (
                {**base, "name": f"{word.upper()}{number % 10}"},
                "a product code where a word is expected",
            ),
            ({**base, "qty": -qty}, "a negative quantity (a return)"),
        ]
    if family == "label":
        return [
            ({"word": f"INV-{number}"}, "a record id where a lower-case word is expected"),
            ({"word": number}, "a number where a word is expected"),
            ({"word": rng.choice(OTHER_ALPHABET)}, "a word in another alphabet"),
            ({"word": f"{word} {draw.word()[:6]}"}, "two words where one is expected"),
            ({"word": f"{word.capitalize()}{number % 100}"}, "a code with capitals and digits"),
        ]
    words = [draw.word()]
    while len(" ".join(words)) <= 40:
        words.append(draw.word())
    return [
        ({"text": number}, "a record number (an integer) where a text is expected"),
        ({"text": words[:3]}, "a batch of texts (a list) where one text is expected"),
        ({"text": " ".join(words)}, "a paragraph longer than the 40 characters a text may have"),
        (
            {"text": word, "encoding": "latin-1"},
            "another encoding asked for, a parameter it has not",
        ),
        ({"text": ""}, "an empty text"),
    ]


def _merged(context: dict[str, Any], *more: dict[str, Any]) -> dict[str, Any]:
    """`context` with `more` laid over it, one level of objects deep."""
    merged = {
        key: dict(value) if isinstance(value, dict) else value for key, value in context.items()
    }
    for layer in more:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged


def definition(
    rule: dict[str, Any],
    *,
    examples: list[dict[str, Any]],
    holdout: list[dict[str, Any]],
    contraindications: list[dict[str, Any]] | None = None,
    preconditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The version body the agent POSTs: examples carry their expected value,
    hold-out cases only params (the validator judges them)."""
    body: dict[str, Any] = {
        "purpose": purpose(rule),
        "scope": f"{rule['domain']} of the {rule['house']} house only",
        "trigger": trigger(rule),
        "parameter_schema": schema(rule["family"]),
        "procedure": procedure_source(rule),
        "validator": validator_source(rule),
        "required_tools": ["sha256"] if rule["family"] == "seal" else [],
        "required_permissions": ["write"],
        "examples": [{"params": p, "expected": expected(rule, p)} for p in examples],
        "holdout": [{"params": p} for p in holdout],
    }
    if contraindications:
        body["contraindications"] = contraindications
    if preconditions:
        body["preconditions"] = preconditions
    return body


class Plan:
    """One item's world and checks, as it is drawn."""

    def __init__(self, kind: str, number: int) -> None:
        self.kind, self.number = kind, number
        self.key = f"{kind}_{number:04d}"
        self.data: dict[str, Any] = {"events": [], "uses": [], "probes": [], "checks": []}

    def event(self, ref: str, event_type: str, payload: dict[str, Any], session: str) -> None:
        self.data["events"].append(
            {
                "ref": ref,
                "event": {
                    "event_type": event_type,
                    "payload": payload,
                    "session_id": session,
                    "actor": ACTOR,
                    "source_type": "tool_result",
                },
            }
        )

    def check(self, q: str, metric: str, **fields: Any) -> None:
        self.data["checks"].append({"q": q, "metric": metric, **fields})

    def use(
        self,
        rule: dict[str, Any],
        template: str,
        params: dict[str, Any],
        *,
        metric: str,
        session: str,
        context: dict[str, Any],
        **fields: Any,
    ) -> None:
        index = len(self.data["uses"])
        self.data["uses"].append(
            {
                "task": task_text(template, rule, params),
                "context": context,
                "params": params,
                "expected": expected(rule, params),
                "session": session,
                **fields,
            }
        )
        self.check("use", metric, use=index)

    def spec(self, title: str, **metrics: Any) -> ItemSpec:
        planned: dict[str, int] = {}
        for check in self.data["checks"]:
            planned[check["metric"]] = planned.get(check["metric"], 0) + 1
        return ItemSpec(
            key=self.key,
            title=title,
            default_code=F.S1,
            data=self.data,
            metrics={"kind": self.kind.upper(), "planned": planned, **metrics},
        )


def _session(plan: Plan, suffix: str) -> str:
    return f"{plan.key}-{suffix}"


def _skill_name(rule: dict[str, Any]) -> str:
    return f"{rule['house'].lower()}-{rule['family']}"


def _base(draw: Draw, plan: Plan, family: str) -> dict[str, Any]:
    rule = draw.rule(family)
    plan.data.update(rule=rule, name=_skill_name(rule))
    return rule


def _context(draw: Draw) -> dict[str, Any]:
    return dict(draw.rng.choice(CLEAN_CONTEXTS))


def _promotion(draw: Draw, plan: Plan, family: str, how: str, seen: list) -> None:
    plan.data["promotion"] = how
    if how == "runs":
        plan.data["trials"] = draw.fresh(family, 3, seen)
        seen.extend(plan.data["trials"])


def d1_acquisition(draw: Draw, count: int) -> list[ItemSpec]:
    """One trace, one example; validated by the trace (externally verified) and
    the hold-out replay; then a successor session (a new key of the same
    agent) matches and executes it on new params."""
    specs = []
    for number in range(1, count + 1):
        plan = Plan("d1", number)
        family = FAMILIES[(number - 1) % len(FAMILIES)]
        rule = _base(draw, plan, family)
        trace, *holdout = draw.fresh(family, 3, [])
        session, successor = _session(plan, "s1"), _session(plan, "s2")
        plan.event(
            "trace",
            "house.task_completed",
            {"house": rule["house"], "params": trace, "result": expected(rule, trace)},
            session,
        )
        plan.data.update(
            definition=definition(rule, examples=[trace], holdout=holdout),
            session=session,
            successor=successor,
            provenance=["trace"],
        )
        plan.data["verified"] = {"params": trace, "ref": "trace"}
        _promotion(draw, plan, family, "external", [trace, *holdout])
        plan.check("premature_promotion_refused", "lifecycle")
        plan.check("validated_by_evidence", "lifecycle")
        for params in draw.fresh(family, 2, [trace, *holdout]):
            plan.use(
                rule,
                CANONICAL[family],
                params,
                metric="held_out",
                session=successor,
                context=_context(draw),
            )
        specs.append(
            plan.spec(f"D1 one-shot {family} of house {rule['house']}, used after a handover")
        )
    return specs


def d2_failure(draw: Draw, count: int) -> list[ItemSpec]:
    """A failed attempt (the textbook rule) and the house auditor's rejection
    with the right value become a skill with that provenance; the homologous
    task then succeeds."""
    specs = []
    for number in range(1, count + 1):
        plan = Plan("d2", number)
        family = FAMILIES[(number - 1) % len(FAMILIES)]
        rule = _base(draw, plan, family)
        session = _session(plan, "s1")
        while True:
            failed, second, *holdout = draw.fresh(family, 4, [])
            homologous = draw.fresh(family, 1, [failed, second, *holdout])[0]
            if all(naive(rule, p) != expected(rule, p) for p in (failed, homologous)):
                break
        plan.event(
            "failure",
            "house.task_failed",
            {
                "house": rule["house"],
                "task": task_text(CANONICAL[family], rule, failed),
                "params": failed,
                "result": naive(rule, failed),
                "error": "rejected by the house auditor",
            },
            session,
        )
        plan.event(
            "evidence",
            "house.audit_rejected",
            {
                "house": rule["house"],
                "params": failed,
                "rejected": naive(rule, failed),
                "correct": expected(rule, failed),
                "rule": {k: v for k, v in rule.items() if k not in ("house", "domain")},
            },
            session,
        )
        plan.data.update(
            definition=definition(rule, examples=[failed, second], holdout=holdout),
            session=session,
            provenance=["failure", "evidence"],
            verified={"params": failed, "ref": "evidence"},
        )
        _promotion(draw, plan, family, "external", [failed, second, *holdout])
        plan.check("provenance", "lifecycle")
        plan.use(
            rule,
            CANONICAL[family],
            homologous,
            metric="learned",
            session=session,
            context=_context(draw),
            naive=naive(rule, homologous),
        )
        specs.append(plan.spec(f"D2 {family} of house {rule['house']} learned from a failure"))
    return specs


def d3_unseen(draw: Draw, count: int) -> list[ItemSpec]:
    """Parameter values none of the examples, trials or hold-out cases had."""
    specs = []
    for number in range(1, count + 1):
        plan = Plan("d3", number)
        family = FAMILIES[(number - 1) % len(FAMILIES)]
        rule = _base(draw, plan, family)
        session = _session(plan, "s1")
        seen = _learned_from_trace(
            draw, plan, rule, family, session, how=("runs", "external")[number % 2]
        )
        plan.check("validated_by_evidence", "lifecycle")
        for params in draw.fresh(family, 3, seen):
            plan.use(
                rule,
                CANONICAL[family],
                params,
                metric="held_out",
                session=session,
                context=_context(draw),
            )
            plan.check("transfer_counted", "lifecycle", use=len(plan.data["uses"]) - 1)
        specs.append(plan.spec(f"D3 {family} of house {rule['house']} on unseen values"))
    return specs


def _learned_from_trace(
    draw: Draw, plan, rule, family: str, session: str, *, how: str, preconditions=None
) -> list:
    """A skill distilled from one completed trace: two examples (and two hold-out
    cases when it is validated the external way), the trace as its provenance and
    verified run, and how it earns validation. Returns every value the agent has seen."""
    examples = draw.fresh(family, 2, [])
    holdout = draw.fresh(family, 2, examples) if how == "external" else []
    seen = [*examples, *holdout]
    plan.event(
        "trace",
        "house.task_completed",
        {"house": rule["house"], "params": examples[0], "result": expected(rule, examples[0])},
        session,
    )
    extra = {"preconditions": preconditions} if preconditions is not None else {}
    plan.data.update(
        definition=definition(rule, examples=examples, holdout=holdout, **extra), session=session
    )
    plan.data.update(provenance=["trace"], verified={"params": examples[0], "ref": "trace"})
    _promotion(draw, plan, family, how, seen)
    return seen


def d4_near(draw: Draw, count: int) -> list[ItemSpec]:
    """The task worded otherwise (synonyms, another order) still finds the skill."""
    specs = []
    for number in range(1, count + 1):
        plan = Plan("d4", number)
        family = FAMILIES[(number - 1) % len(FAMILIES)]
        rule = _base(draw, plan, family)
        session = _session(plan, "s1")
        examples = draw.fresh(family, 2, [])
        how = ("external", "runs")[number % 2]
        holdout = draw.fresh(family, 2, examples) if how == "external" else []
        seen = [*examples, *holdout]
        plan.event(
            "trace",
            "house.task_completed",
            {"house": rule["house"], "params": examples[0], "result": expected(rule, examples[0])},
            session,
        )
        plan.data.update(
            definition=definition(rule, examples=examples, holdout=holdout), session=session
        )
        plan.data.update(provenance=["trace"], verified={"params": examples[0], "ref": "trace"})
        _promotion(draw, plan, family, how, seen)
        templates = draw.rng.sample(NEAR[family], 2)
        for template, params in zip(templates, draw.fresh(family, 2, seen), strict=True):
            plan.use(
                rule, template, params, metric="held_out", session=session, context=_context(draw)
            )
        specs.append(plan.spec(f"D4 {family} of house {rule['house']} asked for in other words"))
    return specs


def d5_negative(draw: Draw, count: int) -> list[ItemSpec]:
    """Look-alike tasks a contraindication covers (in the context, or in the
    wording): no skill may be applied; the same task without it may."""
    specs = []
    for number in range(1, count + 1):
        plan = Plan("d5", number)
        family = FAMILIES[(number - 1) % len(FAMILIES)]
        rule = _base(draw, plan, family)
        session = _session(plan, "s1")
        condition, bad_context, why = CONTEXT_CONTRAINDICATIONS[
            (number - 1) % len(CONTEXT_CONTRAINDICATIONS)
        ]
        keywords, phrase, keyword_why = KEYWORD_CONTRAINDICATIONS[
            draw.rng.randrange(len(KEYWORD_CONTRAINDICATIONS))
        ]
        examples = draw.fresh(family, 2, [])
        how = ("external", "runs")[number % 2]
        holdout = draw.fresh(family, 2, examples) if how == "external" else []
        seen = [*examples, *holdout]
        plan.event(
            "trace",
            "house.task_completed",
            {"house": rule["house"], "params": examples[0], "result": expected(rule, examples[0])},
            session,
        )
        contraindications = [
            {**condition, "reason": why},
            {"keywords": keywords, "reason": keyword_why},
        ]
        plan.data.update(
            definition=definition(
                rule, examples=examples, holdout=holdout, contraindications=contraindications
            ),
            session=session,
        )
        plan.data.update(provenance=["trace"], verified={"params": examples[0], "ref": "trace"})
        _promotion(draw, plan, family, how, seen)
        params = draw.fresh(family, 3, seen)
        clean = {k: v for k, v in _context(draw).items() if k not in bad_context}
        probes = [
            {
                "task": task_text(CANONICAL[family], rule, params[0]),
                "context": {**clean, **bad_context},
                "params": params[0],
                "why": f"context {condition['path']} {condition['op']} {condition['value']!r}",
            },
            {
                "task": f"{task_text(CANONICAL[family], rule, params[1])} {phrase}",
                "context": clean,
                "params": params[1],
                "why": f"the task says {phrase!r}",
            },
        ]
        plan.data["probes"] = probes
        for index in range(len(probes)):
            plan.check("probe", "negative_transfer", probe=index)
        plan.use(
            rule, CANONICAL[family], params[2], metric="control", session=session, context=clean
        )
        specs.append(
            plan.spec(
                f"D5 {family} of house {rule['house']} not applied where contraindicated",
                probes=len(probes),
            )
        )
    return specs


def d6_revision(draw: Draw, count: int) -> list[ItemSpec]:
    """The house changes its rule: v2 supersedes v1 and is the one used; v1
    stays readable with its executions and is never run again."""
    specs = []
    for number in range(1, count + 1):
        plan = Plan("d6", number)
        family = FAMILIES[(number - 1) % len(FAMILIES)]
        rule = _base(draw, plan, family)
        revised = draw.revise(rule)
        session = _session(plan, "s1")
        examples = draw.fresh(family, 2, [])
        seen = list(examples)
        plan.event(
            "trace",
            "house.task_completed",
            {"house": rule["house"], "params": examples[0], "result": expected(rule, examples[0])},
            session,
        )
        plan.data.update(
            definition=definition(rule, examples=examples, holdout=[]),
            session=session,
            revised=revised,
            provenance=["trace"],
        )
        _promotion(draw, plan, family, "runs", seen)
        while True:
            trace_v2, *holdout_v2 = draw.fresh(family, 3, seen)
            held = draw.fresh(family, 1, [*seen, trace_v2, *holdout_v2])[0]
            if all(expected(rule, p) != expected(revised, p) for p in (trace_v2, held)):
                break
        plan.event(
            "revision",
            "house.rule_revised",
            {
                "house": rule["house"],
                "params": trace_v2,
                "result": expected(revised, trace_v2),
                "was": expected(rule, trace_v2),
            },
            session,
        )
        plan.data.update(
            definition_v2=definition(revised, examples=[trace_v2], holdout=holdout_v2),
            provenance_v2=["revision"],
            verified_v2={"params": trace_v2, "ref": "revision"},
        )
        for q in (
            "validated_by_evidence",
            "v2_supersedes_v1",
            "v1_deprecated",
            "v1_reconstructable",
            "stale_handle_refused",
            "no_obsolete_execution",
        ):
            plan.check(q, "lifecycle")
        plan.use(
            revised,
            CANONICAL[family],
            held,
            metric="held_out",
            session=session,
            context=_context(draw),
            stale=expected(rule, held),
            version="v2",
        )
        specs.append(plan.spec(f"D6 {family} of house {rule['house']} revised"))
    return specs


def d7_undeclared(draw: Draw, count: int) -> list[ItemSpec]:
    """Inappropriate uses no contraindication names (the skill declares one
    precondition and no contraindication): params of another domain than its
    schema (execute must refuse them), the precondition missing from or
    contradicted by the context (match must not offer it: a near miss,
    precondition_failed), and the skill's trigger words asked of an object of
    another kind (match must not offer it). Two of each, one in the seen
    phrasings and one in the held-out ones; the task in its own domain, with
    the precondition holding, must still be done (the control)."""
    specs = []
    for number in range(1, count + 1):
        plan = Plan("d7", number)
        family = FAMILIES[(number - 1) % len(FAMILIES)]
        rule = _base(draw, plan, family)
        session = _session(plan, "s1")
        condition, holds, contradicts = PRECONDITIONS[draw.rng.randrange(len(PRECONDITIONS))]
        seen = _learned_from_trace(
            draw,
            plan,
            rule,
            family,
            session,
            how=("external", "runs")[number % 2],
            preconditions=[condition],
        )
        clean = _context(draw)
        fit = _merged(clean, holds)
        top = condition["path"].split(".")[0]
        lacking = {k: v for k, v in clean.items() if k != top}
        unmet = [
            (lacking, f"the context has no {condition['path']}"),
            (_merged(clean, contradicts), f"the context contradicts {condition['path']}"),
        ]
        if number % 2 == 0:
            unmet.reverse()
        wrong = wrong_domain(draw, family)
        picked = draw.rng.sample(range(len(wrong)), 2)
        valid = draw.fresh(family, 5, seen)
        probes = []
        for index, vocabulary in enumerate((SEEN, HELD_OUT)):
            params, why = wrong[picked[index]]
            template = draw.rng.choice(LOOKALIKE[vocabulary])
            noun = draw.rng.choice(SYNONYMS[family])
            value = shown(family, params)
            probes.append(
                {
                    "kind": "wrong_domain",
                    "vocabulary": vocabulary,
                    "task": template.format(house=rule["house"], noun=noun, value=value),
                    "context": fit,
                    "params": params,
                    "why": f"params of another domain: {why}",
                }
            )
        for index, vocabulary in enumerate((SEEN, HELD_OUT)):
            context, why = unmet[index]
            template = draw.rng.choice(LOOKALIKE[vocabulary])
            noun = draw.rng.choice(SYNONYMS[family])
            params = valid[index]
            probes.append(
                {
                    "kind": "precondition_unmet",
                    "vocabulary": vocabulary,
                    "task": template.format(
                        house=rule["house"], noun=noun, value=shown(family, params)
                    ),
                    "context": context,
                    "params": params,
                    "why": f"{why} (precondition {condition['path']} {condition['op']} "
                    f"{condition['value']!r})",
                }
            )
        for index, vocabulary in enumerate((SEEN, HELD_OUT)):
            template = draw.rng.choice(MISUSE[vocabulary][family])
            probes.append(
                {
                    "kind": "unsaid_misuse",
                    "vocabulary": vocabulary,
                    "task": template.format(house=rule["house"]),
                    "context": fit,
                    "params": valid[2 + index],
                    "why": "the trigger's words, asked of an object of another kind",
                }
            )
        plan.data["probes"] = probes
        for index, probe in enumerate(probes):
            metric = "undeclared" if probe["vocabulary"] == SEEN else "undeclared_held_out"
            plan.check("undeclared", metric, probe=index)
        plan.use(rule, CANONICAL[family], valid[4], metric="control", session=session, context=fit)
        specs.append(
            plan.spec(
                f"D7 {family} of house {rule['house']} not applied where it does not fit, "
                "though nothing says so",
                undeclared_asked=dict(Counter(p["kind"] for p in probes)),
            )
        )
    return specs


KINDS: dict[str, Callable[[Draw, int], list[ItemSpec]]] = {
    "d1": d1_acquisition,
    "d2": d2_failure,
    "d3": d3_unseen,
    "d4": d4_near,
    "d5": d5_negative,
    "d6": d6_revision,
    "d7": d7_undeclared,
}


def generate(rng: random.Random, counts: dict[str, int] | None = None) -> list[ItemSpec]:
    """Every item of a run, D1 to D7, in that order."""
    counts = {**COUNTS, **(counts or {})}
    draw = Draw(rng)
    return [spec for kind, make in KINDS.items() for spec in make(draw, counts[kind])]
