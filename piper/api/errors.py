"""One exception handler: every error is `{"error": {"code", "message", "details"}}`."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from piper.errors import PiperError


def error_body(code: str, message: str, details: Any = None) -> dict:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _first_message(details: Any, path: str = "") -> str:
    """The first leaf of a DRF error tree as 'field.sub: message'."""
    if isinstance(details, dict):
        for key, value in details.items():
            if key == "non_field_errors":
                return _first_message(value, path)
            if str(key).isdigit():
                return _first_message(value, f"{path}[{key}]")
            return _first_message(value, f"{path}.{key}" if path else str(key))
    if isinstance(details, list) and details:
        for index, item in enumerate(details):
            if item:
                nested = isinstance(item, dict | list)
                return _first_message(item, f"{path}[{index}]" if nested else path)
    return f"{path}: {details}" if path else str(details)


def _drf_details(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {k: _drf_details(v) for k, v in detail.items()}
    if isinstance(detail, list):
        return [_drf_details(v) for v in detail]
    return str(detail)


def exception_handler(exc: Exception, context: dict) -> Response | None:
    if isinstance(exc, PiperError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            error_body("payload_too_large", "request body is larger than the service accepts"),
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, RecursionError) and "decoding a JSON" in str(exc):
        # json.loads gives up on deep nesting with a RecursionError, which DRF's
        # parser does not turn into a ParseError.
        return Response(
            error_body("malformed_json", "the request body is nested too deeply to parse"),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, Http404):
        return Response(error_body("not_found", "not found"), status=status.HTTP_404_NOT_FOUND)
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: let Django log it and answer 500

    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(exc.wait))

    if isinstance(exc, exceptions.ValidationError):
        details = _drf_details(exc.detail)
        body = error_body("invalid", _first_message(details), details)
    elif isinstance(exc, exceptions.ParseError):
        body = error_body("malformed_json", f"the request body is not valid JSON: {exc.detail}")
    elif isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        body = error_body("not_authenticated", str(exc.detail))
    elif isinstance(exc, exceptions.Throttled):
        body = error_body(
            "rate_limited",
            f"too many requests for this API key; retry in {int(exc.wait or 1)} s",
            {"retry_after_seconds": int(exc.wait or 1)},
        )
    else:
        codes = exc.get_codes()
        body = error_body(codes if isinstance(codes, str) else exc.default_code, str(exc.detail))
    response = Response(body, status=exc.status_code, headers=headers)
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        response["WWW-Authenticate"] = 'Bearer realm="piper"'
    return response


def json_error(code: str, message: str, http_status: int, details: Any = None) -> JsonResponse:
    """For places outside DRF (middleware, Django's 404/500 handlers)."""
    return JsonResponse(error_body(code, message, details), status=http_status)
