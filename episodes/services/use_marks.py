"""Use marks: recall feedback that an episode helped, from which its salience decays."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from django.db import connection

from ledger.models import Event
from piper.tenancy.models import Agent

from ..models import Episode

# The recall app's feedback event (it sits above episodes and calls episodes_mark_used);
# a rebuild replays the use marks from these events, so an erased one takes its marks along.
RECALL_FEEDBACK = "recall.feedback"
USE_OUTCOMES = ("success", "partial")


def episodes_mark_used(
    *, agent: Agent, episode_ids: Sequence[uuid.UUID | str], at: datetime
) -> int:
    """Mark this agent's episodes among `episode_ids` as used at `at` (one more use,
    last use at the later of `at` and the one before): their salience decays from
    there (episodes.salience). Other ids — another agent's, a fact's, unknown —
    are ignored. Called with the recall feedback that reports the use, inside its
    transaction; the feedback's ledger event is what a rebuild replays. Returns
    the number of episodes marked."""
    ids = sorted({str(i) for i in episode_ids})
    if not ids:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Episode._meta.db_table} SET use_count = use_count + 1,"
            " last_used_at = greatest(coalesce(last_used_at, %s), %s)"
            " WHERE agent_id = %s AND id::text = ANY(%s::text[])",
            [at, at, agent.pk, ids],
        )
        return cursor.rowcount


# The use marks of a rebuild: every unredacted feedback that used an episode.
_USE_MARKS_SQL = f"""
UPDATE {Episode._meta.db_table} AS t SET use_count = u.uses, last_used_at = u.last_used
  FROM (SELECT ev.agent_id, used.id, count(*) AS uses, max(ev.recorded_at) AS last_used
          FROM {Event._meta.db_table} ev
          CROSS JOIN LATERAL jsonb_array_elements_text(ev.payload->'used') AS used(id)
         WHERE ev.event_type = '{RECALL_FEEDBACK}' AND ev.redacted_at IS NULL
           AND ev.payload->>'outcome' = ANY(%s) {{where}}
         GROUP BY ev.agent_id, used.id) AS u
 WHERE t.agent_id = u.agent_id AND t.id::text = u.id
"""


def replay_use_marks(agent: Agent | None) -> None:
    where, params = ("AND ev.agent_id = %s", [agent.pk]) if agent else ("", [])
    with connection.cursor() as cursor:
        cursor.execute(_USE_MARKS_SQL.format(where=where), [list(USE_OUTCOMES), *params])
