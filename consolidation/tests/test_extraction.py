"""The pattern extractor on single texts: what it reads, and what it must not."""

from consolidation.extraction import PatternExtractor, sentences


def found(text: str) -> list[tuple[str, str, str]]:
    return [(s.subject, s.predicate, s.value) for s in PatternExtractor().extract(text)]


def test_a_sentence_may_open_with_an_identifier_in_lower_case():
    text = "Cleared the queue before lunch. billing-api's retry budget is 7 attempts. Done."
    assert sentences(text) == [
        "Cleared the queue before lunch.",
        "billing-api's retry budget is 7 attempts.",
        "Done.",
    ]
    assert found(text) == [("billing-api", "retry_budget", "7 attempts")]


def test_a_lower_case_word_after_a_full_stop_does_not_start_a_sentence():
    # "e.g. three" and "approx. nine" continue the sentence they are in.
    assert sentences("Keep a few spares, approx. nine units. Then stop.") == [
        "Keep a few spares, approx. nine units.",
        "Then stop.",
    ]


def test_what_states_no_present_fact_is_not_read():
    for text in (
        "Is billing-api's retry budget still 7 attempts?",
        "billing-api's retry budget is not 7 attempts any more.",
        "billing-api might switch the retry budget to 7 attempts.",
        "According to the vendor, billing-api's retry budget is 7 attempts.",
    ):
        assert found(text) == [], text
