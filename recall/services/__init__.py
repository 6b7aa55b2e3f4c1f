"""Recall: classify the need, ask the right memory through its selectors, trace it.

`recall` answers one question from one route's store — facts (current
values, via the fact texts that propose candidates and the facts selectors
that decide what is current), episodes and source chunks (hybrid retrieval
with abstention), skills (matching), intentions (open commitments) or the
fact graph (paths) — and writes one RetrievalTrace. Every evidence item
carries a `memory_status`: source, age_seconds, authority, currentness
(current / superseded / contested / n/a) and confidence, plus what its kind
adds. A superseded fact is never presented as current.

`recall_feedback` records the agent's word on a trace, with a
`recall.feedback` ledger event in the same transaction.
"""

from .context import ContextBlock, ContextRequest, context_assemble, render_text
from .dispatch import group_by_session, recall
from .feedback import MAX_NOTE_CHARS, recall_feedback
from .inputs import MAX_LIMIT, RecallFilters
from .results import Answer, Evidence, RecallResult
from .telemetry import look_decision_record, read_trace_record

__all__ = [
    "MAX_LIMIT",
    "MAX_NOTE_CHARS",
    "Answer",
    "ContextBlock",
    "ContextRequest",
    "Evidence",
    "RecallFilters",
    "RecallResult",
    "context_assemble",
    "group_by_session",
    "look_decision_record",
    "read_trace_record",
    "recall",
    "recall_feedback",
    "render_text",
]
