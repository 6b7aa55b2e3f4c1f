"""Models and migrations agree, for every app in the project."""

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_missing_migrations():
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:
        pytest.fail(
            f"models and migrations disagree (exit {exc.code}); run makemigrations:\n{out.getvalue()}"
        )
