"""Refuse oversized bodies before anything reads them; answer a database that
cannot serve a request now with 503 and Retry-After."""

from django.conf import settings

from .errors import json_error


class RequestSizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.PIPER_MAX_REQUEST_BYTES
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return json_error("invalid", "Content-Length is not a number", 400)
        if length > limit and request.path.startswith("/api/"):
            return json_error(
                "payload_too_large",
                f"request body is {length} bytes; the limit is {limit} bytes. "
                "Split the batch into smaller requests.",
                413,
                {"limit_bytes": limit, "received_bytes": length},
            )
        return self.get_response(request)


# What a database error means to a client, by SQLSTATE (PostgreSQL appendix A):
# (code, message, seconds to wait before retrying). Anything else is a bug: 500.
# A connection lost as a write committed may have made it (the server committed,
# the acknowledgement never came: scripts/chaos/pg_restart.py saw it), so this one
# does not say "nothing was written": the Idempotency-Key makes the retry safe.
_UNAVAILABLE = (
    "database_unavailable",
    "the database is unavailable right now. Retry shortly with the same Idempotency-Key: "
    "a write cut off as it committed may have been made, and the key answers it once.",
    5,
)
_BUSY = (
    "database_busy",
    "the database could not finish this request in time (a lock, a conflict or the "
    "statement timeout); nothing was written. Retry it.",
    1,
)
_EXHAUSTED = (
    "database_out_of_resources",
    "the database is out of disk, memory or connections; nothing was written. Retry later.",
    30,
)
_BY_SQLSTATE = {
    "08": _UNAVAILABLE,  # connection exception
    "57P": _UNAVAILABLE,  # shutdown, crash, cannot connect now
    "40": _BUSY,  # serialization failure, deadlock
    "55P03": _BUSY,  # lock not available
    "57014": _BUSY,  # query canceled (statement timeout)
    "53": _EXHAUSTED,  # disk full, out of memory, too many connections
}


def database_trouble(exc: BaseException) -> tuple[str, str, int] | None:
    """Is `exc` a database that cannot serve the request now (retry helps), and
    which kind? None for anything else."""
    from django.db import InterfaceError, OperationalError

    if isinstance(exc, InterfaceError):
        return _UNAVAILABLE  # the connection is closed or unusable
    if not isinstance(exc, OperationalError):
        return None
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if sqlstate is None:
        return _UNAVAILABLE  # no server answer at all: the connection failed
    for prefix in sorted(_BY_SQLSTATE, key=len, reverse=True):
        if sqlstate.startswith(prefix):
            return _BY_SQLSTATE[prefix]
    return None


class DatabaseTroubleMiddleware:
    """An API request the database cannot serve right now — down, restarting,
    out of disk, deadlocked, timed out — answers 503 with Retry-After, never
    500: a client (the SDK retries 503) retries it, and every write is
    idempotent. A broken connection is closed here so that the next request
    opens a new one, whatever the request signals do."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exc):
        if not request.path.startswith("/api/"):
            return None
        trouble = database_trouble(exc)
        if trouble is None:
            return None
        from django.db import connections

        for conn in connections.all(initialized_only=True):
            if conn.connection is not None and not conn.is_usable():
                conn.close()
        code, message, retry_after = trouble
        response = json_error(code, message, 503, {"retry_after_seconds": retry_after})
        response["Retry-After"] = str(retry_after)
        return response
