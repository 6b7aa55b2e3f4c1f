"""manage.py consolidate: one agent or all, what each run did, and nothing twice."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from consolidation.models import CandidateFact, ConsolidationRun
from consolidation.tests.factories import said
from piper.tenancy.tests.factories import AgentFactory

pytestmark = pytest.mark.django_db


def run(*args) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("consolidate", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_every_agent_then_nothing_new():
    first, second = AgentFactory(name="first"), AgentFactory(name="second")
    said(first, "Alice Chen moved to Berlin.")
    said(first, "Bob Stone joined Initech.", minutes=1, source_type="third_party")
    out, err = run("--batch-size", "1")
    lines = out.splitlines()
    [r] = ConsolidationRun.objects.filter(agent=first)
    assert lines[0] == (
        f"first: run {r.pk} succeeded: 2 episodes read (1 excluded), 1 candidates proposed, "
        f"1 asserted, in {r.duration_ms} ms"
    )
    assert lines[1] == "second: nothing new to consolidate"
    assert lines[2].startswith("done in ")
    assert "first: 100%" in err and "2/2" in err  # the progress bar
    again, quiet = run("--agent", "first", "--no-progress")
    assert (again.splitlines()[0], quiet) == ("first: nothing new to consolidate", "")
    assert ConsolidationRun.objects.filter(agent=first).count() == 1
    assert CandidateFact.objects.filter(agent=first).count() == 1
    assert not CandidateFact.objects.filter(agent=second).exists()


def test_bad_arguments():
    with pytest.raises(CommandError, match="--batch-size must be at least 1"):
        run("--batch-size", "0")
    with pytest.raises(CommandError):
        run("--agent", "nobody")
