"""JSON rendering for the API: DRF's renderer, plus JSON text rendered elsewhere.

A selector can hand the API a large block of JSON that PostgreSQL has already
rendered, for example a resume's 1,000 intentions. Parsing that block into
Python objects only to serialise it again costs time, and leaves tens of
thousands of objects per request for the garbage collector, which was the
HTTP tail (docs/benchmarks.md, working state). A `RawJSON` value is written
into the response as it is.
"""

from __future__ import annotations

import contextvars
import json
import re
import secrets

from rest_framework import renderers
from rest_framework.utils.encoders import JSONEncoder


class RawJSON:
    """JSON text that goes into a response unchanged. The text must be one valid
    JSON value; it comes from our own SQL (json_agg), never from a client."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def parsed(self):
        """The Python value, for in-process callers."""
        return json.loads(self.text)

    def __repr__(self) -> str:
        return f"RawJSON({len(self.text):,} chars)"


# The values met in the current render, and the random marker standing in for them.
_pending: contextvars.ContextVar[tuple[str, list[RawJSON]] | None] = contextvars.ContextVar(
    "piper_raw_json", default=None
)


class _Encoder(JSONEncoder):
    def default(self, obj):
        if isinstance(obj, RawJSON):
            pending = _pending.get()
            if pending is None:  # json.dumps outside JSONRenderer.render
                return obj.parsed()
            marker, values = pending
            values.append(obj)
            return f"{marker}{len(values) - 1}"
        return super().default(obj)


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSONRenderer; a RawJSON value is written in verbatim.

    json.dumps writes a marker string in each RawJSON's place, and the quoted
    marker is then replaced by the text. The marker holds 128 random bits drawn
    for each render, so data cannot contain it by chance or on purpose.
    """

    encoder_class = _Encoder

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        marker = f"piper-raw-json-{secrets.token_hex(16)}-"
        values: list[RawJSON] = []
        token = _pending.set((marker, values))
        try:
            rendered = super().render(data, accepted_media_type, renderer_context)
        finally:
            _pending.reset(token)
        if not values:
            return rendered
        texts = [value.text.encode() for value in values]
        return re.sub(
            rb'"' + re.escape(marker.encode()) + rb'(\d+)"',
            lambda match: texts[int(match.group(1))],
            rendered,
        )


class PlainTextRenderer(renderers.BaseRenderer):
    """The response's `text` field alone, as text/plain (`?format=text` or
    `Accept: text/plain`): a block ready to paste into a prompt. An error is
    still its JSON body, so a client reading text can show the message."""

    media_type = "text/plain"
    format = "text"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        response = (renderer_context or {}).get("response")
        if response is not None and response.status_code < 400 and isinstance(data, dict):
            return str(data.get("text", "")).encode()
        return json.dumps(data, cls=_Encoder, ensure_ascii=False).encode()
