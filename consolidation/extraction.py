"""Statements of fact in episode text: (subject, predicate, value) proposals.

An extractor is any object with a `name` and `extract(text) -> list[Statement]`;
settings.CONSOLIDATION_EXTRACTORS lists the dotted paths of the ones in use
(`load_extractors()`), so another — a model-backed one, a domain's own rules —
plugs in beside or instead of `PatternExtractor`. Extraction only proposes:
the consolidation services decide what is trusted enough to become a
candidate and what is asserted (and then as agent_inference, below any user's
or operator's word).

`PatternExtractor` is rule-based. It reads one sentence at a time, and drops
sentences that do not state a present fact: questions, negations ("is no
longer", "did not move"), conditionals and modality ("if", "might", "plans
to", "will"), reported speech ("said", "according to", "claims") and what
used to hold ("used to", "old/former/previous …"). Then it matches a few
sentence shapes:

* "<Subject>'s <attribute> is/was/is now/was changed to <value>"
* "The <attribute> of <Subject> is/was … <value>"
* "<Subject> moved/relocated to <value>", "<Subject> lives/is based in <value>" → location
* "<Subject> is assigned to / working on <value>" → assigned_to
* "<Subject> is due (on|by) <date>", "the deadline for <Subject> is <date>" → due_date
* "<Subject> reports to <value>" → reports_to; "works at/for, joined" → employer
* "<Subject> is owned by <value>" → owner
* "(Set|Changed|Updated) <Subject>'s <attribute> to <value>" (an action's words)

A subject is a capitalised name ("Alice Chen", "Project Apollo") or an
identifier with a separator ("billing-api", "OPS-1234").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol

from django.conf import settings
from django.utils.module_loading import import_string

PREDICATE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
MAX_VALUE_WORDS = 8
MAX_SUBJECT_CHARS = 120
MAX_VALUE_CHARS = 200


@dataclass(frozen=True)
class Statement:
    """One proposal: `subject` `predicate` `value`, how sure the rule is, where it was read."""

    subject: str
    predicate: str
    value: str
    confidence: float
    excerpt: str
    rule: str


class Extractor(Protocol):
    name: str

    def extract(self, text: str) -> list[Statement]: ...


@cache
def _load(paths: tuple[str, ...]) -> tuple[Extractor, ...]:
    extractors = []
    for path in paths:
        factory = import_string(path)
        extractor = factory() if isinstance(factory, type) else factory
        if not callable(getattr(extractor, "extract", None)) or not getattr(extractor, "name", ""):
            raise TypeError(f"{path} is not an extractor: it needs a name and extract(text)")
        extractors.append(extractor)
    return tuple(extractors)


def load_extractors() -> tuple[Extractor, ...]:
    """The extractors settings.CONSOLIDATION_EXTRACTORS names, in order (loaded once)."""
    return _load(tuple(settings.CONSOLIDATION_EXTRACTORS))


# ------------------------------------------------------------------------ sentences

# Checked just after the full stop, so each ends with it.
_ABBREVIATIONS = (
    r"(?<!\bDr\.)(?<!\bMr\.)(?<!\bMs\.)(?<!\bMrs\.)(?<!\bSt\.)(?<!\bJr\.)(?<!\bSr\.)"
    r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)"
)
# A sentence starts with a capital, a digit, a quote — or an identifier in lower case
# ("billing-api's timeout is 30 s."), which ops notes open sentences with.
# The end-of-sentence lookbehind is tried first: it fails at almost every
# position, where the ten abbreviation lookbehinds would all be tried for nothing.
_SENTENCES = re.compile(
    rf"(?<=[.!?]){_ABBREVIATIONS}\s+(?=[A-Z0-9\"'(]|[a-z0-9]+[-_./][a-z0-9])|[\n;]+|\s+-\s+"
)

# A sentence that does not state a fact that holds now.
_NOT_A_FACT = re.compile(
    r"\?|"
    r"\b(?:not|never|no longer|nor|neither|cannot|n't|without)\b|n't\b|"
    r"\b(?:if|unless|whether|in case|assuming|suppose|supposing|hypothetically|imagine)\b|"
    r"\b(?:going to|gonna|about to)\b|"
    r"\b(?:plans?|planning|planned|intends?|intending|wants?|wanted|hopes?|hoping|wishes|"
    r"expects?|expecting|considering|thinking|proposed|proposes|suggests?|suggested|"
    r"requested|requests|asks?|asked|wonders?|wondered|tries|tried|trying)\b|"
    r"\b(?:maybe|perhaps|probably|possibly|likely|unlikely|presumably|supposedly|allegedly|"
    r"apparently|reportedly|rumou?red|seems?|seemed|appears? to|guess|think|believes?|"
    r"believed|doubts?)\b|"
    r"\b(?:said|says|saying|claims?|claimed|told|tells|according to|wrote|writes|heard|"
    r"mentioned|quoted|reported|reports that|insists?|insisted|announced)\b|"
    r"\b(?:used to|formerly|previously|old|former|previous|ex|earlier)\b|"
    r"[\"“”]",
    re.I,
)
# Modals in lower case only: "May 3" is a date, "Will Turner" a name.
_MODAL = re.compile(
    r"(?<![\w\-])(?:might|may(?!\s+\d)|could|would|should|will|shall|must|can)(?![\w\-])"
)

_IDENTIFIER = re.compile(r"[A-Za-z0-9]+(?:[-_./@+][A-Za-z0-9]+)+")

# What may open a sentence before its subject: time, connectives.
_LEAD = re.compile(
    r"^(?:(?:yesterday|today|tonight|now|also|then|so|and|but|meanwhile|recently|finally|"
    r"update|fyi|note|as of \w+(?: \d+)?|this (?:morning|afternoon|week|month)|last "
    r"(?:week|month|night|year)|on \w+day|in \w+)[,:]?\s+)+",
    re.I,
)

_NAME_WORD = (
    r"(?:[A-Z][\w&\-]*(?:'[A-Z][\w&\-]*)?(?:\.[A-Za-z]+)*|[A-Za-z0-9]+(?:[-_./][A-Za-z0-9]+)+|"
    r"[A-Z0-9]{2,}\d*)"
)
_SUBJECT = (
    rf"(?P<subject>(?:[Tt]he\s+)?(?:(?:Dr|Mr|Mrs|Ms|St)\.\s+)?{_NAME_WORD}"
    rf"(?:\s+(?:{_NAME_WORD}|of|de|van|von|da|del)){{0,4}})"
)
# Attribute words are not the verb that follows them ("e-mail was updated to").
_ATTR_WORD = r"(?!(?:is|was|has|have|had|been|got|now|became|changed|updated|set|switched)\b)[a-z][a-z0-9\-]*"
_ATTRIBUTE = rf"(?P<attr>{_ATTR_WORD}(?:\s+{_ATTR_WORD}){{0,3}})"
# A value runs to the end of its clause, before any time phrase or connective.
_VALUE = r"(?P<value>.+?)"
# A comma or "and" before a capitalised word or a number continues a name ("Cortez,
# Jones and Cervantes", "March 3, 2026"); any other connective or time phrase ends it.
_VALUE_END = (
    r"(?=\s*(?:;|,(?!\s*[A-Z0-9])|\s(?:and|&)\b(?!\s+[A-Z0-9])|"
    r"\s(?:but|because|since|after|before|when|while|as|so|which|who|where|with|for|"
    r"yesterday|today|tonight|recently|earlier|later|now|again|effective|starting|from|"
    r"last|this|next|(?i:on (?:mon|tues|wednes|thurs|fri|satur|sun)day)|"
    r"(?i:in (?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december|spring|summer|autumn|fall|winter|\d{4})))\b|\.?\s*$))"
)
_DATE_VALUE = (
    r"(?P<value>\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:Z|[+-]\d{2}:?\d{2})?)?|"
    r"(?:(?:mon|tues|wednes|thurs|fri|satur|sun)day,?\s+)?"
    r"(?:(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.?\s+\d{1,2}(?:st|nd|rd|th)?"
    r"(?:,?\s+\d{4})?|\d{1,2}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:january|february|march|april|"
    r"may|june|july|august|september|october|november|december)(?:,?\s+\d{4})?)|"
    r"(?:mon|tues|wednes|thurs|fri|satur|sun)day|end of (?:the )?(?:week|month|quarter|year)|"
    r"q[1-4](?:\s+\d{4})?|\d{1,2}/\d{1,2}/\d{2,4})"
)

_IS = (
    r"(?P<verb>is now|is|has become|became|has been changed to|was changed to|got changed to|"
    r"changed to|has been updated to|was updated to|got updated to|updated to|was set to|"
    r"is set to|has been set to|has changed to|was switched to|switched to|now is|was)"
)
_STRONG_VERBS = {"is", "is now", "has become", "became", "now is"}

_RULES: tuple[tuple[str, re.Pattern, str | None, float], ...] = (
    # rule, pattern, fixed predicate (None: from the attribute), confidence; the first
    # that fits a sentence wins, so the specific shapes (dates) come first
    (
        "due",
        re.compile(
            rf"^{_SUBJECT}\s+(?:is|was)\s+(?:now\s+)?due\s+(?:on\s+|by\s+)?{_DATE_VALUE}\b", re.I
        ),
        "due_date",
        0.8,
    ),
    (
        "deadline_for",
        re.compile(
            rf"^[Tt]he\s+(?:deadline|due date)\s+(?:for|of)\s+{_SUBJECT}\s+(?:is|was)\s+"
            rf"(?:now\s+|moved to\s+|set to\s+)?{_DATE_VALUE}\b",
            re.I,
        ),
        "due_date",
        0.8,
    ),
    (
        "possessive",
        re.compile(rf"^{_SUBJECT}'s?\s+{_ATTRIBUTE}\s+{_IS}\s+{_VALUE}{_VALUE_END}"),
        None,
        0.85,
    ),
    (
        "attribute_of",
        re.compile(
            rf"^[Tt]he\s+{_ATTRIBUTE}\s+(?:of|for)\s+{_SUBJECT}\s+{_IS}\s+{_VALUE}{_VALUE_END}"
        ),
        None,
        0.85,
    ),
    (
        "set_to",
        re.compile(
            rf"^(?:[A-Za-z0-9_\-]+\s+)?(?i:set|changed|updated|switched|moved|raised|lowered|"
            rf"bumped|reset)\s+{_SUBJECT}'s?\s+{_ATTRIBUTE}\s+(?:from\s+.+?\s+)?to\s+{_VALUE}{_VALUE_END}",
        ),
        None,
        0.8,
    ),
    (
        "set_to_of",
        re.compile(
            rf"^(?:[A-Za-z0-9_\-]+\s+)?(?i:set|changed|updated|switched|raised|lowered|bumped|reset)"
            rf"\s+the\s+{_ATTRIBUTE}\s+(?:of|for)\s+{_SUBJECT}\s+(?:from\s+.+?\s+)?to\s+{_VALUE}{_VALUE_END}",
        ),
        None,
        0.8,
    ),
    (
        "moved_to",
        re.compile(
            rf"^{_SUBJECT}\s+(?:has\s+)?(?:moved|relocated|was moved|was relocated|got moved)"
            rf"(?:\s+\w+)?\s+to\s+{_VALUE}{_VALUE_END}"
        ),
        "location",
        0.8,
    ),
    (
        "located_in",
        re.compile(
            rf"^{_SUBJECT}\s+(?:now\s+)?(?:lives|resides|runs|sits|(?:is\s+)?(?:now\s+)?"
            rf"(?:based|located|hosted|deployed))\s+(?:in|at|on)\s+{_VALUE}{_VALUE_END}"
        ),
        "location",
        0.8,
    ),
    (
        "assigned_to",
        re.compile(
            rf"^{_SUBJECT}\s+(?:is|was|has been|got)\s+(?:now\s+)?(?:re)?assigned\s+to\s+{_VALUE}{_VALUE_END}"
        ),
        "assigned_to",
        0.75,
    ),
    (
        "working_on",
        re.compile(
            rf"^{_SUBJECT}\s+(?:is\s+)?(?:now\s+)?(?:working|works)\s+on\s+{_VALUE}{_VALUE_END}"
        ),
        "assigned_to",
        0.75,
    ),
    (
        "reports_to",
        re.compile(rf"^{_SUBJECT}\s+(?:now\s+)?reports\s+to\s+{_VALUE}{_VALUE_END}"),
        "reports_to",
        0.8,
    ),
    (
        "employer",
        re.compile(
            rf"^{_SUBJECT}\s+(?:now\s+)?(?:works\s+(?:at|for)|joined|is employed by|was hired by)"
            rf"\s+{_VALUE}{_VALUE_END}"
        ),
        "employer",
        0.75,
    ),
    (
        "owned_by",
        re.compile(rf"^{_SUBJECT}\s+(?:is|was)\s+(?:now\s+)?owned\s+by\s+{_VALUE}{_VALUE_END}"),
        "owner",
        0.8,
    ),
)

# What a rule's sentence must contain, checked before the rule's own pattern:
# a word the pattern requires, found far faster than the pattern fails (the
# case-insensitive "due" rule lets its subject take any words, and backtracks).
_NEEDS: dict[str, re.Pattern] = {
    "due": re.compile(r"due", re.I),
    "deadline_for": re.compile(r"deadline|due date", re.I),
    "possessive": re.compile(r"'"),
}

# Attribute words that say nothing, or say the value is not the current one.
_ATTRIBUTE_DROP = {"new", "current", "updated", "latest", "official", "primary", "main", "actual"}
_ATTRIBUTE_REFUSE = {
    "it",
    "this",
    "that",
    "one",
    "thing",
    "stuff",
    "way",
    "time",
    "idea",
    "guess",
    "plan",
    "question",
}
_PREDICATE_ALIASES = {
    "deadline": "due_date",
    "due_date": "due_date",
    "e_mail": "email",
    "email_address": "email",
    "e_mail_address": "email",
    "phone_number": "phone",
    "telephone_number": "phone",
    "mobile_number": "phone",
    "location": "location",
    "home_city": "location",
    "city": "location",
    "assignee": "assignee",
    "owner": "owner",
    "manager": "reports_to",
    "boss": "reports_to",
    "employer": "employer",
    "company": "employer",
}
_SUBJECT_REFUSE = {
    "i",
    "we",
    "you",
    "he",
    "she",
    "they",
    "it",
    "this",
    "that",
    "there",
    "the",
    "our",
    "my",
    "your",
    "their",
    "his",
    "her",
    "its",
    "everyone",
    "someone",
    "nobody",
    "today",
    "yesterday",
}


def sentences(text: str) -> list[str]:
    return [s.strip(" \t\"'()[]") for s in _SENTENCES.split(text or "") if s and s.strip()]


def predicate_for(attribute: str) -> str | None:
    words = [w for w in attribute.lower().split() if w not in _ATTRIBUTE_DROP]
    if not words or (len(words) == 1 and words[0] in _ATTRIBUTE_REFUSE):
        return None
    name = re.sub(r"[^a-z0-9]+", "_", "_".join(words)).strip("_")
    name = _PREDICATE_ALIASES.get(name, name)
    return name if PREDICATE_NAME.fullmatch(name) and len(name) <= 100 else None


def _clean_subject(subject: str) -> str | None:
    subject = re.sub(r"^[Tt]he\s+", "", subject.strip())
    if not subject or subject.lower() in _SUBJECT_REFUSE or len(subject) > MAX_SUBJECT_CHARS:
        return None
    return subject


def _clean_value(value: str) -> str | None:
    value = value.strip().rstrip(".!,;:").strip(" \"'`")
    value = re.sub(r"^(?:the|a|an)\s+(?=[A-Z0-9])", "", value)
    if not value or len(value) > MAX_VALUE_CHARS or len(value.split()) > MAX_VALUE_WORDS:
        return None
    if value.lower() in {"it", "this", "that", "them", "there", "here", "unknown", "none", "tbd"}:
        return None
    return value


class PatternExtractor:
    """The rule-based extractor (see the module docstring)."""

    name = "patterns/1"

    def extract(self, text: str) -> list[Statement]:
        found: list[Statement] = []
        for sentence in sentences(text):
            # Identifiers are names, not words: "believe-api", "must-worker".
            words = _IDENTIFIER.sub("X", sentence)
            if _NOT_A_FACT.search(words) or _MODAL.search(words):
                continue
            sentence = _LEAD.sub("", sentence)
            for rule, pattern, fixed, confidence in _RULES:
                needs = _NEEDS.get(rule)
                if needs is not None and needs.search(sentence) is None:
                    continue
                match = pattern.search(sentence)
                if match is None:
                    continue
                statement = self._statement(rule, match, fixed, confidence, sentence)
                if statement is not None:
                    found.append(statement)
                    break  # one statement a sentence: the first shape that fits
        return found

    @staticmethod
    def _statement(rule, match, fixed, confidence, sentence) -> Statement | None:
        groups = match.groupdict()
        predicate = fixed or predicate_for(groups.get("attr") or "")
        subject = _clean_subject(groups["subject"])
        value = _clean_value(groups["value"])
        if predicate is None or subject is None or value is None:
            return None
        if value.lower() == subject.lower():
            return None
        verb = groups.get("verb")
        if verb is not None and verb not in _STRONG_VERBS and verb == "was":
            confidence -= 0.2  # "was": the state then, perhaps not now
        return Statement(subject, predicate, value, round(confidence, 3), sentence, rule)


def extract_all(
    texts: Sequence[str], extractors: Sequence[Extractor]
) -> list[tuple[str, Statement]]:
    """Every statement every extractor finds in every text: (extractor name, statement)."""
    return [
        (extractor.name, statement)
        for text in texts
        if text
        for extractor in extractors
        for statement in extractor.extract(text)
    ]
