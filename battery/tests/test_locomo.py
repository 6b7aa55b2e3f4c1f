"""battery.locomo: evidence ids, recall@k, the turn → episode mapping, and the command."""

import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from battery.locomo import (
    Answered,
    conversations_load,
    normalise_evidence,
    parse_session_date,
    recall_at,
    summarise,
    turn_draft,
)
from battery.models import BatteryRun, ItemResult
from episodes.models import Episode
from piper.errors import InvalidInput
from piper.tenancy.models import Agent

REAL_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"

# ------------------------------------------------------------------ evidence ids

KNOWN = ["D1:1", "D1:2", "D4:4", "D4:6", "D8:6", "D9:1", "D9:17", "D11:26", "D30:5"]


@pytest.mark.parametrize(
    ("raw", "ids", "dropped"),
    [
        (["D8:6; D9:17"], ["D8:6", "D9:17"], []),  # two ids in one string
        (["D9:1 D4:4 D4:6"], ["D9:1", "D4:4", "D4:6"], []),  # three, space-separated
        (["D:11:26"], ["D11:26"], []),  # a stray colon
        (["D30:05"], ["D30:5"], []),  # a leading zero
        (["D"], [], ["D"]),  # no id at all
        (["D1:1", "D10:19"], ["D1:1"], ["D10:19"]),  # no such turn in the conversation
        (["D1:2", "D1:02", "D1:2"], ["D1:2"], []),  # repeats, once
        ([], [], []),
    ],
)
def test_normalise_evidence(raw, ids, dropped):
    assert normalise_evidence(raw, known=KNOWN) == (ids, dropped)


def test_parse_session_date():
    assert parse_session_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert parse_session_date("12:09 am on 13 September, 2023") == datetime(
        2023, 9, 13, 0, 9, tzinfo=UTC
    )
    assert parse_session_date("12:30 pm on 1 January, 2024") == datetime(
        2024, 1, 1, 12, 30, tzinfo=UTC
    )
    with pytest.raises(ValueError, match="unreadable"):
        parse_session_date("yesterday")
    with pytest.raises(ValueError, match="month"):
        parse_session_date("1:56 pm on 8 Maytember, 2023")


@pytest.mark.skipif(not REAL_DATA.exists(), reason="LoCoMo data not present")
def test_real_data_loads_with_the_documented_counts():
    convs = conversations_load(REAL_DATA)
    assert len(convs) == 10
    assert sum(len(c.turns) for c in convs) == 5882
    assert sum(len(c.questions) for c in convs) == 1982
    assert sum(c.skipped_questions for c in convs) == 4
    assert sorted(d for c in convs for d in c.dropped_ids) == ["D", "D10:19", "D4:36"]


# ------------------------------------------------------------------ recall@k


def test_recall_at_k():
    ranked = ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2", "D2:3"]
    assert recall_at(ranked, ["D1:2"], 1) == 0.0
    assert recall_at(ranked, ["D1:2"], 2) == 1.0
    assert recall_at(ranked, ["D1:1", "D2:3"], 5) == 0.5
    assert recall_at(ranked, ["D1:1", "D2:3"], 6) == 1.0
    assert recall_at(ranked, ["D1:1", "D1:1"], 1) == 1.0  # an id counts once
    assert recall_at(ranked, ["D9:9"], 10) == 0.0
    assert recall_at(ranked, [], 10) == 0.0


def test_summarise_means_per_category_and_overall():
    ranked = [f"D1:{i}" for i in range(1, 11)]  # ten turns, best first
    answered = [
        # category 1: evidence at 3 and 7 -> R@5 1/2, R@10 1
        Answered(1, ranked, ("D1:3", "D1:7"), latency_ms=10.0, would_abstain=False),
        # category 1: evidence not found -> 0, 0
        Answered(1, ranked, ("D2:1",), latency_ms=20.0, would_abstain=True),
        # category 4: evidence first -> 1, 1
        Answered(4, ranked, ("D1:1",), latency_ms=30.0, would_abstain=False),
        # category 4: at 6 of 2 ids, one missing -> 0, 1/2
        Answered(4, ranked, ("D1:6", "D3:3"), latency_ms=40.0, would_abstain=False),
    ]
    s = summarise(answered, conversations=1, turns=10, skipped_questions=2, dropped_ids=3)
    assert s.rows == {
        "1-multi-hop": {"questions": 2, "r5": 0.25, "r10": 0.5},
        "4-single-hop": {"questions": 2, "r5": 0.5, "r10": 0.75},
        "overall": {"questions": 4, "r5": 0.375, "r10": 0.625},
    }
    assert (s.latency_p50_ms, s.latency_p95_ms, s.would_abstain) == (20.0, 40.0, 0.25)
    assert (s.questions, s.skipped_questions, s.dropped_ids) == (4, 2, 3)


