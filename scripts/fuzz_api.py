"""Fuzz the whole API with schemathesis, in process, in a database of its own.

    .venv/bin/python scripts/fuzz_api.py [--examples 50] [--random]

Every operation of the OpenAPI schema gets `examples` generated requests
(valid and invalid bodies, queries and path parameters) with a key that has
every scope, against the embedded PostgreSQL (PIPER_DB_NAME, default
piper_fuzz) and Redis. Prints the statuses seen, every 5xx and every body
that does not fit its documented schema; exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

os.environ.setdefault("PIPER_DB_NAME", "piper_fuzz")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _harness import load_average, machine, migrate, setup_django  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=50)
    parser.add_argument("--random", action="store_true", help="new inputs each run")
    args = parser.parse_args()
    setup_django()
    migrate()
    from piper.api.fuzzing import fuzz_api
    from piper.tenancy.models import MAX_RATE_PER_MINUTE, Scope
    from piper.tenancy.services import agent_create, api_key_create

    agent = agent_create(name=f"fuzz-{uuid.uuid4().hex[:8]}", is_throwaway=True)
    # Unthrottled: a 429 would stand in for the answer the generated input deserves.
    _, raw = api_key_create(
        agent=agent,
        name="fuzz",
        scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN),
        rate_per_minute=MAX_RATE_PER_MINUTE,
    )
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {load_average()}", flush=True)
    started = time.perf_counter()
    report = fuzz_api(raw, examples=args.examples, derandomize=not args.random)
    seconds = time.perf_counter() - started
    print(f"# {machine()} · {args.examples} examples per operation; after: {load_average()}")
    print(
        f"{report.operations} operations, {report.requests} requests in {seconds:.0f} s; "
        f"statuses {dict(sorted(report.statuses.items()))}"
    )
    print(f"server errors: {len(report.server_errors)}")
    for line in report.server_errors:
        print("  ", line)
    print(f"schema violations: {len(report.schema_violations)}")
    for line in report.schema_violations:
        print("  ", line)
    return 1 if report.server_errors or report.schema_violations else 0


if __name__ == "__main__":
    sys.exit(main())
