"""Suite B: the draw is deterministic and covers what it claims (the
paraphrased and never-happened questions share no word with what they must
or must not find, as PostgreSQL's full text sees words), the grading is
exact, the gates sit where the issue puts them, and every kind of item,
pointed at a service with one fault, fails with the right code. B5's
near-domain questions are built from what the run writes and are about
nothing it wrote, and its held-out words are none of the service's."""

from __future__ import annotations

import dataclasses
import io
import json
import random
import re
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils.dateparse import parse_datetime

from battery.judging import Tally, miss
from battery.models import BatteryRun
from battery.registry import ItemFailure, ItemOutcome, designed_suites, suites_select
from battery.scoring import score_run, suite_result
from battery.suites import episodic
from battery.suites.episodic import draw, near
from battery.suites.episodic.api import Answer, Hit, answer_of
from battery.suites.episodic.draw import PHASE_TIMES, T0, episode_lexemes, lexemes
from battery.suites.episodic.judge import (
    judge_abstain,
    judge_disambiguation,
    judge_event,
    judge_near,
    judge_synthesis,
    summarize,
)
from battery.taxonomy import FailureCode as F
from battery.tests.helpers import Faulty, run_suite_small
from battery.transport import ApiResponse, InProcessTransport
from piper.celery import app as celery_app

KINDS = ("b1", "b2", "b3", "b4", "b5")
NONE = dict.fromkeys(KINDS, 0)
TEXT_FIELDS = ("summary", "action", "observation")


def specs_for(seed: int, **counts: int):
    suite = suites_select(codes=["B"])[0]
    if counts:
        rng = random.Random(f"{seed}:B:episodic:generate")
        return draw.generate(rng, {**NONE, **counts})
    return suite.specs(suite.generators[0], seed=seed)


def own(spec) -> list[dict]:
    """The item's own episodes (not the routine ones it carries)."""
    return [e for e in spec.data["episodes"] if not e.get("routine")]


def of_kind(specs, kind: str) -> list:
    return [s for s in specs if s.metrics["kind"] == kind]


# ----------------------------------------------------------------------------- the draw


def test_suite_B_is_registered_with_its_design_weight_and_gates():
    suite = suites_select(codes=["B"])[0]
    # The pass rate is a floor below B5's false memories (judge.PASS_RATE_GATE);
    # every other family has a gate of its own, B5 is measured only.
    assert (suite.name, suite.weight, suite.gate) == ("Episodic memory", 15, 0.80)
    assert [gate.name for gate in suite.metric_gates] == [
        "event_recall >= 0.95",
        "disambiguation_accuracy >= 0.95",
        "synthesis_accuracy >= 0.95",
        "false_memory_rate <= 0.02",
    ]
    assert (suite.items, [g.key for g in suite.generators]) == ([], ["episodic"])
    assert suite.item_count(seed=0) == 146


def test_the_same_seed_draws_the_same_items_and_another_seed_others():
    first = specs_for(21)
    assert specs_for(21) == first
    other = specs_for(22)
    assert [s.key for s in other] == [s.key for s in first]
    assert [s.data for s in other] != [s.data for s in first]


@pytest.mark.parametrize("seed", [0, 21])
def test_a_run_draws_146_items_of_the_five_kinds_around_160_routine_episodes(seed):
    specs = specs_for(seed)
    assert Counter(s.metrics["kind"] for s in specs) == {
        "B1": 40,
        "B2": 20,
        "B3": 12,
        "B4": 50,
        "B5": 24,
    }
    assert [s.key for s in specs[:2]] == ["b1_0001", "b1_0002"]
    assert specs[-1].key == "b5_0024"
    episodes = [e for s in specs for e in s.data["episodes"]]
    refs = [e["ref"] for e in episodes]
    assert len(refs) == len(set(refs))
    assert sum(e.get("routine", False) for e in episodes) == 160
    assert sum(len(own(s)) for s in specs) == 40 * 2 + 20 * 5 + sum(
        len(own(s)) for s in of_kind(specs, "B3")
    )
    planned = Counter()
    for spec in specs:
        assert json.loads(json.dumps(spec.data)) == spec.data
        planned.update(spec.metrics["planned"])
        for episode in spec.data["episodes"]:
            # Written in the phase it happened in, never before.
            occurred = parse_datetime(episode["occurred_at"])
            assert occurred <= PHASE_TIMES[episode["phase"]]
            if episode["phase"]:
                assert occurred > PHASE_TIMES[episode["phase"] - 1]
    assert planned == {
        "event": 40,
        "handover": 40,
        "disambiguation": 20,
        "synthesis": 12,
        "abstain": 50,
        "near": 24,
    }
    routine_phases = Counter(e["phase"] for e in episodes if e.get("routine"))
    assert set(routine_phases) == {0, 1, 2}  # some routine work is newer than every event


def test_b1_asks_a_successor_after_24_or_72_hours_in_its_own_words_or_none_of_them():
    specs = of_kind(specs_for(3), "B1")
    assert Counter((s.metrics["form"], s.metrics["delay"]) for s in specs) == {
        ("paraphrase", "24h"): 10,
        ("keyword", "24h"): 10,
        ("paraphrase", "72h"): 10,
        ("keyword", "72h"): 10,
    }
    for spec in specs:
        event, resumed = own(spec)
        [question] = spec.data["questions"]
        assert question["expects"] == [event["ref"]]
        assert event["session_id"] == spec.data["session"] != spec.data["successor"]
        assert resumed["session_id"] == spec.data["successor"]
        asked = PHASE_TIMES[question["phase"]]
        assert (
            asked - T0
            == {"24h": timedelta(hours=24), "72h": timedelta(hours=72)}[spec.metrics["delay"]]
        )
        assert T0 - timedelta(hours=6) <= parse_datetime(event["occurred_at"]) < T0
        assert event["outcome"] in ("success", "failure", "partial") and event["actor"]
        shared = lexemes(question["text"]) & episode_lexemes(event)
        if spec.metrics["form"] == "paraphrase":
            assert shared == set()
        else:  # it names who did it and to what
            assert lexemes(event["actor"]) <= shared
            assert lexemes(event["entities"][0]) <= shared
    # Each incident and each system is told once.
    summaries = [own(s)[0]["summary"] for s in specs]
    assert len(set(summaries)) == 40


