"""Domain errors. Services raise these; the API's exception handler turns each
into `{"error": {"code", "message", "details"}}` with its HTTP status."""

from __future__ import annotations

from typing import Any


class PiperError(Exception):
    status = 400
    default_code = "invalid"

    def __init__(self, message: str, *, code: str | None = None, details: Any = None):
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details = details if details is not None else {}


class InvalidInput(PiperError):
    status = 400
    default_code = "invalid"


class PermissionDenied(PiperError):
    """Allowed to nobody in the caller's position (not a missing scope: DRF says that)."""

    status = 403
    default_code = "forbidden"


class NotFound(PiperError):
    status = 404
    default_code = "not_found"


class Conflict(PiperError):
    status = 409
    default_code = "conflict"


class Gone(PiperError):
    """It existed, and was erased on purpose: not coming back."""

    status = 410
    default_code = "gone"


class PayloadTooLarge(PiperError):
    status = 413
    default_code = "payload_too_large"


class Unprocessable(PiperError):
    status = 422
    default_code = "unprocessable"
