"""LoCoMo evidence retrieval: `python manage.py battery locomo --data …/locomo10.json`.

LoCoMo (Maharana et al., ACL 2024) is ten long conversations between two
speakers, each in dated sessions, with questions whose evidence is a list of
turn ids ("D<session>:<turn>"). This module ingests each conversation into its
own throwaway agent — every turn an episode at its session's date — asks every
question within that conversation, and measures evidence recall@k: the fraction
of a question's evidence turns found among the first k results, averaged over
questions, per category and overall. The data is CC BY-NC and is not shipped
with Piper; pass its path.

A turn is recorded as an episode through episodes_record: summary = what was
said, observation = the photo the speaker shared, as its caption
("[shares a photo of …]"), actor = the speaker, session_id = its session,
occurred_at = the session's date plus one second per turn (so the turns of a
session keep their order), entities = the speaker and the other speaker when
named, source_ref = "locomo:<sample>:<dia id>". Each conversation is embedded
in batches once it is stored. Questions are asked through episode_search with
abstention off (the default, `through="search"`: recall@k needs the first k
even when recall would say "no supporting memory"; how often it would is
reported) or through recall's what_happened route (`through="recall"`:
abstention on, near misses count when it abstains).

The run is stored as a BatteryRun of suite LCM with one ItemResult per
category and one for all questions; the gate is overall R@10 >= TARGET_R10.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

# One evidence id inside a possibly malformed evidence string: "D8:6", "D:11:26",
# "D30:05". A string may hold several ("D8:6; D9:17", "D9:1 D4:4 D4:6").
_EVIDENCE_ID = re.compile(r"D:?(\d+):(\d+)")
_SESSION_DATE = re.compile(
    r"(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})"
)
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ]
    )
}


def normalise_evidence(raw: Iterable[str], *, known: Iterable[str]) -> tuple[list[str], list[str]]:
    """The evidence ids of one question, cleaned, and what was dropped.

    Splits strings holding several ids, reads "D:11:26" as D11:26 and "D30:05"
    as D30:5, and drops what is not an id ("D") or names no turn of the
    conversation. Returns (ids in first-seen order without repeats, dropped).
    """
    known = set(known)
    ids: list[str] = []
    dropped: list[str] = []
    for text in raw:
        found = _EVIDENCE_ID.findall(str(text))
        if not found:
            dropped.append(str(text))
            continue
        for session, turn in found:
            dia_id = f"D{int(session)}:{int(turn)}"
            if dia_id not in known:
                dropped.append(dia_id)
            elif dia_id not in ids:
                ids.append(dia_id)
    return ids, dropped


def parse_session_date(text: str) -> datetime:
    """ "1:56 pm on 8 May, 2023" -> 2023-05-08 13:56 UTC."""
    m = _SESSION_DATE.search(text)
    if not m:
        raise ValueError(f"unreadable LoCoMo session date {text!r}")
    hour, minute, half, day, month, year = m.groups()
    month_no = _MONTHS.get(month.lower())
    if month_no is None:
        raise ValueError(f"unreadable month in LoCoMo session date {text!r}")
    hour_no = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    return datetime(int(year), month_no, int(day), hour_no, int(minute), tzinfo=UTC)


def recall_at(ranked: list[str], evidence: list[str], k: int) -> float:
    """Fraction of `evidence` among the first `k` of `ranked` (0 when evidence is empty)."""
    if not evidence:
        return 0.0
    top = set(ranked[:k])
    return sum(1 for e in set(evidence) if e in top) / len(set(evidence))


# ---------------------------------------------------------------- the run

SUITE_CODE = "LCM"
SUITE_NAME = "LoCoMo evidence retrieval"
TARGET_R10 = 0.72
KS = (5, 10)
INGEST_BATCH = 500
EMBED_BATCH = 256
THROUGH = ("search", "recall")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    session: int
    turn: int
    speaker: str
    text: str
    caption: str
    session_date: datetime


@dataclass(frozen=True)
class QuestionItem:
    question: str
    category: int
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: tuple[Turn, ...]
    questions: tuple[QuestionItem, ...]
    skipped_questions: int  # no usable evidence
    dropped_ids: tuple[str, ...]


def _bad_file(path: Path, why: str):
    from piper.errors import InvalidInput

    return InvalidInput(f"--data {path}: {why}", details={"data": [why]})


def conversations_load(path: str | Path) -> list[Conversation]:
    """The conversations of a locomo10.json file, evidence normalised.

    Questions without one usable evidence id are skipped (counted). Raises
    InvalidInput when the file cannot be read or is not LoCoMo's structure.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _bad_file(path, f"cannot be read as JSON ({exc})") from exc
    if not isinstance(raw, list) or not raw:
        raise _bad_file(path, "expected a non-empty JSON list of conversations")
    out = []
    for n, record in enumerate(raw):
        try:
            out.append(_conversation(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad_file(path, f"record {n} is not a LoCoMo conversation ({exc!r})") from exc
    return out


def _conversation(record: dict) -> Conversation:
    c = record["conversation"]
    numbers = sorted(
        int(key.split("_")[1])
        for key in c
        if re.fullmatch(r"session_\d+", key) and isinstance(c[key], list)
    )
    turns = []
    for s in numbers:
        date = parse_session_date(c[f"session_{s}_date_time"])
        for i, t in enumerate(c[f"session_{s}"]):
            turns.append(
                Turn(
                    dia_id=t["dia_id"],
                    session=s,
                    turn=i,
                    speaker=t["speaker"],
                    text=t["text"],
                    caption=t.get("blip_caption") or "",
                    session_date=date,
                )
            )
    known = {t.dia_id for t in turns}
    questions, skipped, dropped = [], 0, []
    for qa in record["qa"]:
        ids, lost = normalise_evidence(qa.get("evidence") or [], known=known)
        dropped.extend(lost)
        if not ids:
            skipped += 1
            continue
        questions.append(QuestionItem(qa["question"], int(qa["category"]), tuple(ids)))
    return Conversation(
        sample_id=str(record["sample_id"]),
        speakers=(c["speaker_a"], c["speaker_b"]),
        turns=tuple(turns),
        questions=tuple(questions),
        skipped_questions=skipped,
        dropped_ids=tuple(dropped),
    )


def _first_name(name: str) -> str:
    return name.split()[0] if name.split() else name


def turn_draft(*, conversation: Conversation, turn: Turn):
    """The EpisodeDraft one turn is recorded as (see the module doc)."""
    from episodes.services import EpisodeDraft

    entities = [turn.speaker]
    for other in conversation.speakers:
        if other != turn.speaker and re.search(
            rf"\b{re.escape(_first_name(other))}\b", turn.text, re.IGNORECASE
        ):
            entities.append(other)
    return EpisodeDraft(
        occurred_at=turn.session_date + timedelta(seconds=turn.turn),
        summary=turn.text,
        observation=f"[shares {turn.caption}]" if turn.caption else "",
        actor=turn.speaker,
        session_id=f"session_{turn.session}",
        entities=tuple(entities),
        source_ref=f"locomo:{conversation.sample_id}:{turn.dia_id}",
    )


def conversation_ingest(*, agent, conversation: Conversation, embed: bool = True) -> dict[Any, str]:
    """Record every turn of `conversation` as an episode of `agent`, then embed
    them in batches (in this process). Returns episode id -> dia id."""
    from episodes.services import episodes_embed, episodes_record

    drafts = [turn_draft(conversation=conversation, turn=t) for t in conversation.turns]
    dia_of: dict[Any, str] = {}
    for start in range(0, len(drafts), INGEST_BATCH):
        chunk = conversation.turns[start : start + INGEST_BATCH]
        episodes = episodes_record(agent=agent, drafts=drafts[start : start + INGEST_BATCH])
        for episode, turn in zip(episodes, chunk, strict=True):
            dia_of[episode.pk] = turn.dia_id
    if embed:
        ids = list(dia_of)
        for start in range(0, len(ids), EMBED_BATCH):
            episodes_embed(episode_ids=ids[start : start + EMBED_BATCH])
    return dia_of


@dataclass
class Answered:
    """One question asked: where its evidence ranked, and how long it took."""

    category: int
    ranked: list[str]  # dia ids, best first
    evidence: tuple[str, ...]
    latency_ms: float
    would_abstain: bool

    def recall(self, k: int) -> float:
        return recall_at(self.ranked, list(self.evidence), k)


def question_ask(*, agent, question: str, limit: int, now: datetime, through: str) -> tuple:
    """(episodes best first, latency ms, whether recall abstains) for one question."""
    started = time.perf_counter()
    if through == "recall":
        from recall.services import recall

        result = recall(agent=agent, query=question, route="what_happened", limit=limit, now=now)
        elapsed = (time.perf_counter() - started) * 1000
        items = result.near_misses if result.abstained else result.evidence
        return [e.obj for e in items if e.kind == "episode"], elapsed, result.abstained
    from episodes.retrieval import episode_search

    result = episode_search(agent=agent, query=question, limit=limit, now=now, abstain=False)
    elapsed = (time.perf_counter() - started) * 1000
    would = result.evidence_score is None or result.evidence_score < result.threshold
    return [h.obj for h in result.hits], elapsed, would


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[rank]


@dataclass
class Summary:
    """Recall@k per category and overall, latency, and what was skipped."""

    rows: dict[str, dict[str, float]]  # key -> {questions, r5, r10}
    latency_p50_ms: float
    latency_p95_ms: float
    would_abstain: float
    conversations: int
    turns: int
    questions: int
    skipped_questions: int
    dropped_ids: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def overall(self) -> dict[str, float]:
        return self.rows["overall"]


def summarise(answered: Sequence[Answered], **counts) -> Summary:
    """Per-category and overall means of recall@5 and @10 (questions weigh equally)."""
    rows: dict[str, dict[str, float]] = {}
    groups: dict[str, list[Answered]] = {"overall": list(answered)}
    for a in answered:
        groups.setdefault(category_key(a.category), []).append(a)
    for key in sorted(groups, key=lambda k: (k == "overall", k)):
        items = groups[key]
        row: dict[str, float] = {"questions": len(items)}
        for k in KS:
            row[f"r{k}"] = round(statistics.fmean(a.recall(k) for a in items), 4) if items else 0.0
        rows[key] = row
    latencies = [a.latency_ms for a in answered]
    return Summary(
        rows=rows,
        latency_p50_ms=round(_percentile(latencies, 0.50), 2),
        latency_p95_ms=round(_percentile(latencies, 0.95), 2),
        would_abstain=round(sum(a.would_abstain for a in answered) / len(answered), 4)
        if answered
        else 0.0,
        questions=len(answered),
        **counts,
    )


def category_key(category: int) -> str:
    return f"{category}-{CATEGORIES.get(category, 'unknown')}"


def locomo_run(
    *,
    data: str | Path,
    conversations: int | None = None,
    limit_questions: int | None = None,
    through: str = "search",
    on_progress: Callable[[str], None] | None = None,
):
    """Ingest, ask, score and store one LoCoMo evaluation; returns (BatteryRun, Summary).

    `conversations`: only the first N; `limit_questions`: at most N questions
    of each conversation. Each conversation gets its own throwaway agent,
    deactivated at the end. Raises InvalidInput (nothing stored) for a bad
    file or argument.
    """
    from piper.errors import InvalidInput

    if through not in THROUGH:
        raise InvalidInput(f"through: one of {', '.join(THROUGH)}", details={"through": [through]})
    for name, value in (("conversations", conversations), ("limit_questions", limit_questions)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise InvalidInput(
                f"--{name.replace('_', '-')}: a positive integer", details={name: [str(value)]}
            )
    convs = conversations_load(data)[:conversations]
    say = on_progress or (lambda _message: None)

    import traceback

    from django.db import connection

    from battery.models import BatteryRun
    from battery.services import run_error, throwaway_agents_deactivate
    from episodes.retrieval import forget_statistics
    from piper.tenancy.services import agent_create

    run = BatteryRun.objects.create(seed=0, suites=[SUITE_CODE], target="in-process")
    agent_ids: list = []
    try:
        ingested = []
        for conv in convs:
            started = time.perf_counter()
            agent = agent_create(
                name=f"locomo-{run.pk.hex[:12]}-{conv.sample_id}",
                description=f"LoCoMo {conv.sample_id}, battery run {run.pk}",
                is_throwaway=True,
            )
            agent_ids.append(agent.pk)
            if not run.agent_name:
                run.agent_name = agent.name
                run.save(update_fields=["agent_name"])
            dia_of = conversation_ingest(agent=agent, conversation=conv)
            ingested.append((conv, agent, dia_of))
            say(
                f"{conv.sample_id}: {len(conv.turns)} turns recorded and embedded "
                f"in {time.perf_counter() - started:.1f} s"
            )
        # What autovacuum would do after this many inserts: the text ranking's
        # lexeme frequencies come from the planner's statistics.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE episodes_episode")
        forget_statistics()

        answered: list[Answered] = []
        for conv, agent, dia_of in ingested:
            questions = conv.questions[:limit_questions]
            now = max(t.session_date for t in conv.turns) + timedelta(days=1)
            for q in questions:
                episodes, ms, would = question_ask(
                    agent=agent, question=q.question, limit=max(KS), now=now, through=through
                )
                ranked = [dia_of.get(e.pk, "?") for e in episodes]
                answered.append(Answered(q.category, ranked, q.evidence, ms, would))
            say(f"{conv.sample_id}: {len(questions)} questions asked")
        summary = summarise(
            answered,
            conversations=len(convs),
            turns=sum(len(c.turns) for c in convs),
            skipped_questions=sum(c.skipped_questions for c in convs),
            dropped_ids=sum(len(c.dropped_ids) for c in convs),
            extra={"through": through, "data": str(data)},
        )
        run = run_store(run=run, summary=summary)
    except Exception:
        run_error(run=run, error=traceback.format_exc())
        raise
    finally:
        throwaway_agents_deactivate(agent_ids=agent_ids)
    return run, summary


def run_store(*, run, summary: Summary):
    """The summary as the run's items, metrics and gate (see the module doc)."""
    from battery.models import ItemResult
    from battery.registry import MetricGate
    from battery.scoring import Gate, Scorecard, SuiteResult
    from battery.services import run_finish

    items = []
    for key, row in summary.rows.items():
        passed = row["r10"] >= TARGET_R10
        title = "All questions" if key == "overall" else f"Category {key}"
        items.append(
            ItemResult(
                run=run,
                suite=SUITE_CODE,
                item=key,
                title=f"{title}: evidence recall@10 >= {TARGET_R10:g}",
                passed=passed,
                failure_code="" if passed else "R2",  # evidence not among the candidates
                metrics=dict(row),
                detail=""
                if passed
                else f"evidence recall@10 {row['r10']:.3f} < {TARGET_R10:g} over {row['questions']} questions",
                duration_ms=0.0,
            )
        )
    ItemResult.objects.bulk_create(items)
    overall = summary.overall
    metrics = {
        "locomo_recall_at_5": overall["r5"],
        "locomo_recall_at_10": overall["r10"],
        "locomo_latency_p50_ms": summary.latency_p50_ms,
        "locomo_latency_p95_ms": summary.latency_p95_ms,
        "locomo_would_abstain": summary.would_abstain,
        "locomo_questions": summary.questions,
        "locomo_conversations": summary.conversations,
        "locomo_turns": summary.turns,
        "locomo_skipped_questions": summary.skipped_questions,
        "locomo_dropped_evidence_ids": summary.dropped_ids,
    }
    passed = overall["r10"] >= TARGET_R10
    gate = Gate(
        name=f"{SUITE_CODE} locomo_recall_at_10 >= {TARGET_R10:g}",
        kind="metric",
        passed=passed,
        detail=f"locomo_recall_at_10 {overall['r10']:.4g}",
    )
    result = SuiteResult(
        code=SUITE_CODE,
        name=SUITE_NAME,
        weight=0.0,
        gate=0.0,
        items=len(items),
        passed=sum(i.passed for i in items),
        score=round(100 * overall["r10"], 2),
        metrics=metrics,
        metric_gates=(MetricGate("locomo_recall_at_10", minimum=TARGET_R10),),
    )
    # An external evaluation, not the battery: its score is its own, and it is
    # never short of a designed suite.
    card = Scorecard(
        total=100 * overall["r10"],
        uncapped_total=100 * overall["r10"],
        total_of_run=100 * overall["r10"],
        gates=[gate],
        metrics=metrics,
    )
    return run_finish(run=run, results=[result], card=card)


def summary_table(summary: Summary) -> list[str]:
    """The printed table: one line per category, then overall and latency."""
    lines = [f"{'category':<16}{'questions':>10}{'R@5':>8}{'R@10':>8}"]
    for key, row in summary.rows.items():
        lines.append(f"{key:<16}{int(row['questions']):>10}{row['r5']:>8.3f}{row['r10']:>8.3f}")
    lines.append(
        f"latency per question (query embedding included): p50 {summary.latency_p50_ms:.1f} ms,"
        f" p95 {summary.latency_p95_ms:.1f} ms"
    )
    lines.append(
        f"{summary.conversations} conversations, {summary.turns} turns;"
        f" {summary.skipped_questions} questions without usable evidence skipped,"
        f" {summary.dropped_ids} evidence ids dropped;"
        f" recall would abstain on {summary.would_abstain:.1%}"
    )
    return lines
