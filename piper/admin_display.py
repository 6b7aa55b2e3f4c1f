"""Display helpers every app's admin uses."""

from __future__ import annotations

import json

from django.utils.html import format_html


def pretty_json(value) -> str:
    """A JSON value as an indented, wrapped <pre> block (keys sorted) for a read-only field."""
    return format_html(
        '<pre style="white-space: pre-wrap; margin: 0">{}</pre>',
        json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True),
    )
