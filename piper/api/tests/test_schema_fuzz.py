"""The whole API under generated input: no 5xx, and bodies that fit the schema (issue 18)."""

import pytest

from conftest import make_client
from piper.api.fuzzing import fuzz_api
from piper.tenancy.models import Scope


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_operation_under_generated_input_answers_without_a_server_error():
    client = make_client("agent-fuzz", scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN))
    report = fuzz_api(client.raw_key, examples=3)
    assert report.operations >= 100
    assert report.requests >= 2 * report.operations
    assert report.server_errors == []
    assert report.schema_violations == []
