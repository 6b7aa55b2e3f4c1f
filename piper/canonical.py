"""Canonical JSON and hashing: one spelling of a value, so equal values hash equal."""

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def json_hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))
