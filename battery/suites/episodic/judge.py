"""Suite B's grading: one verdict per question, tallied per item and per suite.

An event question (B1) is classified in this order:
1. the recall was refused, or abstained, or the event is not among the
   evidence: R2 (not among the candidates);
2. it is there but below EVENT_DEPTH: R3 (outranked);
3. the evidence leaves out who, when, what or how it ended: A0 (in context,
   ignored); says something else than what was written: U0;
4. otherwise correct.

A disambiguation question (B2): its episode first is correct; below a
look-alike R3; missing R2.
A synthesis question (B3): every episode among the evidence (R2 for those
missing), each in the group of its own session (A0 when in none, U0 under
another), each group in time order (U0).
A question about what never happened (B4, off-domain; B5, near-domain):
anything offered is a false memory, R3; no evidence without saying it
abstained, U0.

The suite's metrics count questions, not items: an item that could not ask
counts every question it planned as wrong (so as a false memory, for B4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...judging import CORRECT, Verdict, counted, miss, shown
from ...registry import ItemOutcome, SuiteSummary, pass_rate
from ...taxonomy import FailureCode as F
from .api import Answer, Hit, group_members, moment

EVENT_DEPTH = 3  # an event must be among the first three pieces of evidence
EVENT_RECALL_GATE = 0.95
DISAMBIGUATION_GATE = 0.95
FALSE_MEMORY_GATE = 0.02
SYNTHESIS_GATE = 0.95
# B5 (near-domain never-happened events) is measured, not gated: with the
# calibrated threshold of the default embedder (cosine >= 0.4429) the service
# refused 2/12, 0/12, 1/12 and 1/12 of the seen phrasings at seeds 3, 7, 8
# and 11 (held out: 1, 1, 4 and 2 of 12) when the family was added (issue
# 20). Rounded down over seeds that is 0, and a gate at 0 cannot fail.
# Its false memories still fail their items, so the suite's pass rate is a
# floor below them (PASS_RATE_GATE): B5's 24 of 146 items all failing leave
# room for 5 more failures, about the 5% the 122 other items had before; each
# other family keeps its own gate.
PASS_RATE_GATE = 0.80
EVENT_FIELDS = ("actor", "occurred_at", "action", "outcome")


def recall_refused(answer: Answer) -> Verdict | None:
    """R2 when the service refused the recall itself (any suite's recall items)."""
    if answer.ok:
        return None
    return miss(F.R2, f"the recall was refused: {answer.response.describe()}")


def _refused(answer: Answer) -> Verdict | None:
    if problem := recall_refused(answer):
        return problem
    if answer.abstained:
        return miss(F.R2, "the recall abstained, but the memory is there")
    if not answer.evidence:
        return miss(F.R2, "the recall returned no evidence")
    return None


def _rank(evidence: Sequence[Hit], wanted: str) -> int | None:
    return next((i + 1 for i, hit in enumerate(evidence) if hit.id == wanted), None)


def _same_field(name: str, got: Any, expected: Any) -> bool:
    if name == "occurred_at":
        return moment(got) is not None and moment(got) == moment(expected)
    return got == expected


def judge_event(answer: Answer, target_id: str, written: Mapping[str, Any]) -> Verdict:
    """B1: the event among the first EVENT_DEPTH, with its actor, time, action and outcome."""
    if problem := _refused(answer):
        return problem
    rank = _rank(answer.evidence, target_id)
    first = answer.evidence[0].describe()
    if rank is None:
        return miss(
            F.R2, f"the event is not among the {len(answer.evidence)} results (first: {first})"
        )
    if rank > EVENT_DEPTH:
        return miss(F.R3, f"the event ranked {rank}, below noise (first: {first})")
    hit = answer.evidence[rank - 1]
    for name in EVENT_FIELDS:
        if name not in hit.obj:
            return miss(F.A0, f"the evidence does not say its {name}")
        if not _same_field(name, hit.obj[name], written[name]):
            # the right episode with another value: U0 (a wrong write, W0, reads the same)
            return miss(
                F.U0, f"{name}: expected {shown(written[name])}, got {shown(hit.obj[name])}"
            )
    return CORRECT


def judge_disambiguation(
    answer: Answer, target_id: str, lookalikes: Mapping[str, str], feature: str
) -> Verdict:
    """B2: the episode the question names ranks first among its look-alikes.
    `lookalikes` maps each look-alike's id to its value of the feature."""
    if problem := _refused(answer):
        return problem
    first = answer.evidence[0]
    if first.id == target_id:
        return CORRECT
    rank = _rank(answer.evidence, target_id)
    if first.id in lookalikes:
        what = f"a look-alike ({feature} {lookalikes[first.id]}) ranked first"
    else:
        what = f"{first.describe()} ranked first"
    if rank is not None:
        return miss(F.R3, f"{what}; the one asked about ranked {rank}")
    if first.id in lookalikes:
        return miss(F.R2, f"{what}; the one asked about was not returned")
    return miss(F.R2, f"{what}; the one asked about was not returned")


def judge_synthesis(
    answer: Answer,
    targets: Sequence[str],
    sessions: Mapping[str, str],
    times: Mapping[str, str],
) -> Verdict:
    """B3: every episode of the matter returned, grouped by its own session,
    each group in time order. `targets` are episode ids; `sessions` and
    `times` give each one's session and occurred_at as written."""
    if problem := _refused(answer):
        return problem
    returned = {hit.id for hit in answer.evidence}
    missing = [t for t in targets if t not in returned]
    if missing:
        return miss(
            F.R2,
            f"{len(missing)} of the {len(targets)} episodes were not returned "
            f"(from sessions {', '.join(sorted({sessions[t] for t in missing}))})",
        )
    placed: dict[str, tuple[int, dict[str, Any]]] = {}
    for group in answer.groups:
        for position, member in enumerate(group_members(group)):
            placed.setdefault(member, (position, group))
    for target in targets:
        if target not in placed:
            return miss(F.A0, f"an episode of session {sessions[target]} is in no session group")
        group = placed[target][1]
        if group.get("session_id") != sessions[target]:
            return miss(
                F.U0,
                f"an episode of session {sessions[target]} is grouped under "
                f"{group.get('session_id')!r}",
            )
    for session in sorted(set(sessions.values())):
        own = [t for t in targets if sessions[t] == session]
        by_position = sorted(own, key=lambda t: placed[t][0])
        by_time = sorted(own, key=lambda t: (moment(times[t]), placed[t][0]))
        if by_position != by_time:
            return miss(F.U0, f"session {session}'s episodes are not in time order")
    return CORRECT


def judge_abstain(answer: Answer) -> Verdict:
    """B4 (and suite G's unknowables): no supporting memory, and nothing offered."""
    if problem := recall_refused(answer):
        return problem
    if answer.abstained is True and not answer.evidence:
        return CORRECT
    if answer.abstained is True:
        return miss(
            F.R3, f"abstained but still offered {answer.evidence[0].describe()} as evidence"
        )
    if not answer.evidence:
        # nothing came back, but the answer does not say so: used wrongly, not retrieved wrongly
        return miss(F.U0, "returned no evidence without saying it abstained")
    return miss(
        F.R3,
        f"a false memory: offered {answer.evidence[0].describe()} for what never happened",
    )


def judge_near(answer: Answer, borrowed: Mapping[str, str]) -> Verdict:
    """B5: a never-happened event told in the run's own words; as B4, the only
    right answer is no supporting memory with nothing offered. `borrowed` maps
    the ids of the real episodes the question borrows its words from to what
    they are, to say which one was offered.

    An episode offered is R3 ("a stale or irrelevant memory outranked it"),
    not U0 (DESIGN §9): the decision that failed is retrieval's — the
    evidence score of an episode about something else cleared the
    abstention threshold, so it took the place of "no supporting memory".
    Nothing right was retrieved and then misused; U0 stays for an answer
    that offers nothing and does not say it abstained."""
    verdict = judge_abstain(answer)
    if verdict.ok or not answer.evidence:
        return verdict
    offered = answer.evidence[0]
    if offered.id in borrowed:
        return miss(F.R3, f"{verdict.detail} (the {borrowed[offered.id]} it borrows words from)")
    return verdict


def summarize(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    """event_recall: B1 events found with their details, over every one asked
    (also for the paraphrased ones and the 72 h-old ones alone);
    disambiguation_accuracy: B2's right episode first; synthesis_accuracy: B3
    matters brought back whole and grouped; false_memory_rate: B4 questions
    that did not abstain; near_domain_abstention_rate: B5 questions in the
    seen phrasings that abstained (`_held_out`: in the held-out ones)."""
    planned, correct = counted(outcomes)
    metrics: dict[str, float] = {}

    def rate(metric: str, subset: Sequence[ItemOutcome] | None = None) -> float | None:
        if subset is None:
            total, good = planned[metric], correct[metric]
        else:
            total, good = counted(subset)
            total, good = total[metric], good[metric]
        return good / total if total else None

    def add(name: str, value: float | None) -> None:
        if value is not None:
            metrics[name] = value

    add("event_recall", rate("event"))
    add(
        "paraphrase_event_recall",
        rate("event", [o for o in outcomes if o.metrics.get("form") == "paraphrase"]),
    )
    add("event_recall_72h", rate("event", [o for o in outcomes if o.metrics.get("delay") == "72h"]))
    add("disambiguation_accuracy", rate("disambiguation"))
    add("synthesis_accuracy", rate("synthesis"))
    near = {
        split: [o for o in outcomes if o.metrics.get("split") == split]
        for split in ("seen", "held_out")
    }
    add("near_domain_abstention_rate", rate("near", near["seen"]))
    add("near_domain_abstention_rate_held_out", rate("near", near["held_out"]))
    if planned["abstain"]:
        metrics["false_memory_rate"] = (planned["abstain"] - correct["abstain"]) / planned[
            "abstain"
        ]
    return SuiteSummary(score=pass_rate(outcomes) * 100, metrics=metrics)
