"""Is a proposed fact about what the question asks? (current_fact's gate)

Similarity only proposes (subject, predicate) pairs; a pair answers a
question only if the question is about its subject and about its predicate.
The test is on words, so that it can be read and argued with:

Subject — one of:
* `named`: the question names it — one of its names as whole words
  (facts.search.entities_named_in: any case, a possessive 's ignored), or
  every word of one of its names somewhere in the question ("the service
  Sparrow", "sparrow-service").
* `other_named`: the question names another thing the agent knows, not this
  one. Rejected.
* `unnamed`: the question names no known thing, and has words that neither
  the pair's subject nor its predicate explain ("Which team owns the Starling
  service?" against "owning team — Sparrow service": *starling*). It is about
  something the agent was never told of. Rejected.
* `partial`: no known thing named, some words of this subject's name used and
  every other word explained ("Which team owns Sparrow?").
* `implied`: no subject in the question at all ("When is our deployment
  window now?"): accepted only if the pair's text is similar enough
  (settings.PIPER_FACT_IMPLIED_MIN_SIMILARITY).

Predicate — one of, the first that holds:
* `stated`: a word of its name is in the question (light stemming: owns /
  owning, replicas / replica, deploy / deployment).
* `alias`: one of the aliases the predicate was declared with is (every word
  of it): `deadline` with aliases ["due", "due by"].
* `described`: a word of its description is (describe a predicate to widen
  the words it is known by).
* `phrased`: the question uses a phrase its family is asked with
  (FAMILY_PHRASES, a small curated map: a `deadline` is asked "due" or "by
  when", an `allocation` "working on" or "assigned to").
* `synonym`: a word of the question shares a frequent WordNet sense with a
  word of its name or aliases, or derives from one (assigned ↔ assignment,
  delivered ↔ delivery) — recall/lexicon.py.
* `meaning`: of the subject's predicates, this one is the nearest in meaning
  to what the question asks (the question with its subject taken out,
  against each predicate's name and aliases, by embedding), clear of the
  next; and of all the predicates the agent holds facts under, none is
  nearer by more than PIPER_FACT_MEANING_MARGIN, unless it may be this
  attribute under another name: of the same kind, and never stated about
  one subject together with it (an agent that calls one attribute by two
  names uses one per thing; `owner` and `custodian` are never both stated
  of a thing, `deadline` and `start_date` are). A subject that lacks the
  attribute asked does not answer with another. When the question asks for
  a kind of value — when (a time), where (a place), who (a person or
  group), how many / how much (a quantity), which <noun> (the noun's kind)
  — only predicates of that kind compete (PredicateKinds: a declared type,
  the stated values, WordNet's hypernyms of the name); a predicate of the
  kind the question words ask for (not a "which <noun>" kind, WordNet's
  guess) needs no minimum similarity, any other
  PIPER_FACT_MEANING_MIN_SIMILARITY.
* `whole_subject`: the question names the subject and asks nothing more
  ("Tell me about the Sparrow service"): every pair of it answers.
* `not_asked`: none of these. Rejected: a known subject's other predicate is
  not an answer to this one.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NAMED, OTHER_NAMED, UNNAMED, PARTIAL, IMPLIED = (
    "named",
    "other_named",
    "unnamed",
    "partial",
    "implied",
)
STATED, ALIAS, DESCRIBED, PHRASED = "stated", "alias", "described", "phrased"
SYNONYM, MEANING, WHOLE_SUBJECT, NOT_ASKED = "synonym", "meaning", "whole_subject", "not_asked"
SUBJECT_ACCEPTED = (NAMED, PARTIAL, IMPLIED)
PREDICATE_ACCEPTED = (STATED, ALIAS, DESCRIBED, PHRASED, SYNONYM, MEANING, WHOLE_SUBJECT)
# Best first, for ordering what is accepted.
SUBJECT_ORDER = {NAMED: 0, PARTIAL: 1, IMPLIED: 2}
PREDICATE_ORDER = {p: n for n, p in enumerate(PREDICATE_ACCEPTED)}


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Function words and question words: never what a question is about.
STOPWORDS = _wordset(
    """
    a an the this that these those some any each every all both either neither no none
    i me my mine we us our ours you your yours he him his she her hers it its they them
    their theirs one someone anyone somebody anybody something anything
    what which who whom whose when where why how whether
    is are was were be been being am do does did done doing have has had having
    will would shall should can could may might must ought
    of in on at by for from to into onto with without about over under between through
    during before after above below up down out off than as per via and or but nor so
    if then else not very too also just only there here
    tell please know let give show say much many
    """
)
# Words that ask when, not what: they explain nothing about a subject or predicate.
TIME_WORDS = _wordset(
    """
    now currently current still nowadays today tonight moment present presently right
    latest anymore days day these time again yet already
    """
)
# Words of a question about a thing as a whole.
WHOLE_WORDS = _wordset("everything info information details detail overview summary")
_TOKEN = re.compile(r"[a-z0-9]+")


def stem(word: str) -> str:
    """A light stemmer, the same on both sides: owns/owning → own, replicas →
    replica, deployment/deployed → deploy, cities → city, running → run. It
    leaves "engineer"
    and "engine" apart (a heavier stemmer would merge them)."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    for suffix, keep in (("ment", 4), ("ing", 3), ("ed", 3)):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # running → run, stopped → stop
            return word
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


