"""Piper Memory's Python client: `Memory` (blocking) and `AsyncMemory`."""

from . import models
from .client import AsyncMemory, Memory
from .errors import (
    APIConnectionError,
    AuthenticationError,
    Conflict,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    PiperError,
    RateLimited,
    ServerError,
    ServiceUnavailable,
    ValidationError,
)

__all__ = [
    "APIConnectionError",
    "AsyncMemory",
    "AuthenticationError",
    "Conflict",
    "Memory",
    "NotFound",
    "PayloadTooLarge",
    "PermissionDenied",
    "PiperError",
    "RateLimited",
    "ServerError",
    "ServiceUnavailable",
    "ValidationError",
    "models",
]
