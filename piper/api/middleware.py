"""Refuse oversized bodies before anything reads them."""

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
