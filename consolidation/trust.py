"""Which episodes consolidation may learn from (DESIGN.md §8: contamination safety).

Consolidation asserts what it finds as `agent_inference` facts, which rank
above `third_party`. So material from a low-trust source must never feed it,
however often it repeats or however similar it is to trusted material:

* episodes whose text is instruction-like (piper.safety, flagged at write time);
* episodes from a third party or a document (source type or authority);
* episodes that read a registered document (source_id set): what they say may
  be the document's words;
* tool results that quote outside text — a URL, a quotation, a block quote,
  "according to …", "the page says …": a web page relayed by a tool is a third
  party speaking through a trusted channel.

`exclusion(episode)` names the first reason that applies, or None;
`trace_exclusion(trace)` does the same for a skill trace (candidate skills).
"""

from __future__ import annotations

import re

from piper.provenance import Authority, SourceType

LOW_TRUST_SOURCES = frozenset({SourceType.THIRD_PARTY, SourceType.DOCUMENT})
LOW_TRUST_AUTHORITIES = frozenset({Authority.THIRD_PARTY})

_OUTSIDE_TEXT = re.compile(
    r"https?://|\bwww\.[a-z0-9\-]+\.|"
    r"[\"“«][^\"”»]{12,}[\"”»]|(?:^|\n)\s*>|"
    r"\baccording to\b|"
    r"\b(?:the\s+)?(?:page|site|website|article|post|blog|email|e-mail|message|document|"
    r"review|reviews|forum|thread|tweet|search results?|snippet|result|readme|wiki)\s+"
    r"(?:says|said|reads|read|states|stated|claims|claimed|mentions|mentioned|reports|"
    r"reported|contains|contained|shows|showed)\b|"
    r"\b(?:search results?|scraped|crawled|fetched|retrieved|quoted|excerpt)\b",
    re.I,
)


def quotes_outside_text(*texts: str) -> bool:
    return any(_OUTSIDE_TEXT.search(t) for t in texts if t)


def exclusion(episode) -> str | None:
    """Why an episode must not feed consolidation, or None if it may."""
    if episode.instruction_like:
        return "instruction_like"
    if episode.source_type in LOW_TRUST_SOURCES or episode.authority in LOW_TRUST_AUTHORITIES:
        return "low_trust_source"
    if episode.source_id is not None:
        return "reads_a_document"
    if episode.source_type == SourceType.TOOL_RESULT and quotes_outside_text(
        episode.summary, episode.action, episode.observation
    ):
        return "tool_result_quotes_outside_text"
    return None


def trace_exclusion(trace) -> str | None:
    """Why a skill trace must not feed a candidate skill, or None if it may: only a
    verified success from a trusted source, with no instruction-like text."""
    if not trace.succeeded:
        return "not_successful"
    if not trace.verified:
        return "unverified"
    if trace.instruction_like:
        return "instruction_like"
    if trace.source_type in LOW_TRUST_SOURCES:
        return "low_trust_source"
    if trace.source_type == SourceType.TOOL_RESULT and quotes_outside_text(trace.task):
        return "tool_result_quotes_outside_text"
    return None
