"""LoCoMo evidence retrieval: `python manage.py battery locomo --data …/locomo10.json`.

LoCoMo (Maharana et al., ACL 2024) is ten long conversations between two
speakers, each in dated sessions, with questions whose evidence is a list of
turn ids ("D<session>:<turn>"). This module ingests each conversation into its
own throwaway agent — every turn an episode at its session's date — asks every
question within that conversation, and measures evidence recall@k: the fraction
of a question's evidence turns found among the first k results, averaged over
questions, per category and overall. The data is CC BY-NC and is not shipped
with Piper; pass its path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime

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
