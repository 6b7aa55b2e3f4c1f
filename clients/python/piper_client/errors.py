"""Errors in the client's own terms: each carries the API's code and message."""

from __future__ import annotations

from typing import Any

import httpx


class PiperError(Exception):
    """An answer the API refused, or no answer at all."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        details: Any = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}" if status else message)
        self.message, self.status, self.code = message, status, code
        self.details, self.response = details, response


class APIConnectionError(PiperError):
    """No answer: connection refused or reset, or the call timed out (after retries)."""


class ValidationError(PiperError):
    """400 / 422: bad input; `details` names the fields. Nothing was written."""


class AuthenticationError(PiperError):
    """401: the key is unknown or revoked."""


class PermissionDenied(PiperError):
    """403: the key lacks the scope."""


class NotFound(PiperError):
    """404: not this agent's, or not there (the API does not tell them apart)."""


class Conflict(PiperError):
    """409: a stale version, a transition that is not allowed, a duplicate."""


class PayloadTooLarge(PiperError):
    """413."""


class RateLimited(PiperError):
    """429, after the retries: slow down (`retry_after` seconds)."""

    @property
    def retry_after(self) -> float | None:
        return _retry_after(self.response)


class ServiceUnavailable(PiperError):
    """503, after the retries: the service or its database is down for now."""


class ServerError(PiperError):
    """Any other 5xx."""


_BY_STATUS: dict[int, type[PiperError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    422: ValidationError,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_for(response: httpx.Response) -> PiperError:
    """The typed error for a non-2xx answer, from the API's error body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    status = response.status_code
    kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else PiperError)
    return kind(
        error.get("message") or response.text[:500] or response.reason_phrase,
        status=status,
        code=error.get("code"),
        details=error.get("details"),
        response=response,
    )


def _retry_after(response: httpx.Response | None) -> float | None:
    if response is None:
        return None
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None
