"""Reading a request's input through a serializer, the same way in every app."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter

from piper.errors import InvalidInput

from .idempotency import HEADER

# The header every write endpoint documents (piper.api.idempotency does the work).
IDEMPOTENCY_KEY = OpenApiParameter(
    HEADER,
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="A retry with the same key returns the first answer and writes nothing.",
)


def require_json_object(body, message: str = "send a JSON object") -> None:
    if not isinstance(body, dict):
        raise InvalidInput(message, details={"body": ["expected a JSON object"]})


def query_data(serializer_class, request) -> dict:
    """The query string, validated (400 with every field's problem)."""
    params = serializer_class(data={k: v for k, v in request.query_params.items()})
    params.is_valid(raise_exception=True)
    return params.validated_data


def body_data(serializer_class, request) -> dict:
    """The JSON object body, validated (400 for anything else)."""
    require_json_object(request.data)
    params = serializer_class(data=request.data)
    params.is_valid(raise_exception=True)
    return params.validated_data