# As stems, the form the question's words are compared in.
TIME_STEMS = frozenset(map(stem, TIME_WORDS))
WHOLE_STEMS = frozenset(map(stem, WHOLE_WORDS))


def words(text: str) -> list[str]:
    """Lower-case words, a possessive 's dropped ("Alice's" → alice)."""
    text = text.lower().replace("’", "'").replace("‘", "'")
    text = re.sub(r"'s\b", "", text)
    return _TOKEN.findall(text)


def content_words(text: str) -> set[str]:
    """The stems of the words that are not function words."""
    return {stem(w) for w in words(text) if w not in STOPWORDS}


def humanize(predicate_name: str) -> str:
    return re.sub(r"[._]+", " ", predicate_name).strip()


# How people ask for common attributes: a small curated map, each family's
# name words and the phrases it is asked with (suite G3 measures recall on
# phrasings that are not here).
_FAMILIES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("deadline", "due"), ("due", "due by", "by when")),
    (("location", "venue"), ("held", "take place", "taking place", "takes place")),
    (("allocation", "assignment"), ("working on", "work on", "assigned to", "busy with")),
    (("owner",), ("owns", "responsible for", "in charge of")),
    (("headcount", "size"), ("how many people", "how big")),
    (("status", "state"), ("doing",)),
    (("budget",), ("how much money", "budgeted")),
)
# By a word of the predicate's name.
FAMILY_PHRASES: dict[str, tuple[str, ...]] = {
    name: phrases for names, phrases in _FAMILIES for name in names
}


# What kind of value a question asks for, by its question words (KIND_ANCHORS
# in lexicon.py name the kinds); "which <noun>" asks for the noun's kind.
KIND_CUES: tuple[tuple[re.Pattern, tuple[str, ...]], ...] = (
    (re.compile(r"\bwhen\b|\bby when\b|\bhow soon\b"), ("time",)),
    (re.compile(r"\bwhere\b"), ("place",)),
    (re.compile(r"\bwho\b|\bwhom\b|\bwhose\b"), ("person", "group")),
    (re.compile(r"\bhow (many|much|big)\b"), ("quantity",)),
)
_WHICH_NOUN = re.compile(r"\b(?:which|what)\s+([a-z]+)")


def cued_kinds(text: str) -> frozenset[str]:
    """The kinds its question words ask for (when, where, who, how many): the
    sure part of asked_kinds."""
    lowered = " ".join(words(text))
    return frozenset(kind for pattern, cue in KIND_CUES if pattern.search(lowered) for kind in cue)


def asked_kinds(text: str) -> frozenset[str]:
    """The kinds of value the question asks for (empty: it does not say):
    cued_kinds, and the kinds WordNet gives the noun of "which <noun>"."""
    from . import lexicon

    lowered = " ".join(words(text))
    kinds: set[str] = set(cued_kinds(text))
    for match in _WHICH_NOUN.finditer(lowered):
        noun = match.group(1)
        if noun not in STOPWORDS:
            kinds.update(lexicon.kinds(noun))
    return frozenset(kinds)