# ------------------------------------------------------------------ a tiny conversation


def _turns(session: int, pairs):
    return [
        {"speaker": speaker, "dia_id": f"D{session}:{i}", "text": text, **extra}
        for i, (speaker, text, extra) in enumerate(pairs, start=1)
    ]


TINY = [
    {
        "sample_id": "tiny-1",
        "conversation": {
            "speaker_a": "Avery",
            "speaker_b": "Blake",
            "session_1_date_time": "1:00 pm on 3 March, 2024",
            "session_1": _turns(
                1,
                [
                    ("Avery", "I adopted a greyhound called Pickle last weekend.", {}),
                    ("Blake", "Congratulations Avery! How is she settling in?", {}),
                    ("Avery", "She sleeps all day on the sofa and snores.", {}),
                    ("Blake", "My sister runs a bakery downtown, the croissants are famous.", {}),
                    ("Avery", "I should visit. Is it open on Sundays?", {}),
                    ("Blake", "Only until noon on Sundays.", {}),
                    ("Avery", "I am also repainting my kitchen a deep olive green.", {}),
                ],
            ),
            "session_2_date_time": "9:30 am on 10 April, 2024",
            "session_2": _turns(
                2,
                [
                    ("Blake", "I joined a community orchestra to play the cello.", {}),
                    ("Avery", "Wonderful! Which piece are you rehearsing?", {}),
                    (
                        "Blake",
                        "Look at this.",
                        {"blip_caption": "a photo of sheet music for a Bach cello suite"},
                    ),
                    ("Avery", "My flight to Lisbon for the marathon leaves on Friday.", {}),
                    ("Blake", "Good luck with the race in Lisbon!", {}),
                    ("Avery", "Thanks, I trained for months on the river path.", {}),
                    ("Blake", "My laptop battery died during the rehearsal.", {}),
                ],
            ),
        },
        "qa": [
            {"question": "What breed of dog did Avery adopt?", "evidence": ["D1:1"], "category": 4},
            {"question": "Where is Avery running a marathon?", "evidence": ["D2:4"], "category": 2},
            {
                "question": "Which instrument does Blake play in the orchestra?",
                "evidence": ["D:2:1"],  # malformed: read as D2:1
                "category": 1,
            },
            {
                "question": "What colour is Avery painting the kitchen?",
                "evidence": ["D1:07", "D9:9"],  # D1:7, and an id that does not exist
                "category": 4,
            },
            {"question": "Who is Blake's sister?", "evidence": ["D"], "category": 5},  # skipped
        ],
    }
]


@pytest.fixture
def tiny_file(tmp_path) -> Path:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return path


def test_conversations_load_normalises_and_skips(tiny_file):
    (conv,) = conversations_load(tiny_file)
    assert conv.speakers == ("Avery", "Blake")
    assert [t.dia_id for t in conv.turns][:2] == ["D1:1", "D1:2"]
    assert len(conv.turns) == 14
    assert [q.evidence for q in conv.questions] == [("D1:1",), ("D2:4",), ("D2:1",), ("D1:7",)]
    assert (conv.skipped_questions, conv.dropped_ids) == (1, ("D9:9", "D"))


def test_conversations_load_refuses_what_is_not_locomo(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"sample_id": "x"}]))
    with pytest.raises(InvalidInput, match="record 0 is not a LoCoMo conversation"):
        conversations_load(bad)
    with pytest.raises(InvalidInput, match="cannot be read as JSON"):
        conversations_load(tmp_path / "missing.json")


