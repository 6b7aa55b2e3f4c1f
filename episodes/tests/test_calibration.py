"""Calibrating the abstention threshold: the choice itself (exact), the data file's
checks, and the command with the real model (slow)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError, call_command

from episodes import retrieval
from episodes.models import AbstentionCalibration, Episode
from episodes.retrieval.calibration import (
    MAX_FALSE_ANSWER_RATE,
    Choice,
    Scored,
    choose_threshold,
    load_dataset,
)
from episodes.tests.retrieval_fixtures import record, topic
from ledger.models import Event
from piper.embeddings import get_embedder
from piper.errors import InvalidInput
from piper.tenancy.models import Agent


def scored(answerable: list, unanswerable: list) -> list[Scored]:
    return [Scored(f"a{i}", "key", v, 1) for i, v in enumerate(answerable)] + [
        Scored(f"u{i}", None, v, None) for i, v in enumerate(unanswerable)
    ]


def test_a_clean_split_is_cut_in_the_middle_of_the_gap():
    choice = choose_threshold(scored([0.6, 0.7, 0.8], [0.2, 0.3, 0.4]))
    assert choice == Choice(0.5, 1.0, 1.0)
    assert choice.balanced_accuracy == 1.0


def test_an_overlap_is_cut_above_the_unanswerable_ones_it_may_not_answer():
    # With 4 unanswerable queries one answered is 25%, over the limit: all refused.
    choice = choose_threshold(scored([0.4, 0.5, 0.7, 0.8], [0.1, 0.2, 0.3, 0.35]))
    assert choice.threshold == pytest.approx(0.375)
    choice = choose_threshold(scored([0.3, 0.5, 0.7, 0.8], [0.1, 0.2, 0.4, 0.45]))
    assert choice.threshold == pytest.approx(0.475)
    assert (choice.answerable_accuracy, choice.unanswerable_accuracy) == (0.75, 1.0)


def test_the_lowest_cut_within_the_false_answer_limit_keeps_the_most():
    # 3 of 20 unanswerable above every answerable one: 15% answered is allowed.
    unanswerable = [0.1] * 17 + [0.55, 0.56, 0.57]
    choice = choose_threshold(scored([0.5, 0.6], unanswerable))
    assert choice.threshold == pytest.approx(0.3)
    assert (choice.answerable_accuracy, choice.unanswerable_accuracy) == (1.0, 0.85)
    # A fourth is over the limit: the cut moves above it, losing 0.5.
    choice = choose_threshold(scored([0.5, 0.6], [0.1] * 16 + [0.54, 0.55, 0.56, 0.57]))
    assert choice.threshold == pytest.approx(0.545)
    assert (choice.answerable_accuracy, choice.unanswerable_accuracy) == (0.5, 0.85)
    # The limit is a parameter: none at all.
    choice = choose_threshold(scored([0.5, 0.6], unanswerable), max_false_rate=0.0)
    assert choice.threshold == pytest.approx(0.585)
    assert (choice.answerable_accuracy, choice.unanswerable_accuracy) == (0.5, 1.0)


def test_false_answers_count_more_than_balanced_accuracy_would():
    # Keeping everything is right for 2 of 11 queries; cutting at 0.475 refuses all
    # 9 unanswerable ones and still loses one of the two answerable ones.
    choice = choose_threshold(scored([0.9, 0.02], [0.05] * 9))
    assert choice.threshold == pytest.approx(0.475)
    assert (choice.answerable_accuracy, choice.unanswerable_accuracy) == (0.5, 1.0)


def test_a_query_without_any_candidate_counts_as_refused():
    choice = choose_threshold(scored([0.6, None], [None, 0.2]))
    assert choice.threshold == pytest.approx(0.4)
    assert (choice.answerable_accuracy, choice.unanswerable_accuracy) == (0.5, 1.0)


def test_both_kinds_are_needed():
    with pytest.raises(InvalidInput, match="both answerable and unanswerable"):
        choose_threshold(scored([0.5], []))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "cannot read"),
        (json.dumps({"episodes": []}), "needs non-empty 'episodes' and 'queries' lists"),
        (
            json.dumps({"episodes": [{"key": "a"}], "queries": [{"query": "q", "answer": "a"}]}),
            "episodes[0] needs a key and a summary",
        ),
        (
            json.dumps(
                {
                    "episodes": [{"key": "a", "summary": "s"}, {"key": "a", "summary": "t"}],
                    "queries": [{"query": "q", "answer": "a"}],
                }
            ),
            "episodes[1]: key 'a' is used twice",
        ),
        (
            json.dumps(
                {
                    "episodes": [{"key": "a", "summary": "s"}],
                    "queries": [{"query": "q", "answer": "b"}],
                }
            ),
            "queries[0]: no episode has key 'b'",
        ),
        (
            json.dumps(
                {
                    "episodes": [{"key": "a", "summary": "s"}],
                    "queries": [{"query": "q", "answer": "a"}],
                }
            ),
            "needs both answerable and unanswerable queries",
        ),
    ],
)
def test_a_bad_data_file_is_refused(tmp_path, content, message):
    path = tmp_path / "set.json"
    path.write_text(content)
    with pytest.raises(InvalidInput) as error:
        load_dataset(path)
    assert message in error.value.message


def test_the_shipped_set_loads():
    data = load_dataset(retrieval_set())
    assert data["name"] == "piper-abstention-v1"
    assert len(data["episodes"]) == 40
    assert sum(q["answer"] is not None for q in data["queries"]) == 41
    assert sum(q["answer"] is None for q in data["queries"]) == 40


def retrieval_set():
    from episodes.retrieval.calibration import DEFAULT_DATA

    return DEFAULT_DATA


@pytest.mark.django_db
def test_the_command_refuses_a_missing_file(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("calibrate_abstention", data=str(tmp_path / "nope.json"))
    assert AbstentionCalibration.objects.count() == 0


@pytest.mark.slow
@pytest.mark.django_db
def test_the_command_records_a_calibration_that_retrieval_then_applies(agent_a, capsys):
    agents, events, episodes = Agent.objects.count(), Event.objects.count(), Episode.objects.count()
    call_command("calibrate_abstention", "--dry-run")
    assert AbstentionCalibration.objects.count() == 0
    call_command("calibrate_abstention")
    out = capsys.readouterr().out
    calibration = AbstentionCalibration.objects.get()
    assert calibration.embedding_model == get_embedder().name
    assert calibration.metric == retrieval.EVIDENCE_METRIC
    assert calibration.dataset == "piper-abstention-v1 (calibration_set.json)"
    assert calibration.sample_size == 81
    assert calibration.details["answerable"] == 41
    assert calibration.details["unanswerable"] == 40
    assert len(calibration.details["scores"]) == 81
    balanced = (calibration.answerable_accuracy + calibration.unanswerable_accuracy) / 2
    assert balanced == pytest.approx(calibration.details["balanced_accuracy"], abs=1e-4)
    # At most MAX_FALSE_ANSWER_RATE of the never-happened questions answered; on this
    # deliberately hard set (see docs/episodes.md) that keeps a minority of the paraphrases.
    assert calibration.unanswerable_accuracy >= 1 - MAX_FALSE_ANSWER_RATE
    assert calibration.answerable_accuracy > 0.2
    assert calibration.details["answer_in_hits"] == 41
    assert f"Recorded {calibration.embedding_model}" in out
    # The throwaway agent and its episodes were rolled back.
    assert (Agent.objects.count(), Event.objects.count(), Episode.objects.count()) == (
        agents,
        events,
        episodes,
    )
    record(agent_a, summary="out of memory", embedding=topic(1))
    result = retrieval.episode_search(agent=agent_a, query="memory", query_embedding=topic(1))
    assert (result.threshold, result.threshold_source) == (
        calibration.threshold,
        str(calibration.pk),
    )