_MONTH = (
    r"(jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|"
    r"sep(t(ember)?)?|oct(ober)?|nov(ember)?|dec(ember)?)\.?"
)
_DAY = r"\d{1,2}(st|nd|rd|th)?"
_DATE = re.compile(
    rf"\d{{4}}-\d\d(-\d\d)?([t ].*)?|({_DAY} )?{_MONTH}( {_DAY})?(,? \d{{4}})?"
    r"|q[1-4] \d{4}|\d{4} q[1-4]|\d{1,2}/\d{1,2}/\d{2,4}"
)
_AMOUNT = re.compile(r"[$€£¥]? ?[-+]?\d[\d,.' ]*( ?(%|[a-z]{1,12}))?")
# What a declared value type says of the kind.
_DECLARED_KINDS = {"integer": "quantity", "number": "quantity", "datetime": "time"}


# A value's form, and the kind each form is of: a date is a time, a count or
# an amount a quantity.
DATE, COUNT, AMOUNT = "date", "count", "amount"
FORM_KINDS = {DATE: "time", COUNT: "quantity", AMOUNT: "quantity"}
VALUE_KINDS = frozenset(FORM_KINDS.values())


def value_form(value) -> str | None:
    """A date ("March 3", "2025-06-01"), a count (a whole number), an amount
    (a number with a unit or a currency: "12000 EUR", "$5k", "7.5%"), or
    None: anything else (free text, a name, a flag)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return COUNT
    if isinstance(value, float):
        return AMOUNT
    if not isinstance(value, str):
        return None
    text = " ".join(value.lower().split())
    if _DATE.fullmatch(text):
        return DATE
    if _AMOUNT.fullmatch(text):
        return COUNT if text.isdigit() else AMOUNT
    return None


def refused_forms(text: str) -> frozenset[str]:
    """Value forms the question rules out: "how many" counts things, so an
    amount (money, a measure) does not answer it."""
    return frozenset({AMOUNT}) if re.search(r"\bhow many\b", " ".join(words(text))) else frozenset()


@dataclass(frozen=True)
class PredicateKinds:
    """What kinds of value a predicate holds (`of`), and which it cannot
    hold (`not_of`: its values are stated, and none is a date or an amount)."""

    of: frozenset[str]
    not_of: frozenset[str] = frozenset()
    form: str | None = None  # the form every stated value has, if one

    def alike(self, other: PredicateKinds) -> bool:
        """Of one kind, and of one form where both forms are known (a count
        of people and an amount of money are both quantities, not alike)."""
        if not self.of & other.of:
            return False
        return self.form is None or other.form is None or self.form == other.form

    def competes_for(self, asked: frozenset[str], refused: frozenset[str] = frozenset()) -> bool:
        """May it answer a question asking for a value of these kinds (and
        not of the `refused` forms)? One whose kind nothing says may, unless
        its values rule the kinds out."""
        if self.form in refused:
            return False
        if not asked:
            return True
        if self.of:
            return bool(self.of & asked)
        return not asked <= self.not_of


def predicate_kinds(
    name: str, aliases: Sequence[str] = (), values: Sequence = (), value_type: str = ""
) -> PredicateKinds:
    """The kinds of a predicate's values. A declared number or date-time type
    says it; else the values stated under it, when every one of them is a date
    (a time) or an amount (a quantity); else the first sense of the head
    (last) word of its name and of each alias: a `team_size` is a size (a
    quantity), not a team; a `due_date` a day, not a companion. Free-text
    values rule out a time or a quantity WordNet reads into a name (a
    `phase` of "in review" is not a period of time)."""
    from . import lexicon

    forms = {value_form(v) for v in values}
    form = next(iter(forms)) if len(forms) == 1 else None
    if declared := _DECLARED_KINDS.get(value_type):
        return PredicateKinds(frozenset({declared}), form=form)
    shown = {FORM_KINDS.get(f) for f in forms}
    if len(shown) == 1 and None not in shown:
        return PredicateKinds(frozenset(shown), form=form)
    kinds: set[str] = set()
    for phrase in (humanize(name), *aliases):
        phrase_words = words(phrase)
        if phrase_words:
            kinds.update(lexicon.kinds(phrase_words[-1], senses=1))
    if shown == {None}:
        return PredicateKinds(frozenset(kinds - VALUE_KINDS), VALUE_KINDS)
    return PredicateKinds(frozenset(kinds))


# How a question for a value of each kind begins.
_KIND_QUESTION = {
    "time": "When is",
    "place": "Where is",
    "person": "Who is",
    "quantity": "How many is",
}


def as_question(name: str, kinds: frozenset[str]) -> str:
    """A predicate put as a question about "it": the shape its paraphrases
    have ("When is the due date of it?"), for comparing them by embedding."""
    opening = _KIND_QUESTION.get(next(iter(kinds)), "What is") if len(kinds) == 1 else "What is"
    return f"{opening} the {humanize(name)} of it?"


@dataclass(frozen=True)
class Question:
    """A question's content words (stems), and the known things it names (entity ids)."""

    words: frozenset[str]
    named: frozenset[uuid.UUID]
    said: dict[str, str]  # stem -> the word as the question has it
    tokens: tuple[str, ...] = ()  # every word, in order

    @classmethod
    def of(cls, text: str, named: Iterable[uuid.UUID]) -> Question:
        tokens = tuple(words(text))
        said = {stem(w): w for w in tokens if w not in STOPWORDS}
        return cls(frozenset(said), frozenset(named), said, tokens)


