"""Advisory transaction locks for many keys at once, bounded in number.

PostgreSQL keeps every lock a transaction holds in one shared table of
max_locks_per_transaction x connections slots (6,400 by default, for all
sessions together). A lock per key made a batch of 1,000 fact pairs take 1,000
slots, and a facts rebuild one per pair it replayed, until a concurrent task
failed with "out of shared memory". So the keys of a namespace are spread over
STRIPES locks: a key always takes the same one, so exclusion holds; two keys
that share a stripe merely wait for each other.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import connection

STRIPES = 256  # a power of two: a key's stripe is the low bits of its hash

_LOCK_SQL = f"""
SELECT count(pg_advisory_xact_lock(hashtext(%s), stripe))
  FROM (SELECT DISTINCT (hashtextextended(k, 0) & {STRIPES - 1})::int4 AS stripe
          FROM unnest(%s::text[]) AS k
         ORDER BY 1 OFFSET 0) AS ordered
"""


def advisory_xact_locks(namespace: str, keys: Iterable[str]) -> None:
    """Hold the locks of `keys` within `namespace` (e.g. "facts:<agent id>") until
    the transaction ends: at most STRIPES of them, taken in one statement in
    lock order, so two callers cannot deadlock on them."""
    wanted = sorted(set(keys))
    if not wanted:
        return
    with connection.cursor() as cursor:
        cursor.execute(_LOCK_SQL, [namespace, wanted])
