"""Consolidation measured on a generated world (consolidation/tests/consolidation_eval.py).

Each split records its episodes through episodes_record and runs consolidate();
the asserted candidates are scored against the ground truth. Distractors —
negations, questions, plans, reported speech, old values, third-party and
document sources, tool results relaying web pages, instruction-like text —
must never be asserted. The dev phrasings were developed against; the held-out
ones were written apart and include shapes the extractor has no rule for:
recall there is 0.725, under the 0.80 aimed for, at precision 1.0.

    pytest consolidation/tests/test_evaluation.py -s   # prints the figures
"""

import pytest

from consolidation.models import CandidateFact
from consolidation.services import consolidate
from consolidation.tests import consolidation_eval as ce
from episodes.services import EpisodeDraft, episodes_record
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def run_world(split: str):
    world = ce.generate(split)
    agent = AgentFactory(name=f"eval-{split}")
    episodes_record(agent=agent, drafts=[EpisodeDraft(**g.fields) for g in world.episodes])
    run = consolidate(agent=agent)
    asserted = list(
        CandidateFact.objects.filter(agent=agent, status="asserted").values_list(
            "subject", "predicate", "value"
        )
    )
    return world, run, asserted


@pytest.mark.parametrize(
    ("split", "expected"),
    [
        ("dev", ce.Score(truths=120, asserted=120, correct=120)),
        ("held_out", ce.Score(truths=120, asserted=87, correct=87)),
    ],
)
def test_precision_and_recall(split, expected):
    world, run, asserted = run_world(split)
    score = ce.score(world, set(asserted))
    print(
        f"\n{split}: {len(world.episodes)} episodes, {score.truths} true claims, "
        f"{score.asserted} asserted, precision {score.precision:.3f}, "
        f"recall {score.recall:.3f}, run {run.duration_ms} ms, excluded {run.details['excluded']}"
    )
    assert score == expected
    assert score.precision >= 0.95
    # Nothing a distractor said became a fact: their subjects are never a truth's.
    distractor_subjects = {ce.norm(s) for g in world.episodes for s in g.subjects}
    assert len(distractor_subjects) > 100
    assert {ce.norm(s) for s, _, _ in asserted} & distractor_subjects == set()
    assert (
        run.details["excluded"]
        == {
            "dev": {
                "instruction_like": 12,
                "low_trust_source": 20,
                "tool_result_quotes_outside_text": 16,
            },
            "held_out": {
                "instruction_like": 12,
                "low_trust_source": 20,
                "tool_result_quotes_outside_text": 17,
            },
        }[split]
    )
