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


def test_a_rule_skipped_for_lack_of_its_word_is_still_read_in_any_case():
    # The rules' cheap pre-checks (_NEEDS) must not lose what the patterns read.
    assert found("The vendor audit IS DUE on March 3.") == [("vendor audit", "due_date", "March 3")]
    assert found("the Deadline for the Kestrel launch is now May 9.") == [
        ("Kestrel launch", "due_date", "May 9")
    ]
    assert found("Priya's badge colour is teal.") == [("Priya", "badge_colour", "teal")]


def test_abbreviations_do_not_end_a_sentence():
    assert sentences("Ask Dr. Okafor first. Mr. Lund signs after. Then e.g. Ms. Ito.") == [
        "Ask Dr. Okafor first.",
        "Mr. Lund signs after.",
        "Then e.g. Ms. Ito.",
    ]
    # A title belongs to the name it opens.
    assert found("Dr. Okafor's desk phone is 4411.") == [("Dr. Okafor", "desk_phone", "4411")]
    assert found("Mr. Lund reports to Dr. Ito.") == [("Mr. Lund", "reports_to", "Dr. Ito")]