def test_b2_draws_five_episodes_that_differ_only_in_the_feature_the_question_names():
    specs = of_kind(specs_for(5), "B2")
    assert Counter(s.metrics["feature"] for s in specs) == {
        "region": 5,
        "person": 5,
        "customer": 5,
        "tool": 5,
    }
    positions = Counter()
    for spec in specs:
        episodes = own(spec)
        [question] = spec.data["questions"]
        assert len(episodes) == 5
        value = question["value"]
        target = next(e for e in episodes if e["ref"] == question["expects"][0])
        positions[episodes.index(target)] += 1
        values = [value, *question["lookalikes"].values()]
        assert len(set(values)) == 5
        assert value in question["text"]
        assert not any(other in question["text"] for other in question["lookalikes"].values())
        # Blank the feature out of each: all five are then the same episode.
        blanked = []
        for episode in episodes:
            feature = value if episode is target else question["lookalikes"][episode["ref"]]
            assert all(feature in episode[f] for f in ("summary", "action"))
            copy = {
                k: v.replace(feature, "<F>").replace(feature.lower(), "<f>")
                if isinstance(v, str)
                else v
                for k, v in episode.items()
                if k not in ("ref", "occurred_at", "session_id")
            }
            copy["entities"] = [e.replace(feature.lower(), "<f>") for e in episode["entities"]]
            blanked.append(copy)
        assert all(b == blanked[0] for b in blanked)
        days = {parse_datetime(e["occurred_at"]).date() for e in episodes}
        assert len(days) == 5  # done on five different days
    assert set(positions) == {0, 1, 2, 3, 4}  # the right one is not always where it was


def test_b3_spreads_a_matter_over_two_to_four_sessions_on_different_days():
    specs = of_kind(specs_for(6), "B3")
    assert len({s.data["questions"][0]["text"] for s in specs}) == 12
    for spec in specs:
        episodes = own(spec)
        [question] = spec.data["questions"]
        sessions = [e["session_id"] for e in episodes]
        assert 2 <= len(set(sessions)) == spec.metrics["sessions"] <= 4
        assert 2 <= len(episodes) <= 5
        assert question["expects"] == [e["ref"] for e in episodes]
        assert question["sessions"] == {e["ref"]: e["session_id"] for e in episodes}
        assert question["matter"] in question["text"]
        assert all(question["matter"] in e["summary"] for e in episodes)
        times = [parse_datetime(e["occurred_at"]) for e in episodes]
        assert times == sorted(times)
        by_session = {}
        for episode, moment in zip(episodes, times, strict=True):
            by_session.setdefault(episode["session_id"], set()).add(moment.date())
        assert all(len(d) == 1 for d in by_session.values())
        assert len({min(d) for d in by_session.values()}) == len(by_session)


def test_b4_asks_about_events_that_never_happened_in_words_nothing_in_the_run_uses():
    for seed in (0, 1, 2, 3):
        specs = specs_for(seed)
        vocabulary = set().union(*(episode_lexemes(e) for s in specs for e in s.data["episodes"]))
        questions = [s.data["questions"][0] for s in of_kind(specs, "B4")]
        assert len({q["text"] for q in questions}) == 50
        for question in questions:
            assert question["expects"] == [] and lexemes(question["text"]) & vocabulary == set()


def _words(episode: dict) -> str:
    return " ".join([*(episode[f] for f in TEXT_FIELDS), *episode["entities"]]).lower()


def _about(system: str, episode: dict) -> bool:
    return re.search(rf"(?<!\w){re.escape(system.lower())}(?!\w)", _words(episode)) is not None


# Which operation each of the run's templates tells of (draw.ACTIONS, draw.OPERATIONS).
ACTION_FAMILIES = (
    "restart",
    "rotate",
    "upgrade",
    "scale",
    "rollback",
    "load_test",
    "patch",
    "migrate",
)
OPERATION_FAMILIES = ("failover", "upgrade", "restore", "rotate", "capacity")


def test_the_operations_the_run_writes_are_recognised_by_their_own_pattern_and_no_other():
    """B5 keeps off what a system had done to it by these patterns: each must
    find its operation, and find it nowhere else in the run's templates."""
    slots = {"actor": "Ana Lima", "system": "geocoder", "env": "ci", "n": 7, "version": "2.0.1"}
    written = [
        (family, " ".join(t[f].format(**slots, feature="") for f in TEXT_FIELDS).lower())
        for family, t in [
            *zip(ACTION_FAMILIES, draw.ACTIONS, strict=True),
            *zip(OPERATION_FAMILIES, draw.OPERATIONS, strict=True),
        ]
    ]
    for family, text in written:
        assert near.done_families(text) == {family}, text
    routine = {t.format(actor="A", other="B", system="geocoder", n=1).lower() for t in draw.ROUTINE}
    assert {f for text in routine for f in near.done_families(text)} == {"upgrade", "patch"}
    assert near.done_families("nothing was done") == set()


