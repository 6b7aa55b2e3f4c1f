"""Calibrating the "no supporting memory" threshold on data (DESIGN.md §5).

A calibration set (episodes/calibration_set.json, or any file of the same
shape) holds an agent's episodes and questions: answerable ones name the
episode that answers them (most share no word with it), unanswerable ones ask
about things that never happened. `abstention_calibrate` records the episodes
for a throwaway agent inside a transaction that is rolled back, embeds them
with the process embedder, asks every question through `episode_search`, and
chooses the threshold on the evidence score (types.EVIDENCE_METRIC): the
lowest one that answers at most MAX_FALSE_ANSWER_RATE of the unanswerable
questions (false memories cost more than misses). The chosen threshold is
stored as an `AbstentionCalibration` with the model name, metric, data set,
sample size and both accuracies; retrieval applies the newest one for its
embedder from then on.

Dataset shape:
    {"name": str, "episodes": [{"key", "summary", "action"?, "observation"?,
      "days_ago"?, "actor"?, "environment"?, "outcome"?, "entities"?}],
     "queries": [{"query": str, "answer": episode key | null}]}
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from piper.errors import InvalidInput
from piper.tenancy.services import agent_create

from ..models import AbstentionCalibration, Episode
from .search import episode_search
from .types import EVIDENCE_METRIC

# Beside the app, not this package: the battery and the safety evaluation read it too.
DEFAULT_DATA = Path(__file__).parents[1] / "calibration_set.json"


@dataclass(frozen=True)
class Scored:
    query: str
    answer: str | None  # the key of the episode that answers it; None: unanswerable
    evidence: float | None
    answer_rank: int | None  # where the answer came among the hits (1-based), if at all


@dataclass(frozen=True)
class Choice:
    threshold: float
    answerable_accuracy: float
    unanswerable_accuracy: float

    @property
    def balanced_accuracy(self) -> float:
        return (self.answerable_accuracy + self.unanswerable_accuracy) / 2


def load_dataset(path: Path | str) -> dict[str, Any]:
    """The calibration set at `path`, checked (InvalidInput names what is wrong)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InvalidInput(f"--data: cannot read {path}: {exc}") from exc
    if not isinstance(data, dict) or not data.get("episodes") or not data.get("queries"):
        raise InvalidInput(f"{path}: needs non-empty 'episodes' and 'queries' lists")
    keys = set()
    for i, episode in enumerate(data["episodes"]):
        if not isinstance(episode, dict) or not episode.get("key") or not episode.get("summary"):
            raise InvalidInput(f"{path}: episodes[{i}] needs a key and a summary")
        if episode["key"] in keys:
            raise InvalidInput(f"{path}: episodes[{i}]: key {episode['key']!r} is used twice")
        keys.add(episode["key"])
    for i, query in enumerate(data["queries"]):
        if not isinstance(query, dict) or not str(query.get("query", "")).strip():
            raise InvalidInput(f"{path}: queries[{i}] needs a query")
        if query.get("answer") is not None and query["answer"] not in keys:
            raise InvalidInput(f"{path}: queries[{i}]: no episode has key {query['answer']!r}")
    answerable = sum(1 for q in data["queries"] if q.get("answer") is not None)
    if answerable == 0 or answerable == len(data["queries"]):
        raise InvalidInput(f"{path}: needs both answerable and unanswerable queries")
    data.setdefault("name", path.stem)
    return data


class _RollBack(Exception):
    pass


def score_queries(data: dict[str, Any]) -> list[Scored]:
    """Each query's evidence score against the data set's episodes (nothing is kept)."""
    from piper.embeddings import get_embedder

    from ..services import EpisodeDraft, episodes_record

    embedder = get_embedder()
    now = timezone.now()
    scored: list[Scored] = []
    try:
        with transaction.atomic():
            agent = agent_create(
                name=f"calibration-{uuid.uuid4().hex[:12]}",
                description="Throwaway agent of an abstention calibration (rolled back).",
                is_throwaway=True,
            )
            drafts = [
                _draft(EpisodeDraft, e, now - timedelta(days=e.get("days_ago", 0)))
                for e in data["episodes"]
            ]
            episodes = episodes_record(agent=agent, drafts=drafts)
            vectors = embedder.embed([e.embedding_text() for e in episodes])
            for episode, vector in zip(episodes, vectors, strict=True):
                Episode.objects.filter(pk=episode.pk).update(
                    embedding=vector, embedding_model=embedder.name, embedded_at=now
                )
            key_of = {ep.pk: e["key"] for ep, e in zip(episodes, data["episodes"], strict=True)}
            queries = [q["query"] for q in data["queries"]]
            query_vectors = embedder.embed(queries)
            for q, vector in zip(data["queries"], query_vectors, strict=True):
                result = episode_search(
                    agent=agent, query=q["query"], query_embedding=vector, now=now, abstain=False
                )
                keys = [key_of[h.obj.pk] for h in result.hits]
                answer = q.get("answer")
                scored.append(
                    Scored(
                        query=q["query"],
                        answer=answer,
                        evidence=result.evidence_score,
                        answer_rank=keys.index(answer) + 1 if answer in keys else None,
                    )
                )
            raise _RollBack
    except _RollBack:
        pass
    return scored


