"""The returned hits, loaded whole once the fused order is known.

Candidates carry only their key columns; only the `limit` that are shown are
read in full, in one statement. A collapsed duplicate is answered by its
canonical episode (consolidation.duplicates), so a group shows once.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from django.db import connection

from piper.db import server_bound_cursor

from .fusion import _Candidate
from .plan import _attnames, _positions, _Spec
from .types import Hit


def _full_rows(spec: _Spec, cands: list[_Candidate]) -> list[tuple[_Candidate, Any]]:
    """Each candidate with its row as a model instance, every column loaded
    (the candidates carry only spec.key_columns): one statement for all, its
    rows in binary, which load faster than text (docs/benchmarks.md)."""
    if not cands:
        return []
    columns = ", ".join(f"e.{c}" for c in spec.columns)
    with server_bound_cursor(binary=True) as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {spec.table} e WHERE e.id = ANY(%s::uuid[]) AND {spec.live}",
            [[c.obj.pk for c in cands]],
        )
        rows = cursor.fetchall()
    attnames = _attnames(spec.model, spec.columns)
    id_at = spec.columns.index("id")
    by_id = {row[id_at]: row for row in rows}
    out = []
    for c in cands:
        if c.obj.pk not in by_id:
            # deleted (a purge) or withdrawn since the search read it: not an answer any more
            continue
        obj = spec.model.from_db(connection.alias, attnames, by_id[c.obj.pk])
        obj.embedded = c.embedded  # as the selectors annotate it (the vector is not loaded)
        out.append((c, obj))
    return out


def _canonical_hits(spec: _Spec, cands: list[_Candidate], limit: int) -> list[Hit]:
    """The best `limit` candidates as hits, a collapsed duplicate answered by its
    canonical episode (once, at the duplicate's rank; signal `duplicate_of`). With no
    duplicate among them — almost always — this is exactly _full_rows over the first
    `limit`, and costs no statement more; a group that collapsed makes room, filled
    from the next candidates."""
    hits: list[Hit] = []
    shown: set = set()
    start = 0
    while len(hits) < limit and start < len(cands):
        chunk = cands[start : start + limit - len(hits)]
        start += len(chunk)
        loaded = _full_rows(spec, chunk)
        wanted = {obj.canonical_id for _, obj in loaded if obj.canonical_id is not None}
        canonical = _episodes_by_id(spec, wanted) if wanted else {}
        merged = False
        for c, obj in loaded:
            signals = c.signals
            if obj.canonical_id is not None and obj.canonical_id in canonical:
                answer = canonical[obj.canonical_id]
                signals = {**c.signals, "duplicate_of": str(answer.pk)}
                signals["collapsed_hit"] = str(obj.pk)
                obj = answer
            if obj.pk in shown:
                merged = True
                continue
            shown.add(obj.pk)
            hits.append(Hit(spec.kind, obj, round(c.score, 6), signals))
        if not merged:
            break  # nothing collapsed: what _full_rows kept is the answer, as before
    return hits


def _episodes_by_id(spec: _Spec, ids: set) -> dict:
    """{canonical episode id: the version that answers for its group}, every column but
    the search columns. A corrected canonical answers with the version that corrects it
    (its last correction): its duplicates repeated what it said, and a correction of
    what the search showed for them all is not to be undone by a copy of the old text.
    A retracted one (or one whose last correction was retracted) is not among them: its
    duplicates answer for themselves."""
    columns = ", ".join(f"e.{c}" for c in spec.columns)
    with server_bound_cursor(binary=True) as cursor:
        cursor.execute(
            f"WITH RECURSIVE v(asked, id, next) AS ("
            f" SELECT o.id, o.id, o.superseded_by FROM {spec.table} o"
            f"  WHERE o.id = ANY(%s::uuid[])"
            f" UNION ALL"
            f" SELECT v.asked, n.id, n.superseded_by FROM v JOIN {spec.table} n ON n.id = v.next)"
            f" SELECT v.asked, {columns}, e.embedding IS NOT NULL AS embedded"
            f" FROM v JOIN {spec.table} e ON e.id = v.id"
            f" WHERE v.next IS NULL AND {spec.live}",
            [list(ids)],
        )
        rows = cursor.fetchall()
        at = _positions(cursor)
    attnames = _attnames(spec.model, spec.columns)
    values_of = itemgetter(*(at[c] for c in spec.columns))
    found = {}
    for row in rows:
        obj = spec.model.from_db(connection.alias, attnames, values_of(row))
        obj.embedded = row[at["embedded"]]
        found[row[at["asked"]]] = obj
    return found