def test_turn_draft(tiny_file):
    (conv,) = conversations_load(tiny_file)
    first, second, photo = conv.turns[0], conv.turns[1], conv.turns[9]
    d = turn_draft(conversation=conv, turn=second)
    assert (d.occurred_at, d.summary, d.observation, d.actor, d.session_id) == (
        datetime(2024, 3, 3, 13, 0, 1, tzinfo=UTC),  # the session's date + its turn's second
        "Congratulations Avery! How is she settling in?",
        "",
        "Blake",
        "session_1",
    )
    assert d.entities == ("Blake", "Avery")  # the speaker, and the other speaker named
    assert d.source_ref == "locomo:tiny-1:D1:2"
    assert turn_draft(conversation=conv, turn=first).entities == ("Avery",)
    p = turn_draft(conversation=conv, turn=photo)
    assert (p.summary, p.observation, p.occurred_at - datetime(2024, 4, 10, 9, 30, tzinfo=UTC)) == (
        "Look at this.",
        "[shares a photo of sheet music for a Bach cello suite]",
        timedelta(seconds=2),
    )


def locomo(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", "locomo", *args, stdout=out, no_color=True)
    return out.getvalue()


@pytest.mark.slow  # loads the embedding model
def test_command_on_a_tiny_conversation_stores_the_run(db, tiny_file):
    output = locomo("--data", str(tiny_file))

    run = BatteryRun.objects.get()
    assert (run.status, run.suites, run.target, run.score) == (
        "passed",
        ["LCM"],
        "in-process",
        100.0,
    )
    items = {i.item: i for i in ItemResult.objects.filter(run=run)}
    assert sorted(items) == ["1-multi-hop", "2-temporal", "4-single-hop", "overall"]
    assert items["overall"].metrics == {"questions": 4, "r5": 1.0, "r10": 1.0}
    assert items["4-single-hop"].metrics["questions"] == 2
    assert all(i.passed and i.failure_code == "" for i in items.values())
    assert run.metrics["locomo_recall_at_10"] == 1.0
    assert run.metrics["locomo_turns"] == 14
    assert run.metrics["locomo_skipped_questions"] == 1
    assert run.metrics["locomo_dropped_evidence_ids"] == 2
    assert run.gates == [
        {
            "name": "LCM locomo_recall_at_10 >= 0.72",
            "kind": "metric",
            "passed": True,
            "detail": "locomo_recall_at_10 1",
            "fail_closed": False,
        }
    ]
    # An external evaluation, stored as a run: it is not short of the battery's suites.
    assert (run.score_of_run, run.missing_suites) == (100.0, {})
    # one throwaway agent, its turns stored and embedded, deactivated afterwards
    agent = Agent.objects.get(name__startswith=f"locomo-{run.pk.hex[:12]}-")
    assert agent.is_throwaway and not agent.is_active
    episodes = Episode.objects.filter(agent=agent)
    assert episodes.count() == 14
    assert episodes.filter(embedding__isnull=True).count() == 0
    assert re.search(r"^overall +4 +1\.000 +1\.000$", output, re.MULTILINE)
    assert "overall R@10 1.000 pass (target 0.72)" in output


@pytest.mark.slow
@pytest.mark.skipif(not REAL_DATA.exists(), reason="LoCoMo data not present")
def test_command_smoke_on_one_real_conversation(db):
    output = locomo("--data", str(REAL_DATA), "--conversations", "1", "--limit-questions", "6")
    run = BatteryRun.objects.get()
    assert run.status in ("passed", "failed")
    assert run.metrics["locomo_questions"] == 6
    assert run.metrics["locomo_turns"] == 419
    assert ItemResult.objects.filter(run=run, item="overall").get().metrics["questions"] == 6
    assert "conv-26: 419 turns recorded and embedded" in output


def test_command_refuses_bad_arguments(db, tiny_file, tmp_path):
    with pytest.raises(CommandError, match="--conversations: a positive integer"):
        locomo("--data", str(tiny_file), "--conversations", "0")
    with pytest.raises(CommandError, match="cannot be read as JSON"):
        locomo("--data", str(tmp_path / "nope.json"))
    assert BatteryRun.objects.count() == 0