def _draft(draft_class, episode: dict[str, Any], occurred_at):
    return draft_class(
        occurred_at=occurred_at,
        summary=episode["summary"],
        action=episode.get("action", ""),
        observation=episode.get("observation", ""),
        outcome=episode.get("outcome", "unknown"),
        actor=episode.get("actor", ""),
        environment=episode.get("environment", ""),
        entities=tuple(episode.get("entities", ())),
    )


# A false memory (an answer where nothing supports one) misleads the agent; a
# missed memory makes it look again. The threshold is therefore the lowest one
# that answers at most this share of the calibration set's unanswerable
# questions — not the one with the best balanced accuracy, which on the shipped
# set answers a third of them (0.347: 80% kept, 33% false).
MAX_FALSE_ANSWER_RATE = 0.15


def choose_threshold(
    scored: list[Scored], *, max_false_rate: float = MAX_FALSE_ANSWER_RATE
) -> Choice:
    """The lowest cut that answers at most `max_false_rate` of the unanswerable
    queries (a query is answered when its evidence ≥ the cut), so it keeps as
    many answerable ones as that allows. Among cuts that keep and refuse the
    same queries, the middle of the gap between scores (the decision least
    sensitive to small shifts)."""
    answerable = [s.evidence for s in scored if s.answer is not None]
    unanswerable = [s.evidence for s in scored if s.answer is None]
    if not answerable or not unanswerable:
        raise InvalidInput("calibration needs both answerable and unanswerable queries")
    # A missing score (no candidate at all) is always refused.
    values = sorted({v for v in answerable + unanswerable if v is not None})
    cuts = [values[0] - 1e-6]
    cuts += [(a + b) / 2 for a, b in zip(values, values[1:], strict=False)]
    cuts.append(values[-1] + 1e-6)

    def accuracies(cut: float) -> tuple[float, float]:
        kept = sum(1 for v in answerable if v is not None and v >= cut) / len(answerable)
        refused = sum(1 for v in unanswerable if v is None or v < cut) / len(unanswerable)
        return kept, refused

    # Cuts rise, so the first one within the limit keeps the most answerable queries.
    for cut in cuts:
        kept, refused = accuracies(cut)
        if 1.0 - refused <= max_false_rate + 1e-12:
            return Choice(round(cut, 6), kept, refused)
    raise AssertionError("the cut above every score refuses every query")


def abstention_calibrate(
    *, data_path: Path | str = DEFAULT_DATA, dry_run: bool = False
) -> tuple[AbstentionCalibration, list[Scored]]:
    """Calibrate on `data_path` and store the result (unless `dry_run`).

    Returns the calibration (unsaved with dry_run) and every query's score.
    Raises InvalidInput for a file that cannot be read or lacks answerable or
    unanswerable queries.
    """
    from piper.embeddings import get_embedder

    data = load_dataset(data_path)
    scored = score_queries(data)
    choice = choose_threshold(scored)
    answerable = [s for s in scored if s.answer is not None]
    calibration = AbstentionCalibration(
        embedding_model=get_embedder().name,
        threshold=choice.threshold,
        metric=EVIDENCE_METRIC,
        dataset=f"{data['name']} ({Path(data_path).name})",
        sample_size=len(scored),
        answerable_accuracy=round(choice.answerable_accuracy, 4),
        unanswerable_accuracy=round(choice.unanswerable_accuracy, 4),
        details={
            "balanced_accuracy": round(choice.balanced_accuracy, 4),
            "policy": f"lowest threshold answering at most {MAX_FALSE_ANSWER_RATE:.0%} "
            "of the unanswerable questions",
            "answerable": len(answerable),
            "unanswerable": len(scored) - len(answerable),
            "episodes": len(data["episodes"]),
            "answer_at_1": sum(1 for s in answerable if s.answer_rank == 1),
            "answer_in_hits": sum(1 for s in answerable if s.answer_rank is not None),
            "scores": [
                {"query": s.query, "answerable": s.answer is not None, "evidence": s.evidence}
                for s in scored
            ],
        },
    )
    if not dry_run:
        calibration.save()
    return calibration, scored
