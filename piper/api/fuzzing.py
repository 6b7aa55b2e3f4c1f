"""Property-based requests over the whole OpenAPI schema (schemathesis): every
operation, generated inputs valid and invalid, each answer checked — never a
5xx, and a documented status's body fits its schema. Used in bounded form by
piper/api/tests/test_schema_fuzz.py and in full by scripts/fuzz_api.py."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

SCHEMA_PATH = "/api/schema/?format=json"


@dataclass
class FuzzReport:
    operations: int = 0
    statuses: collections.Counter = field(default_factory=collections.Counter)
    server_errors: list[str] = field(default_factory=list)
    schema_violations: list[str] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(self.statuses.values())


def fuzz_api(api_key: str, *, examples: int, derandomize: bool = True) -> FuzzReport:
    """Send `examples` generated requests to every operation of the API, in
    process (Django's WSGI application), with `api_key` (give it every scope)."""
    import schemathesis
    from django.core.wsgi import get_wsgi_application

    schema = schemathesis.openapi.from_wsgi(SCHEMA_PATH, get_wsgi_application())
    report = FuzzReport()
    headers = {"Authorization": f"Bearer {api_key}"}
    for result in schema.get_all_operations():
        report.operations += 1
        _send_examples(result.ok(), report, headers, examples, derandomize)
    return report


def _send_examples(operation, report: FuzzReport, headers: dict, examples: int, derandomize: bool):
    """One operation's examples, each answer recorded in `report`."""
    from hypothesis import HealthCheck, given, settings
    from schemathesis import checks

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=derandomize,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def send(case):
        response = case.call(headers=headers)
        report.statuses[response.status_code] += 1
        request = f"{operation.label} {case.path_parameters or ''} {case.query or ''}"
        if response.status_code >= 500:
            report.server_errors.append(f"{request} -> {response.status_code}")
            return
        try:
            case.validate_response(response, checks=[checks.response_schema_conformance])
        except BaseException as exc:  # schemathesis raises a failure group
            report.schema_violations.append(f"{request}: {str(exc)[:500]}")

    send()