@pytest.mark.parametrize("seed", [0, 3, 21])
def test_b5_asks_about_events_that_never_happened_in_the_runs_own_words(seed):
    specs = specs_for(seed)
    episodes = [e for s in specs for e in s.data["episodes"]]
    vocabulary = set().union(*(episode_lexemes(e) for e in episodes))
    items = of_kind(specs, "B5")
    assert Counter((s.metrics["split"], s.metrics["twist"]) for s in items) == {
        ("seen", "action"): 6,
        ("held_out", "action"): 6,
        ("seen", "incident"): 6,
        ("held_out", "incident"): 6,
    }
    assert all(own(s) == [] for s in items)
    refs = {e["ref"]: e for e in episodes}
    texts = set()
    for spec in items:
        [question] = spec.data["questions"]
        assert (question["q"], question["metric"], question["expects"]) == ("near", "near", [])
        assert question["split"] == spec.metrics["split"]
        texts.add(question["text"])
        system = question["system"]
        about = [e for e in episodes if _about(system, e)]
        assert about, f"the {system} is in no episode"
        # Near: it names a system of the run and borrows real episodes' words.
        assert system in question["text"]
        assert lexemes(system) <= vocabulary
        assert question["borrows"] and set(question["borrows"]) <= set(refs)
        shared = lexemes(question["text"]) & set().union(
            *(episode_lexemes(refs[r]) for r in question["borrows"])
        )
        assert shared
        if question["twist"] == "action":
            family = near.FAMILIES[question["family"]]
            # Nobody did that to this system, whoever did what else to it.
            assert all(question["family"] not in near.done_families(_words(e)) for e in about)
            actor = next(p for p in draw.PEOPLE if p in question["text"])
            assert question["text"].count(system) == 1
            event = family[question["split"]].format(actor=actor, system=system)
            assert event in question["text"]
            # the person who worked on it (the run's people all did)
            assert actor in {e["actor"] for e in about}
        else:
            [incident] = [
                refs[r]
                for r in question["borrows"]
                if refs[r]["entities"] and refs[r]["entities"][0] == question["incident"]
            ]
            assert not incident.get("routine") and incident["entities"][0] != system
            # moved onto a system its episode never mentions, by no word of it
            assert not lexemes(system) & episode_lexemes(incident)
            assert not _about(system, incident)
            told = near.INCIDENTS[question["incident"]]
            assert told["split"] == question["split"]
            assert told["event"].format(system=system) in question["text"]
    assert len(texts) == len(items)


def _distinctive(template: str) -> set[str]:
    """The content words of a template, its slots (the run's names) left out."""
    words = re.findall(r"[a-z0-9]+", re.sub(r"\{\w+\}", " ", template).lower())
    return {w for w in words if w not in draw.STOP_WORDS}


def _code_words() -> set[str]:
    root = Path(__file__).resolve().parents[2]
    words: set[str] = set()
    for name in near.CODE_FILES:
        words |= set(re.findall(r"[a-z0-9]+", (root / name).read_text().lower()))
    return words


def _used_by_code(words: set[str], code: set[str]) -> set[str]:
    """Words the code has, as they are or by the draw's crude stem (which finds
    more alike than there is)."""
    stems = {draw.stem(w) for w in code if w not in draw.STOP_WORDS}
    return {w for w in words if w in code or draw.stem(w) in stems}


def test_b5s_held_out_phrasings_and_events_use_no_word_of_the_services_rules_or_calibration():
    code = _code_words()
    held_out = [
        *near.TEMPLATES[near.HELD_OUT],
        *(family[near.HELD_OUT] for family in near.FAMILIES.values()),
        *(i["event"] for i in near.INCIDENTS.values() if i["split"] == near.HELD_OUT),
    ]
    assert len(held_out) == 3 + 11 + 5
    for template in held_out:
        assert _distinctive(template)
        assert _used_by_code(_distinctive(template), code) == set(), template
    # The check can fail: the seen ones are the service's own words.
    assert "happened" in _used_by_code(_distinctive(near.TEMPLATES[near.SEEN][0]), code)
    assert _used_by_code(_distinctive(near.INCIDENTS["api-gateway"]["event"]), code) >= {
        "certificate",
        "expired",
    }


