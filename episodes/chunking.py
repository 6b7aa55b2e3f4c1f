"""Splitting a document into passages: paragraph- and sentence-aware, exact spans.

`split(text)` returns `Span(start, end)`s with `text[start:end]` the passage
(no leading or trailing whitespace), in document order, each at most
`TARGET_CHARS` long. Passages are packed from whole sentences; a paragraph
that does not fit in what is left of a passage starts a new one, and within a
paragraph each passage repeats the last sentence(s) of the one before (up to
`OVERLAP_CHARS`) so that a sentence is never only cut in half. A sentence
longer than a passage is cut at whitespace (or, with none, anywhere).

The result depends only on the text and these constants: `CHUNKER` names
them, and the `source.chunked` ledger event records the spans it produced, so
a replay rebuilds the same passages even after the constants change.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TARGET_CHARS = 800
OVERLAP_CHARS = 150
# A passage at least this long ends at a paragraph break rather than split the next one.
MIN_BREAK_CHARS = TARGET_CHARS // 4
CHUNKER = f"paragraph-sentence/{TARGET_CHARS}/{OVERLAP_CHARS}"

# A blank line (possibly holding whitespace) ends a paragraph.
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n\s*")
# A sentence ends after . ! ? (and any closing quotes/brackets) before whitespace, or at a
# line break: lists, headings and code have no full stops.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+|\n\s*")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Span:
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class _Unit:
    start: int
    end: int
    paragraph: int


def _stripped(text: str, start: int, end: int) -> tuple[int, int] | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return (start, end) if start < end else None


def _pieces(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """[start, end) cut into pieces of at most `limit`, at whitespace where there is some."""
    pieces = []
    while end - start > limit:
        cut = start + limit
        gap = None
        for match in _WHITESPACE.finditer(text, start + 1, cut + 1):
            gap = match
        if gap is not None and gap.start() > start:
            pieces.append((start, gap.start()))
            start = gap.end()
        else:
            pieces.append((start, cut))
            start = cut
        while start < end and text[start].isspace():
            start += 1
    if start < end:
        pieces.append((start, end))
    return pieces


def _units(text: str) -> list[_Unit]:
    """Sentences (or pieces of over-long ones), each tagged with its paragraph."""
    units: list[_Unit] = []
    paragraph_start = 0
    breaks = [m for m in _PARAGRAPH_BREAK.finditer(text)] + [None]
    for paragraph, brk in enumerate(breaks):
        paragraph_end = brk.start() if brk else len(text)
        sentence_start = paragraph_start
        ends = [m for m in _SENTENCE_END.finditer(text, paragraph_start, paragraph_end)]
        for m in [*ends, None]:
            sentence_end = m.start() if m else paragraph_end
            span = _stripped(text, sentence_start, sentence_end)
            if span:
                for start, end in _pieces(text, *span, TARGET_CHARS):
                    units.append(_Unit(start, end, paragraph))
            if m:
                sentence_start = m.end()
        if brk:
            paragraph_start = brk.end()
    return units


def split(text: str) -> list[Span]:
    """The passages of `text`, as exact spans (see the module docstring)."""
    units = _units(text)
    spans: list[Span] = []
    i = 0
    while i < len(units):
        first = i
        j = i + 1
        while j < len(units):
            unit = units[j]
            if unit.end - units[first].start > TARGET_CHARS:
                break
            if (
                unit.paragraph != units[j - 1].paragraph
                and units[j - 1].end - units[first].start >= MIN_BREAK_CHARS
            ):
                # A new paragraph starts a new passage unless all of it fits (a heading
                # or a one-line paragraph stays with what follows).
                last = j
                while last + 1 < len(units) and units[last + 1].paragraph == unit.paragraph:
                    last += 1
                if units[last].end - units[first].start > TARGET_CHARS:
                    break
            j += 1
        spans.append(Span(units[first].start, units[j - 1].end))
        if j >= len(units):
            break
        # Overlap: the next passage repeats the trailing sentences of this one that fit
        # in OVERLAP_CHARS, within the same paragraph, leaving room for something new.
        k = j
        while (
            k - 1 > first
            and units[k - 1].paragraph == units[j].paragraph
            and units[j - 1].end - units[k - 1].start <= OVERLAP_CHARS
            and units[j].end - units[k - 1].start <= TARGET_CHARS
        ):
            k -= 1
        i = k
    return spans
