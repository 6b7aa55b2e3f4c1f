"""Suite G2's held-out vocabulary (battery/suites/metamemory/phrasing.py) is
not the router's: no distinctive word of it, in any form the code compares,
is in the router's rules or prototype questions, and no strong rule fires on
its questions. Otherwise route_accuracy_held_out would measure what the
router was told, as G2's first templates do."""

from __future__ import annotations

import random
import re

from battery.suites.metamemory import draw, phrasing
from recall import about, router


def router_words() -> set[str]:
    """Every word of the router's rules (patterns) and prototype questions."""
    texts = [
        " ".join(rule.pattern.pattern for rule in router.RULES),
        " ".join(q for qs in router.PROTOTYPES.values() for q in qs),
    ]
    return set(re.findall(r"[a-z]+", " ".join(texts).lower()))


def clashes(words: set[str]) -> set[str]:
    """The distinctive words that are, or stem like, a word of the router's."""
    listed = router_words()
    stems = {about.stem(w) for w in listed}
    distinctive = words - about.STOPWORDS
    return {w for w in distinctive if listed & {w, about.stem(w)} or about.stem(w) in stems}


def held_out_questions() -> list[str]:
    """The held-out questions of a few whole draws, slots filled."""
    return [
        spec.data["question"]["text"]
        for seed in range(5)
        for spec in draw.generate(random.Random(seed))
        if spec.metrics["kind"] == "G2" and spec.metrics["split"] == phrasing.HELD_OUT
    ]


def test_the_held_out_vocabulary_is_in_no_list_the_router_uses():
    assert clashes(phrasing.vocabulary_words(phrasing.HELD_OUT)) == set()


def test_the_held_out_questions_drawn_use_no_word_of_the_router():
    questions = held_out_questions()
    assert len(questions) == 5 * 30
    # Names (systems' codenames, people) are the item's, not the phrasing's.
    names = {c.lower() for c in phrasing.CODENAMES} | {
        w for name in (*draw.FIRST_NAMES, *draw.LAST_NAMES) for w in phrasing.words(name)
    }
    found = set().union(*(phrasing.words(q) for q in questions)) - names
    assert clashes(found) == set()


def test_no_strong_rule_fires_on_a_held_out_question():
    fired = {
        (question, rule.name)
        for question in held_out_questions()
        for rule in router.RULES
        if rule.weight == router.STRONG and rule.pattern.search(router.normalise(question))
    }
    assert fired == set()


def test_the_check_sees_the_router_words_it_must_keep_out():
    # Words the router holds, some in another form: the check would catch them.
    caught = {"according", "supposed", "happened", "walking", "documents", "incidents"}
    assert clashes(caught | {"paymaster", "outfit", "custody", "chores", "what"}) == caught
