"""The base of every answer model."""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, PrivateAttr


class ApiModel(BaseModel):
    """An answer of the API, typed.

    A field the service adds later is kept, not refused (extra="allow"), so an
    older client keeps working; a field it drops or retypes fails the client's
    schema test (tests/test_schema.py) before it fails a user. Models also read
    like the JSON they came from (`answer["route"]["chosen"]`), for code that
    treats answers as dicts.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    _response: httpx.Response | None = PrivateAttr(default=None)

    @property
    def raw_response(self) -> httpx.Response | None:
        """The HTTP answer this came from (status, headers such as Idempotent-Replayed).
        Set on the model a call returns, not on the models nested inside it."""
        return self._response

    def __getitem__(self, name: str) -> Any:
        for field_name, field in type(self).model_fields.items():
            if field.alias == name:
                name = field_name
        try:
            return getattr(self, name)
        except AttributeError:
            raise KeyError(name) from None
