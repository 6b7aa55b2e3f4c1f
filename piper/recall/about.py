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

Predicate — one of:
* `stated`: a word of its name is in the question (light stemming: owns /
  owning, replicas / replica, deploy / deployment).
* `described`: a word of its description is (describe a predicate to widen
  the words it is known by).
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
STATED, DESCRIBED, WHOLE_SUBJECT, NOT_ASKED = "stated", "described", "whole_subject", "not_asked"
SUBJECT_ACCEPTED = (NAMED, PARTIAL, IMPLIED)
PREDICATE_ACCEPTED = (STATED, DESCRIBED, WHOLE_SUBJECT)
# Best first, for ordering what is accepted.
SUBJECT_ORDER = {NAMED: 0, PARTIAL: 1, IMPLIED: 2}
PREDICATE_ORDER = {STATED: 0, DESCRIBED: 1, WHOLE_SUBJECT: 2}


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


@dataclass(frozen=True)
class Question:
    """A question's content words (stems), and the known things it names (entity ids)."""

    words: frozenset[str]
    named: frozenset[uuid.UUID]
    said: dict[str, str]  # stem -> the word as the question has it

    @classmethod
    def of(cls, text: str, named: Iterable[uuid.UUID]) -> Question:
        said = {stem(w): w for w in words(text) if w not in STOPWORDS}
        return cls(frozenset(said), frozenset(named), said)


@dataclass(frozen=True)
class Verdict:
    subject: str
    predicate: str
    unexplained: tuple[str, ...] = ()  # the question's words nothing in the pair explains

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
        return out


def judge(
    question: Question,
    *,
    subject_id: uuid.UUID,
    subject_names: Sequence[str],
    predicate_name: str,
    predicate_description: str = "",
) -> Verdict:
    """How `question` relates to one (subject, predicate) pair (see the module)."""
    names = [content_words(n) for n in subject_names]
    names = [n for n in names if n]
    name_words = set().union(*names) if names else set()
    predicate_words = content_words(humanize(predicate_name))
    described = content_words(predicate_description) - predicate_words
    asked = question.words - TIME_STEMS

    if subject_id in question.named or any(n <= question.words for n in names):
        subject = NAMED
    elif question.named:
        subject = OTHER_NAMED
    else:
        leftover = asked - name_words - predicate_words - described - WHOLE_STEMS
        if leftover:
            predicate = _predicate(asked, predicate_words, described, whole=None)
            said = tuple(sorted(question.said.get(w, w) for w in leftover))
            return Verdict(UNNAMED, predicate, said)
        subject = PARTIAL if name_words & question.words else IMPLIED
    # Asking about a subject as a whole needs the subject in the question.
    whole = asked - name_words if subject in (NAMED, PARTIAL) else None
    return Verdict(subject, _predicate(asked, predicate_words, described, whole=whole))


def _predicate(
    asked: frozenset[str], predicate_words: set[str], described: set[str], *, whole: set | None
) -> str:
    if predicate_words & asked:
        return STATED
    if described & asked:
        return DESCRIBED
    if whole is not None and not (whole - WHOLE_STEMS):
        return WHOLE_SUBJECT
    return NOT_ASKED