def _asks_a_family(question: Question) -> bool:
    return any(_says(question.tokens, phrase) for _, phrases in _FAMILIES for phrase in phrases)


def _says(tokens: Sequence[str], phrase: str) -> bool:
    """Does the question have the phrase's words, in a row?"""
    wanted = tuple(phrase.split())
    return any(tokens[i : i + len(wanted)] == wanted for i in range(len(tokens)))


@dataclass(frozen=True)
class Meaning:
    """How near a predicate is to what the question asks, against the nearest
    of the agent's predicates that compete (see the module: `meaning`)."""

    similarity: float
    nearest: str  # the nearest predicate's name
    nearest_similarity: float
    accepted: bool
    # Nearer predicates taken for this one's attribute under another name.
    same_attribute: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        out = {
            "similarity": round(self.similarity, 4),
            "nearest": self.nearest,
            "nearest_similarity": round(self.nearest_similarity, 4),
        }
        if self.same_attribute:
            out["same_attribute"] = list(self.same_attribute)
        return out


@dataclass(frozen=True)
class Verdict:
    subject: str
    predicate: str
    unexplained: tuple[str, ...] = ()  # the question's words nothing in the pair explains
    via: str | None = None  # the words that made the predicate asked (alias, synonym)
    meaning: Meaning | None = None

    @property
    def subject_ok(self) -> bool:
        return self.subject in SUBJECT_ACCEPTED

    @property
    def predicate_ok(self) -> bool:
        return self.predicate in PREDICATE_ACCEPTED

    @property
    def accepted(self) -> bool:
        return self.subject_ok and self.predicate_ok

    def sort_key(self) -> tuple[int, int]:
        return SUBJECT_ORDER.get(self.subject, 9), PREDICATE_ORDER.get(self.predicate, 9)

    def as_dict(self) -> dict:
        out = {"subject": self.subject, "predicate": self.predicate}
        if self.unexplained:
            out["unexplained"] = list(self.unexplained)
        if self.via:
            out["via"] = self.via
        if self.meaning is not None and self.predicate in (MEANING, NOT_ASKED):
            out["meaning"] = self.meaning.as_dict()
        return out


@dataclass(frozen=True)
class _Match:
    verdict: str
    explains: frozenset[str] = frozenset()  # question stems the match accounts for
    via: str | None = None


