"""Suite C6's vocabulary (battery/suites/semantic/asked.py) is not the code's:
no distinctive word of it, in any form the code compares, is in a list recall
decides with. Otherwise C6 would measure what the service was told."""

from __future__ import annotations

import re

import pytest

from battery.suites.semantic import asked
from recall import about, lexicon, router


def code_words() -> set[str]:
    """Every word of the lists recall decides with: the curated family
    phrases, the question cues, the router's rules and prototypes, and the
    WordNet synsets that anchor the kinds of value."""
    texts = [
        " ".join(f"{k} {' '.join(v)}" for k, v in about.FAMILY_PHRASES.items()),
        " ".join(p.pattern for p, _ in about.KIND_CUES),
        " ".join(rule.pattern.pattern for rule in router.RULES),
        " ".join(q for qs in router.PROTOTYPES.values() for q in qs),
        " ".join(
            name.split(".")[0].replace("_", " ")
            for names in lexicon.KIND_ANCHORS.values()
            for name in names
        ),
    ]
    return set(re.findall(r"[a-z]+", " ".join(texts).lower()))


def clashes(words: set[str]) -> set[str]:
    """The words that are, or stem like, a word of the code's lists."""
    listed = code_words()
    stems = {about.stem(w) for w in listed}
    return {w for w in words if w in listed or about.stem(w) in stems}


@pytest.mark.parametrize("split", [asked.SEEN, asked.HELD_OUT])
def test_the_vocabulary_is_in_no_list_the_code_uses(split):
    distinctive = asked.vocabulary_words(split) - about.STOPWORDS - about.TIME_WORDS
    assert clashes(distinctive) == set()


def test_the_check_sees_the_code_words_it_must_keep_out():
    # Words the lists do hold, each in another form: the check would catch them.
    assert clashes({"version", "owners", "deployed", "booked", "location"}) == {
        "version",
        "owners",
        "deployed",
        "booked",
        "location",
    }
    assert {"room", "caterer", "chauffeur", "gala"} <= asked.vocabulary_words(
        asked.SEEN
    ) | asked.vocabulary_words(asked.HELD_OUT)
