from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination

from piper.errors import InvalidInput


class StrictCursorPagination(CursorPagination):
    """Opaque cursors over a unique, immutable ordering: stable under concurrent appends.

    Subclasses name the ordering; a bad cursor is a 400, not DRF's 404.
    """

    page_size = 100
    page_size_query_param = "limit"
    max_page_size = 1000

    def decode_cursor(self, request):
        # DRF answers a bad cursor with 404, as if the list did not exist: it is bad input.
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise InvalidInput(
                "cursor is not one this API issued: follow the 'next' or 'previous' link as given",
                code="invalid_cursor",
                details={"cursor": ["invalid cursor"]},
            ) from None


class SeqCursorPagination(StrictCursorPagination):
    ordering = "seq"


class NewestIdCursorPagination(StrictCursorPagination):
    """Newest first by a time-ordered (UUIDv7) primary key."""

    ordering = "-id"
