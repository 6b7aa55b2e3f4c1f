"""Erasure in recall's records: the traces that returned erased evidence, and their feedback.

Called by the forgetting app last among the memory apps, when every erased
row's id is in the scope. A trace that names an erased id among what it
considered or returned — or whose question or filters quote erased words —
goes, with the agent's feedback on it; the feedback's ledger event is erased too.
So does a trace filtered by an erased actor's name.
"""

from __future__ import annotations

from django.db import connection

from ledger.erasure import ErasureScope

from .models import RecallFeedback, RetrievalTrace

TRACES = "retrieval_traces"
FEEDBACK = "recall_feedback"

# The ids a trace names: every candidate, the current versions a fact
# candidate resolved to, and every returned piece of evidence.
_NAMING = f"""
SELECT t.id FROM {RetrievalTrace._meta.db_table} t
 WHERE t.agent_id = %(agent)s
   AND (EXISTS (
          SELECT 1 FROM (
              SELECT c->>'id' AS ref FROM jsonb_array_elements(t.candidates) c
              UNION ALL
              SELECT r->>'id' FROM jsonb_array_elements(t.returned) r
              UNION ALL
              SELECT jsonb_array_elements_text(c->'current') FROM jsonb_array_elements(t.candidates) c
               WHERE jsonb_typeof(c->'current') = 'array'
          ) refs WHERE refs.ref IN (SELECT id FROM erasure_row_ids))
        OR t.filters->>'actor' = ANY(%(actors)s::text[])
        OR EXISTS (
          SELECT 1 FROM unnest(%(probes)s::text[]) p
           WHERE strpos(lower(t.query || ' ' || t.filters::text || ' ' || t.candidates::text),
                        lower(p)) > 0))
"""


def _traces_naming(scope: ErasureScope) -> list:
    if not RetrievalTrace.objects.filter(agent=scope.agent).exists():
        return []
    probes = scope.text_probes()
    actors = sorted(scope.actors)
    with connection.cursor() as cursor:
        # Every erased id, events and rows, in a table of this transaction: sent once.
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS erasure_row_ids (id text PRIMARY KEY) ON COMMIT DROP"
        )
        cursor.execute("DELETE FROM erasure_row_ids")
        cursor.execute(
            "INSERT INTO erasure_row_ids SELECT DISTINCT unnest(%s::text[])",
            [sorted(scope.all_removed_ids())],
        )
        cursor.execute(_NAMING, {"agent": scope.agent.pk, "probes": probes, "actors": actors})
        return [row[0] for row in cursor.fetchall()]


def erase(scope: ErasureScope) -> None:
    traces = _traces_naming(scope)
    if not traces:
        return
    feedback = RecallFeedback.objects.filter(agent=scope.agent, trace_id__any=traces)
    scope.add_events(feedback.values_list("source_event_id", flat=True))
    scope.note_removed(FEEDBACK, feedback.values_list("id", flat=True))
    feedback.delete()
    scope.note_removed(TRACES, traces)
    RetrievalTrace.objects.filter(pk__any=traces).delete()


def residue(scope: ErasureScope) -> list[dict]:
    left = _traces_naming(scope)
    feedback = RecallFeedback.objects.filter(
        agent=scope.agent, source_event_id__in=scope.erased_events()
    )
    return [
        {
            "projection": TRACES,
            "check": "names_erased_row_or_words",
            "found": len(left),
            "sample": [str(t) for t in left[:10]],
        },
        {
            "projection": FEEDBACK,
            "check": "made_from_erased_event",
            "found": feedback.count(),
            "sample": [str(f) for f in feedback.values_list("id", flat=True)[:10]],
        },
    ]
