"""Oversized and malformed input, in full (issue 18; docs/reliability.md): every
write endpoint from the URL conf gets every raw body (too large, invalid JSON,
deep nesting, wrong content types, invalid UTF-8, NaN, non-objects) and every
field of its valid body every wrong value (each type, huge integers, long
strings, NUL bytes, deep nesting, a long list), then a NUL in every string.

It runs the test module piper/api/tests/test_malformed_input.py with
PIPER_MALFORMED_FULL=1 (the test suite runs a rotating subset) on a test
database of its own, and prints the counts. Exits non-zero on any 5xx, any 4xx
without the error shape or that wrote something.

    .venv/bin/python scripts/chaos/malformed_input.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def main() -> int:
    env = {
        **os.environ,
        "PIPER_MALFORMED_FULL": "1",
        "PIPER_TEST_DB": os.environ.get("PIPER_TEST_DB", "test_piper_malformed"),
    }
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-s",
        "-p",
        "no:cacheprovider",
        "--durations=0",
        "piper/api/tests/test_malformed_input.py",
    ]
    return subprocess.run(command, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