def _pg_lexemes(texts: list[str]) -> list[set[str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tsvector_to_array(to_tsvector('english', t)) FROM unnest(%s::text[]) t",
            [texts],
        )
        return [set(row[0]) for row in cursor.fetchall()]


def _episode_text(episode: dict) -> str:
    return " ".join(
        [*(episode[f] for f in TEXT_FIELDS), episode["actor"], episode["environment"]]
        + list(episode["entities"])
    )


def test_postgresql_full_text_finds_no_word_in_common_where_the_draw_says_so(db):
    """The draw's own check is an approximation; this is what full text sees."""
    specs = specs_for(0)
    paraphrased = [s for s in of_kind(specs, "B1") if s.metrics["form"] == "paraphrase"]
    questions = _pg_lexemes([s.data["questions"][0]["text"] for s in paraphrased])
    events = _pg_lexemes([_episode_text(own(s)[0]) for s in paraphrased])
    assert all(q and not q & e for q, e in zip(questions, events, strict=True))
    world = set().union(*_pg_lexemes([_episode_text(e) for s in specs for e in s.data["episodes"]]))
    never = _pg_lexemes([s.data["questions"][0]["text"] for s in of_kind(specs, "B4")])
    assert all(q and not q & world for q in never)


@pytest.mark.slow
def test_the_paraphrases_and_the_never_happened_are_fair_for_the_services_embedder():
    """Meaning alone can carry a paraphrase to its episode, and keep a question
    about what never happened away from everything: with the service's own
    embedder and the text it embeds, every paraphrase is nearest its episode,
    and one similarity bar separates all of them from every B4 question."""
    from episodes.models import Episode
    from piper.embeddings import get_embedder

    embedder = get_embedder()
    for seed in (0, 7):
        specs = specs_for(seed)
        episodes = [e for s in specs for e in s.data["episodes"]]
        texts = [
            Episode(
                **{k: e[k] for k in ("summary", "action", "observation", "actor", "environment")}
            ).embedding_text()
            for e in episodes
        ]
        vectors = embedder.embed(texts)
        index = {e["ref"]: i for i, e in enumerate(episodes)}

        def similarities(question: str, vectors=vectors) -> list[float]:
            q = embedder.embed_one(question)
            return [sum(a * b for a, b in zip(q, v, strict=True)) for v in vectors]

        own_similarity = []
        for spec in of_kind(specs, "B1"):
            if spec.metrics["form"] != "paraphrase":
                continue
            question = spec.data["questions"][0]
            sims = similarities(question["text"])
            target = index[question["expects"][0]]
            assert max(range(len(sims)), key=sims.__getitem__) == target, question["text"]
            own_similarity.append(sims[target])
        never = [max(similarities(s.data["questions"][0]["text"])) for s in of_kind(specs, "B4")]
        assert min(own_similarity) > max(never)


# ----------------------------------------------------------------------------- grading


def response(status: int = 200, body=None) -> ApiResponse:
    text = "" if body is None else json.dumps(body)
    return ApiResponse(status=status, body=body, headers={}, text=text)


def episode_hit(ident: str, **fields) -> dict:
    obj = {
        "id": ident,
        "actor": "Ana Lima",
        "occurred_at": "2031-07-07T08:00:00Z",
        "action": "Restarted it",
        "outcome": "success",
        "summary": f"episode {ident}",
        "session_id": fields.pop("session_id", "s1"),
        **fields,
    }
    return {"kind": "episode", "id": ident, "text": obj["summary"], "score": 0.5, "episode": obj}


def answer(*hits: dict, abstained: bool = False, groups=None, status: int = 200) -> Answer:
    if status != 200:
        return answer_of(response(status))
    body = {"abstained": abstained, "evidence": list(hits), "groups": groups or []}
    return answer_of(response(status, body))


WRITTEN = {
    "actor": "Ana Lima",
    "occurred_at": "2031-07-07T08:00:00Z",
    "action": "Restarted it",
    "outcome": "success",
}
NOISE = [episode_hit(f"n{i}") for i in range(4)]


@pytest.mark.parametrize(
    ("answered", "verdict"),
    [
        (answer(episode_hit("t"), *NOISE), (True, "", "")),
        (
            answer(*NOISE[:2], episode_hit("t", occurred_at="2031-07-07T10:00:00+02:00")),
            (True, "", ""),
        ),
        (answer(status=400), (False, "R2", "the recall was refused: HTTP 400 ")),
        (answer(abstained=True), (False, "R2", "the recall abstained, but the memory is there")),
        (answer(), (False, "R2", "the recall returned no evidence")),
        (
            answer(*NOISE),
            (False, "R2", "the event is not among the 4 results (first: episode 'episode n0')"),
        ),
        (
            answer(*NOISE[:3], episode_hit("t")),
            (False, "R3", "the event ranked 4, below noise (first: episode 'episode n0')"),
        ),
        (
            answer(episode_hit("t", outcome="failure")),
            (False, "U0", 'outcome: expected "success", got "failure"'),
        ),
        (
            answer(episode_hit("t", occurred_at="2031-07-07T08:00:01Z")),
            (
                False,
                "U0",
                'occurred_at: expected "2031-07-07T08:00:00Z", got "2031-07-07T08:00:01Z"',
            ),
        ),
        (
            answer({"kind": "episode", "id": "t", "text": "x", "episode": {"id": "t"}}),
            (False, "A0", "the evidence does not say its actor"),
        ),
    ],
)
def test_an_event_answer_is_classified_in_order(answered, verdict):
    result = judge_event(answered, "t", WRITTEN)
    assert (result.ok, result.code, result.detail) == verdict


LOOKALIKES = {"l1": "Tokyo", "l2": "Oregon"}


@pytest.mark.parametrize(
    ("answered", "verdict"),
    [
        (answer(episode_hit("t"), episode_hit("l1")), (True, "", "")),
        (
            answer(episode_hit("l1"), episode_hit("t")),
            (False, "R3", "a look-alike (region Tokyo) ranked first; the one asked about ranked 2"),
        ),
        (
            answer(episode_hit("l2"), episode_hit("l1")),
            (
                False,
                "R2",
                "a look-alike (region Oregon) ranked first; the one asked about was not returned",
            ),
        ),
        (
            answer(episode_hit("n0"), episode_hit("t")),
            (False, "R3", "episode 'episode n0' ranked first; the one asked about ranked 2"),
        ),
        (
            answer(episode_hit("n0")),
            (
                False,
                "R2",
                "episode 'episode n0' ranked first; the one asked about was not returned",
            ),
        ),
        (answer(abstained=True), (False, "R2", "the recall abstained, but the memory is there")),
    ],
)
def test_a_disambiguation_answer_wants_the_named_one_first(answered, verdict):
    result = judge_disambiguation(answered, "t", LOOKALIKES, "region")
    assert (result.ok, result.code, result.detail) == verdict


TARGETS = ["a1", "a2", "b1"]
SESSIONS = {"a1": "sa", "a2": "sa", "b1": "sb"}
TIMES = {"a1": "2031-07-01T09:00:00Z", "a2": "2031-07-01T11:00:00Z", "b1": "2031-07-03T09:00:00Z"}
HITS = [episode_hit("a2"), episode_hit("b1"), episode_hit("n0"), episode_hit("a1")]


def groups(*members: tuple[str, list[str]]) -> list[dict]:
    return [{"session_id": session, "evidence": ids} for session, ids in members]


@pytest.mark.parametrize(
    ("answered", "verdict"),
    [
        (answer(*HITS, groups=groups(("sa", ["a1", "a2"]), ("sb", ["b1"]))), (True, "", "")),
        (
            answer(*HITS[:3], groups=groups(("sa", ["a2"]), ("sb", ["b1"]))),
            (False, "R2", "1 of the 3 episodes were not returned (from sessions sa)"),
        ),
        (
            answer(*HITS, groups=groups(("sa", ["a1"]), ("sb", ["b1"]))),
            (False, "A0", "an episode of session sa is in no session group"),
        ),
        (
            answer(*HITS, groups=groups(("sa", ["a1"]), ("sb", ["a2", "b1"]))),
            (False, "U0", "an episode of session sa is grouped under 'sb'"),
        ),
        (
            answer(*HITS, groups=groups(("sa", ["a2", "a1"]), ("sb", ["b1"]))),
            (False, "U0", "session sa's episodes are not in time order"),
        ),
        (answer(*HITS), (False, "A0", "an episode of session sa is in no session group")),
    ],
)
def test_a_synthesis_answer_brings_every_session_back_grouped_in_time_order(answered, verdict):
    result = judge_synthesis(answered, TARGETS, SESSIONS, TIMES)
    assert (result.ok, result.code, result.detail) == verdict


@pytest.mark.parametrize(
    ("answered", "verdict"),
    [
        (answer(abstained=True), (True, "", "")),
        (
            answer(episode_hit("n0"), abstained=True),
            (False, "R3", "abstained but still offered episode 'episode n0' as evidence"),
        ),
        (answer(), (False, "U0", "returned no evidence without saying it abstained")),
        (
            answer(episode_hit("n0")),
            (False, "R3", "a false memory: offered episode 'episode n0' for what never happened"),
        ),
        (answer(status=500), (False, "R2", "the recall was refused: HTTP 500 ")),
        (
            answer_of(response(200, {"evidence": []})),
            (False, "U0", "returned no evidence without saying it abstained"),
        ),
    ],
)
def test_only_an_abstention_with_nothing_offered_is_no_false_memory(answered, verdict):
    result = judge_abstain(answered)
    assert (result.ok, result.code, result.detail) == verdict


BORROWED = {"real": "real incident", "sys": "real episode about the geocoder"}


@pytest.mark.parametrize(
    ("answered", "verdict"),
    [
        (answer(abstained=True), (True, "", "")),
        (
            answer(episode_hit("real"), episode_hit("n0")),
            (
                False,
                "R3",
                "a false memory: offered episode 'episode real' for what never happened "
                "(the real incident it borrows words from)",
            ),
        ),
        (
            answer(episode_hit("sys")),
            (
                False,
                "R3",
                "a false memory: offered episode 'episode sys' for what never happened "
                "(the real episode about the geocoder it borrows words from)",
            ),
        ),
        (
            answer(episode_hit("n0"), episode_hit("real")),
            (False, "R3", "a false memory: offered episode 'episode n0' for what never happened"),
        ),
        (
            answer(episode_hit("real"), abstained=True),
            (
                False,
                "R3",
                "abstained but still offered episode 'episode real' as evidence "
                "(the real incident it borrows words from)",
            ),
        ),
        (answer(), (False, "U0", "returned no evidence without saying it abstained")),
        (answer(status=503), (False, "R2", "the recall was refused: HTTP 503 ")),
    ],
)
def test_a_near_domain_question_is_answered_only_by_abstaining(answered, verdict):
    result = judge_near(answered, BORROWED)
    assert (result.ok, result.code, result.detail) == verdict


def test_an_answer_is_read_once_whatever_the_evidence_carries():
    body = {
        "abstained": False,
        "route": {"chosen": "what_happened", "rule": "what_happened.what_happened"},
        "evidence": [
            episode_hit("t"),
            {"kind": "chunk", "id": "c", "text": "passage", "score": 1, "chunk": {"id": "c"}},
            "not evidence",
        ],
        "near_misses": [
            {"kind": "fact", "id": "f", "text": "x", "signals": {"vector_similarity": 0.5}}
        ],
        "groups": [{"session_id": "s1", "evidence": ["t"]}, "not a group"],
    }
    read = answer_of(response(200, body))
    assert (read.ok, read.abstained, read.route["chosen"]) == (True, False, "what_happened")
    assert [(h.kind, h.id, h.score) for h in read.evidence] == [
        ("episode", "t", 0.5),
        ("chunk", "c", 1.0),
    ]
    assert read.evidence[0].obj["actor"] == "Ana Lima"
    assert [(h.kind, h.id, h.signals) for h in read.near_misses] == [
        ("fact", "f", {"vector_similarity": 0.5})
    ]
    assert read.groups == [{"session_id": "s1", "evidence": ["t"]}]
    refused = answer_of(response(400, {"error": {"code": "invalid"}}))
    assert (refused.ok, refused.abstained, refused.evidence) == (False, None, [])
    assert isinstance(read.evidence[1], Hit)


def outcome(passed: bool, planned: dict, correct: dict | None = None, **metrics) -> ItemOutcome:
    data = {"kind": "BX", "planned": planned, **metrics}
    if correct is not None:
        data["correct"] = correct
    return ItemOutcome(
        suite="B",
        item=f"i{len(planned)}",
        title="t",
        passed=passed,
        failure_code="" if passed else "R1",
        detail="",
        metrics=data,
        duration_ms=1.0,
        generator="episodic",
    )


def test_an_item_fails_with_its_first_miss_and_keeps_every_count():
    tally = Tally(planned={"handover": 1, "event": 1})
    tally.record("handover", "handover", miss(F.W0, "refused"))
    tally.record("event", "event 'q'", judge_event(answer(episode_hit("t")), "t", WRITTEN))
    with pytest.raises(ItemFailure) as caught:
        tally.outcome()
    assert (caught.value.code, caught.value.detail) == (F.W0, "handover: refused")
    assert caught.value.metrics == {
        "correct": {"event": 1},
        "misses": [{"q": "handover", "code": "W0"}],
    }


def test_the_summary_counts_questions_and_a_crashed_item_counts_all_it_planned():
    b1 = {"event": 1, "handover": 1}
    summary = summarize(
        [
            outcome(True, b1, b1, form="paraphrase", delay="72h"),
            outcome(False, b1, {"handover": 1}, form="paraphrase", delay="24h"),
            outcome(False, b1, form="keyword", delay="72h"),  # crashed
            outcome(True, b1, b1, form="keyword", delay="24h"),
            outcome(True, {"disambiguation": 1}, {"disambiguation": 1}),
            outcome(False, {"disambiguation": 1}, {}),
            outcome(True, {"synthesis": 1}, {"synthesis": 1}),
            *[outcome(True, {"abstain": 1}, {"abstain": 1}) for _ in range(3)],
            outcome(False, {"abstain": 1}),  # crashed: a false memory
            outcome(True, {"near": 1}, {"near": 1}, split="seen"),
            outcome(False, {"near": 1}, {}, split="seen"),
            outcome(False, {"near": 1}, {}, split="seen"),
            outcome(True, {"near": 1}, {"near": 1}, split="seen"),
            outcome(False, {"near": 1}, split="held_out"),  # crashed: a false memory
        ]
    )
    assert summary.score == pytest.approx(900 / 16)
    assert summary.metrics == {
        "event_recall": 0.5,
        "paraphrase_event_recall": 0.5,
        "event_recall_72h": 0.5,
        "disambiguation_accuracy": 0.5,
        "synthesis_accuracy": 1.0,
        "false_memory_rate": 0.25,
        "near_domain_abstention_rate": 0.5,
        "near_domain_abstention_rate_held_out": 0.0,
    }
    held_out_only = summarize([outcome(True, {"near": 1}, {"near": 1}, split="held_out")])
    assert held_out_only.metrics == {"near_domain_abstention_rate_held_out": 1.0}


def b_result(
    *,
    events: int = 40,
    disambiguated: int = 20,
    synthesised: int = 12,
    false_memories: int = 0,
    near_abstained: int = 0,
):
    outcomes = [
        outcome(True, {"event": 1, "handover": 1}, {"event": int(i < events), "handover": 1})
        for i in range(40)
    ]
    outcomes += [
        outcome(True, {"disambiguation": 1}, {"disambiguation": int(i < disambiguated)})
        for i in range(20)
    ]
    outcomes += [
        outcome(True, {"synthesis": 1}, {"synthesis": int(i < synthesised)}) for i in range(12)
    ]
    outcomes += [
        outcome(True, {"abstain": 1}, {"abstain": int(i >= false_memories)}) for i in range(50)
    ]
    outcomes += [
        outcome(i < near_abstained, {"near": 1}, {"near": int(i < near_abstained)}, split=split)
        for i in range(12)
        for split in ("seen", "held_out")
    ]
    return suite_result(suite=suites_select(codes=["B"])[0], outcomes=outcomes)


def test_the_gates_hold_at_95_percent_and_a_2_percent_false_memory_rate_exactly():
    # Every B5 question a false memory, as the service does today: measured, not gated.
    card = score_run(
        [b_result(events=38, disambiguated=19, false_memories=1)], designed=designed_suites()
    )
    assert [(g.name, g.kind, g.passed, g.detail) for g in card.gates if g.kind != "cap"] == [
        ("B pass rate >= 80%", "suite", True, "122/146 items passed (83.6%)"),
        ("B event_recall >= 0.95", "metric", True, "event_recall 0.95"),
        ("B disambiguation_accuracy >= 0.95", "metric", True, "disambiguation_accuracy 0.95"),
        ("B synthesis_accuracy >= 0.95", "metric", True, "synthesis_accuracy 1"),
        ("B false_memory_rate <= 0.02", "metric", True, "false_memory_rate 0.02"),
    ]
    assert (
        card.metrics["near_domain_abstention_rate"],
        card.metrics["near_domain_abstention_rate_held_out"],
    ) == (0.0, 0.0)
    failed = score_run(
        [b_result(events=37, disambiguated=18, synthesised=11, false_memories=2)],
        designed=designed_suites(),
    )
    assert [(g.name, g.detail) for g in failed.gates if not g.passed and g.kind != "cap"] == [
        ("B event_recall >= 0.95", "event_recall 0.925"),
        ("B disambiguation_accuracy >= 0.95", "disambiguation_accuracy 0.9"),
        ("B synthesis_accuracy >= 0.95", "synthesis_accuracy 0.9167"),
        ("B false_memory_rate <= 0.02", "false_memory_rate 0.04"),
    ]


def test_the_pass_rate_floor_takes_b5_all_wrong_and_five_more_failures_not_six():
    def held(failed: int) -> bool:
        outcomes = [outcome(i >= failed, {"event": 1}, {"event": 1}) for i in range(122)]
        outcomes += [outcome(False, {"near": 1}, {}, split="seen") for _ in range(24)]
        return suite_result(suite=suites_select(codes=["B"])[0], outcomes=outcomes).pass_rate_held

    assert (held(5), held(6)) == (True, False)


# ------------------------------------------------------------- against the real service


@pytest.fixture
def eager(monkeypatch):
    """Embeddings computed in this process as each write commits (a worker's job),
    around fewer routine episodes."""
    monkeypatch.setattr(celery_app.conf, "task_always_eager", True)
    monkeypatch.setattr(draw, "NOISE", 24)


def run_small(transport, *, seed: int = 11, **counts: int) -> tuple[list, list[ItemOutcome]]:
    """Suite B's items for `counts`, through suite_execute against `transport`."""
    return run_suite_small(
        transport,
        code="B",
        module=episodic,
        draw=draw,
        none=NONE,
        seed=seed,
        counts=counts,
        successors=True,
    )


def failures(outcomes) -> list[tuple[str, str]]:
    return [(o.failure_code, o.detail.split(" (and ")[0]) for o in outcomes]


RECALL = "/api/v1/recall"


class RecallRewriter(Faulty):
    """Rewrites the body of every recall answer."""

    def rewrite(self, body: dict, asked: dict) -> dict:
        return body

    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "POST" and path == RECALL and response.status == 201:
            rewritten = self.rewrite(json.loads(json.dumps(response.body)), body)
            return dataclasses.replace(response, body=rewritten)
        return response


class ForgetsAfterTwoDays(RecallRewriter):
    """Recency as a cliff: episodes older than 48 h at the agent's clock are gone."""

    def rewrite(self, body, asked):
        clock = parse_datetime(
            self.inner.request("GET", "/api/v1/clock", headers=self.headers).body["now"]
        )
        body["evidence"] = [
            e
            for e in body["evidence"]
            if e["kind"] != "episode"
            or clock - parse_datetime(e["episode"]["occurred_at"]) <= timedelta(hours=48)
        ]
        body["abstained"] = not body["evidence"]
        return body

    def request(self, method, path, *, body=None, headers=None):
        self.headers = headers
        return super().request(method, path, body=body, headers=headers)


class ReversesRanking(RecallRewriter):
    def rewrite(self, body, asked):
        body["evidence"].reverse()
        return body


class NeverAbstains(RecallRewriter):
    """Whatever came nearest is offered as evidence."""

    def rewrite(self, body, asked):
        if body["abstained"]:
            body["evidence"], body["near_misses"] = body["near_misses"], []
            body["abstained"] = False
        return body


class AlwaysAbstains(RecallRewriter):
    def rewrite(self, body, asked):
        body["near_misses"] = body["evidence"] + body["near_misses"]
        body["evidence"], body["groups"], body["abstained"] = [], [], True
        return body


class SaysItWorked(RecallRewriter):
    """Every episode's outcome comes back as a success."""

    def rewrite(self, body, asked):
        for e in body["evidence"]:
            if e["kind"] == "episode":
                e["episode"]["outcome"] = "success"
        return body


class ForgetsWho(RecallRewriter):
    def rewrite(self, body, asked):
        for e in body["evidence"]:
            e.get("episode", {}).pop("actor", None)
        return body


class LosesGroups(RecallRewriter):
    def rewrite(self, body, asked):
        body["groups"] = []
        return body


class OneGroup(RecallRewriter):
    """Every episode filed under the session of the first."""

    def rewrite(self, body, asked):
        if body["groups"]:
            ids = [i for g in body["groups"] for i in g["evidence"]]
            body["groups"] = [{**body["groups"][0], "evidence": ids}]
        return body


class NeverEmbedded(Faulty):
    def request(self, method, path, *, body=None, headers=None):
        response = super().request(method, path, body=body, headers=headers)
        if method == "GET" and path.startswith("/api/v1/episodes?") and response.status == 200:
            rows = [{**r, "embedded": False} for r in response.body["results"]]
            return dataclasses.replace(response, body={**response.body, "results": rows})
        return response


class RefusesHandovers(Faulty):
    def request(self, method, path, *, body=None, headers=None):
        if method == "POST" and path.endswith("/handover"):
            return ApiResponse(status=503, body=None, headers={}, text="unavailable")
        return super().request(method, path, body=body, headers=headers)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_kind_passes_against_the_real_service(eager):
    specs, outcomes = run_small(InProcessTransport(), b1=8, b2=4, b3=3, b4=6)
    assert [(o.item, o.failure_code, o.detail) for o in outcomes] == [
        (s.key, "", "") for s in specs
    ]
    assert summarize(outcomes).metrics == {
        "event_recall": 1.0,
        "paraphrase_event_recall": 1.0,
        "event_recall_72h": 1.0,
        "disambiguation_accuracy": 1.0,
        "synthesis_accuracy": 1.0,
        "false_memory_rate": 0.0,
    }


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_recall_that_forgets_what_is_older_than_two_days_loses_the_72h_events(eager):
    specs, outcomes = run_small(ForgetsAfterTwoDays(InProcessTransport()), b1=8)
    assert [(s.metrics["delay"], o.failure_code) for s, o in zip(specs, outcomes, strict=True)] == [
        ("24h", ""),
        ("24h", ""),
        ("72h", "R2"),
        ("72h", "R2"),
    ] * 2
    metrics = summarize(outcomes).metrics
    assert (metrics["event_recall"], metrics["event_recall_72h"]) == (0.5, 0.0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_recall_that_ranks_the_wrong_way_round_is_R3(eager):
    specs, outcomes = run_small(ReversesRanking(InProcessTransport()), b1=2, b2=4, b3=2)
    b2 = [o for o in outcomes if o.metrics["kind"] == "B2"]
    assert [o.failure_code for o in b2] == ["R3"] * 4
    assert all(o.detail.startswith("disambiguation '") for o in b2)
    assert all("ranked first; the one asked about ranked" in o.detail for o in b2)
    assert {o.failure_code for o in outcomes if o.metrics["kind"] == "B1"} == {"R3"}
    assert all(o.passed for o in outcomes if o.metrics["kind"] == "B3")  # order-free
    assert summarize(outcomes).metrics["disambiguation_accuracy"] == 0.0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_recall_that_never_abstains_makes_false_memories_and_one_that_always_does_forgets(
    eager,
):
    specs, outcomes = run_small(NeverAbstains(InProcessTransport()), b1=2, b4=6, b5=4)
    assert [o.failure_code for o in outcomes] == ["", ""] + ["R3"] * 10
    assert all("a false memory: offered episode" in o.detail for o in outcomes[2:])
    metrics = summarize(outcomes).metrics
    assert (
        metrics["false_memory_rate"],
        metrics["near_domain_abstention_rate"],
        metrics["near_domain_abstention_rate_held_out"],
    ) == (1.0, 0.0, 0.0)
    specs, outcomes = run_small(AlwaysAbstains(InProcessTransport()), b1=2, b2=1, b3=1, b4=2, b5=2)
    assert (
        failures(outcomes)
        == [
            ("R2", f"{q['q']} {q['text']!r}: the recall abstained, but the memory is there")
            for s in specs[:4]
            for q in s.data["questions"]
        ]
        + [("", "")] * 4
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_evidence_that_misreports_or_leaves_out_what_happened_is_U0_or_A0(eager):
    specs, outcomes = run_small(SaysItWorked(InProcessTransport()), b1=8)
    for spec, result in zip(specs, outcomes, strict=True):
        if own(spec)[0]["outcome"] == "success":
            assert result.passed
        else:
            assert (result.failure_code, result.detail.split(": ", 1)[1]) == (
                "U0",
                f'outcome: expected "{own(spec)[0]["outcome"]}", got "success"',
            )
    _, outcomes = run_small(ForgetsWho(InProcessTransport()), b1=2)
    assert [o.detail.split(": ", 1)[1] for o in outcomes] == [
        "the evidence does not say its actor"
    ] * 2
    assert {o.failure_code for o in outcomes} == {"A0"}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_synthesis_without_its_session_groups_is_A0_and_with_them_merged_U0(eager):
    specs, outcomes = run_small(LosesGroups(InProcessTransport()), b3=3)
    assert [(o.failure_code, "is in no session group" in o.detail) for o in outcomes] == [
        ("A0", True)
    ] * 3
    specs, outcomes = run_small(OneGroup(InProcessTransport()), b3=3)
    assert [o.failure_code for o in outcomes] == ["U0"] * 3
    assert all(" is grouped under " in o.detail for o in outcomes)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_episodes_never_embedded_fail_W1_and_refused_handovers_W0(eager, monkeypatch):
    monkeypatch.setattr(episodic, "EMBED_STALL_SECONDS", 0.5)
    specs, outcomes = run_small(NeverEmbedded(InProcessTransport()), b1=2, b4=2)
    assert [o.failure_code for o in outcomes[:2]] == ["W1", "W1"]
    assert all(
        o.detail.startswith("handover: ") is False and "episodes still had no embedding" in o.detail
        for o in outcomes[:2]
    )
    assert [o.failure_code for o in outcomes[2:]] == ["", ""]  # nothing of their own to wait for
    specs, outcomes = run_small(RefusesHandovers(InProcessTransport()), b1=2)
    assert (
        failures(outcomes)
        == [("W0", "handover: POST …/handover refused: HTTP 503 unavailable")] * 2
    )
    assert all(o.metrics["correct"] == {"event": 1} for o in outcomes)  # still recalled


# --------------------------------------------------------------------------- the command


def battery(*args: str) -> str:
    out = io.StringIO()
    call_command("battery", *args, stdout=out, no_color=True)
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_B_exits_non_zero_when_recall_never_abstains(
    eager, monkeypatch, tmp_path
):
    monkeypatch.setattr(draw, "COUNTS", {"b1": 2, "b2": 1, "b3": 1, "b4": 4, "b5": 2})
    monkeypatch.setattr(
        "battery.services.transport_open",
        lambda base_url, via=None: NeverAbstains(InProcessTransport()),
    )
    with pytest.raises(CommandError) as caught:
        battery("run", "--suite", "B", "--report", str(tmp_path), "--seed", "8")
    run = BatteryRun.objects.get()
    assert (caught.value.returncode, run.status) == (1, "failed")
    assert [g["name"] for g in run.gates if not g["passed"] and not g["fail_closed"]] == [
        "B pass rate >= 80%",
        "B false_memory_rate <= 0.02",
    ]
    assert Counter(run.items.values_list("failure_code", flat=True)) == {"": 4, "R3": 6}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_battery_run_suite_B_passes_its_gates_with_a_real_worker(celery_worker_process, tmp_path):
    output = battery("run", "--suite", "B", "--seed", "7", "--report", str(tmp_path))
    run = BatteryRun.objects.get()
    suite = run.suite_scores["B"]
    assert (run.status, run.suites, suite["items"], suite["gate_passed"]) == (
        "incomplete",
        ["B"],
        146,
        True,
    ), output
    assert [(g["name"], g["passed"]) for g in run.gates if g["kind"] != "cap"] == [
        ("B pass rate >= 80%", True),
        ("B event_recall >= 0.95", True),
        ("B disambiguation_accuracy >= 0.95", True),
        ("B synthesis_accuracy >= 0.95", True),
        ("B false_memory_rate <= 0.02", True),
    ]
    # Measured, not gated (judge.PASS_RATE_GATE says what the service reached).
    assert {"near_domain_abstention_rate", "near_domain_abstention_rate_held_out"} <= set(
        suite["metrics"]
    )
    report = json.loads((tmp_path / "report.json").read_text())
    assert Counter(i["metrics"]["kind"] for i in report["items"]) == {
        "B1": 40,
        "B2": 20,
        "B3": 12,
        "B4": 50,
        "B5": 24,
    }