def judge(
    question: Question,
    *,
    subject_id: uuid.UUID,
    subject_names: Sequence[str],
    predicate_name: str,
    predicate_description: str = "",
    predicate_aliases: Sequence[str] = (),
    meaning: Meaning | None = None,
) -> Verdict:
    """How `question` relates to one (subject, predicate) pair (see the module)."""
    names = [content_words(n) for n in subject_names]
    names = [n for n in names if n]
    name_words = set().union(*names) if names else set()
    asked = question.words - TIME_STEMS

    if subject_id in question.named or any(n <= question.words for n in names):
        subject = NAMED
    elif question.named:
        subject = OTHER_NAMED
    else:
        match = _predicate(
            question,
            asked - name_words,
            predicate_name,
            predicate_description,
            predicate_aliases,
        )
        leftover = asked - name_words - match.explains - WHOLE_STEMS
        if leftover:
            said = tuple(sorted(question.said.get(w, w) for w in leftover))
            return Verdict(UNNAMED, match.verdict, said, via=match.via)
        subject = PARTIAL if name_words & question.words else IMPLIED
    # What the question asks beyond naming the subject.
    beyond = asked - name_words if subject in (NAMED, PARTIAL) else asked
    match = _predicate(question, beyond, predicate_name, predicate_description, predicate_aliases)
    verdict = match.verdict
    if (
        verdict == NOT_ASKED
        and subject in (NAMED, PARTIAL)
        and not (beyond - WHOLE_STEMS)
        and not _asks_a_family(question)  # "How is X doing?" asks for a status
    ):
        verdict = WHOLE_SUBJECT  # asking about a subject as a whole needs the subject named
    if verdict == NOT_ASKED and meaning is not None and meaning.accepted and subject == NAMED:
        # Only a named subject: a paraphrase about a subject guessed from a
        # part of its name, or none, would be two guesses in a row.
        verdict = MEANING
    return Verdict(subject, verdict, via=match.via, meaning=meaning)


def _predicate(
    question: Question,
    asked: frozenset[str] | set[str],
    name: str,
    description: str,
    aliases: Sequence[str],
) -> _Match:
    predicate_words = content_words(humanize(name))
    if predicate_words & asked:
        return _Match(STATED, frozenset(predicate_words & question.words))
    # A closed compound said as two words: "kick off" asks for a `kickoff`.
    for first, second in zip(question.tokens, question.tokens[1:], strict=False):
        if stem(first + second) in predicate_words:
            said = frozenset(stem(w) for w in (first, second) if w not in STOPWORDS)
            return _Match(STATED, said, via=f"{first} {second}")
    if alias := _alias(question, aliases):
        return alias
    described = content_words(description) - predicate_words
    if hit := described & asked:
        return _Match(DESCRIBED, frozenset(hit))
    if phrased := _phrased(question, name):
        return phrased
    if synonym := _synonym(question, asked, [humanize(name), *aliases]):
        return synonym
    return _Match(NOT_ASKED)


def _alias(question: Question, aliases: Sequence[str]) -> _Match | None:
    """Every word of one of the predicate's declared aliases is in the question."""
    for alias in aliases:
        alias_words = content_words(alias)
        if alias_words and alias_words <= question.words:
            return _Match(ALIAS, frozenset(alias_words), via=alias)
    return None


def _phrased(question: Question, name: str) -> _Match | None:
    """The question says a phrase the predicate's family is asked with (FAMILY_PHRASES)."""
    for word in words(humanize(name)):
        for phrase in FAMILY_PHRASES.get(word, ()):
            if _says(question.tokens, phrase):
                return _Match(PHRASED, frozenset(content_words(phrase)), via=f"{phrase} ~ {word}")
    return None


def declared_for(question: Question, name: str, aliases: Sequence[str] = ()) -> bool:
    """Does the question use words declared for this predicate: one of its
    aliases, or a phrase its family is asked with?"""
    return _alias(question, aliases) is not None or _phrased(question, name) is not None


def _synonym(question: Question, asked, phrases: Sequence[str]) -> _Match | None:
    """A question word and a predicate word that share a frequent WordNet sense,
    or derive one from the other (lexicon.synonyms)."""
    from . import lexicon

    targets: dict[str, str] = {}
    for phrase in phrases:
        for word in words(phrase):
            if word not in STOPWORDS:
                for form in lexicon.forms(word):
                    targets.setdefault(form, word)
    for stemmed in sorted(asked):
        said = question.said.get(stemmed, stemmed)
        shared = lexicon.synonyms(said) & targets.keys()
        if shared:
            target = targets[min(shared)]
            return _Match(SYNONYM, frozenset({stemmed}), via=f"{said} ~ {target}")
    return None
