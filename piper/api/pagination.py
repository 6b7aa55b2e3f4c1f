from rest_framework.pagination import CursorPagination


class SeqCursorPagination(CursorPagination):
    """Opaque cursors over a unique, immutable sequence: stable under concurrent appends."""

    ordering = "seq"
    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 1000
