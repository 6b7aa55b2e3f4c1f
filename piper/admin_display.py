"""Display helpers every app's admin uses."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.utils.html import format_html

# Horizontal bar charts drawn as inline SVG (templates/admin/bar_chart.html):
# the battery's report and the admin's live carry-over page.
LABEL_WIDTH = 200
BAR_AREA = 400
ROW_HEIGHT = 26
BAR_HEIGHT = 18


def preformatted(text: str) -> str:
    """Text as a wrapped <pre> block for a read-only field; "-" when empty."""
    return format_html('<pre style="white-space: pre-wrap; margin: 0">{}</pre>', text or "-")


def pretty_json(value) -> str:
    """A JSON value as an indented, wrapped <pre> block (keys sorted) for a read-only field."""
    return preformatted(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True))


def compact_json(value) -> str:
    """A JSON value on one line, as stored (non-ASCII kept), for list columns and links."""
    return json.dumps(value, ensure_ascii=False)


class EmbeddedFilter(admin.SimpleListFilter):
    """Rows of an embedded-text model (piper.embedded_text) with a vector, or still without."""

    title = "embedded"
    parameter_name = "embedded"

    def lookups(self, request, model_admin):
        return [("yes", "Yes"), ("no", "No: waiting for its vector")]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(embedding__isnull=self.value() == "no")
        return queryset


def bar_chart(rows: list[dict[str, Any]], *, maximum: float) -> dict[str, Any]:
    """Geometry for a horizontal bar chart; rows carry label, value, text and css."""
    bars = []
    for index, row in enumerate(rows):
        width = round(BAR_AREA * row["value"] / maximum, 1) if maximum else 0
        bars.append(
            {
                **row,
                "y": index * ROW_HEIGHT + 4,
                "text_y": index * ROW_HEIGHT + 4 + BAR_HEIGHT - 5,
                "width": width,
                "text_x": LABEL_WIDTH + width + 6,
            }
        )
    return {
        "width": LABEL_WIDTH + BAR_AREA + 80,
        "height": len(rows) * ROW_HEIGHT + 8,
        "label_width": LABEL_WIDTH,
        "label_x": LABEL_WIDTH - 8,
        "bar_area": BAR_AREA,
        "bar_height": BAR_HEIGHT,
        "bars": bars,
    }
