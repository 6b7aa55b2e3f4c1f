"""Running the Memory Battery and storing what it found."""

from __future__ import annotations

import secrets
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from django.db.models.functions import Now

from piper.embedded import VAR_DIR
from piper.errors import InvalidInput
from piper.tenancy.models import Agent, Scope
from piper.tenancy.services import agent_create, agent_deactivate, api_key_create

from .models import BatteryRun, ItemResult
from .registry import ItemOutcome, designed_suites, suites_select
from .report import report_write
from .runner import suite_execute
from .scoring import (
    CRASHED,
    NOT_REGISTERED,
    NOT_SELECTED,
    NOTHING_TO_MEASURE,
    MissingSuite,
    Scorecard,
    SuiteResult,
    score_run,
    suite_result,
)
from .transport import ApiClient, Transport, TransportFailure, transport_open

# The battery must never be throttled by its own traffic.
THROWAWAY_RATE_PER_MINUTE = 1_000_000
REPORTS_DIR = VAR_DIR / "battery"


def throwaway_client_create(*, run: BatteryRun, transport: Transport, number: int) -> ApiClient:
    """A new throwaway agent for this run, with a read/write/admin key, as a client."""
    agent = agent_create(
        name=f"battery-{run.pk.hex[:12]}-{number}",
        description=f"Memory Battery run {run.pk}",
        is_throwaway=True,
    )
    _, raw_key = api_key_create(
        agent=agent,
        name=f"battery run {run.pk}",
        scopes=(Scope.READ, Scope.WRITE, Scope.ADMIN),
        rate_per_minute=THROWAWAY_RATE_PER_MINUTE,
    )
    return ApiClient(transport=transport, agent=agent, raw_key=raw_key)


def throwaway_agents_deactivate(*, agent_ids: Sequence) -> int:
    """Deactivate the run's agents (their ledgers stay). Agents an item rolled
    back no longer exist and are skipped. Returns how many were deactivated."""
    agents = list(Agent.objects.filter(pk__in=list(agent_ids), is_throwaway=True))
    for agent in agents:
        agent_deactivate(agent=agent)
    return len(agents)


class TargetUnusable(Exception):
    """The service cannot be driven at all, so the run is an error, not a score."""


def _preflight(*, client: ApiClient) -> None:
    """The service must answer as the throwaway agent; otherwise no item can mean
    anything (wrong URL, server down, or a server on another database)."""
    try:
        response = client.get("/api/v1/agent")
    except TransportFailure as exc:
        raise TargetUnusable(f"the service did not answer: {exc}") from exc
    name = response.body.get("name") if isinstance(response.body, dict) else None
    if response.status != 200 or name != client.agent.name:
        raise TargetUnusable(
            f"{client.transport.target} did not answer GET /api/v1/agent as {client.agent.name}: "
            f"{response.describe()}"
        )


def item_result_record(*, run: BatteryRun, outcome: ItemOutcome) -> ItemResult:
    return ItemResult.objects.create(
        run=run,
        suite=outcome.suite,
        item=outcome.item,
        title=outcome.title[:300],
        passed=outcome.passed,
        failure_code=outcome.failure_code,
        metrics=outcome.metrics,
        detail=outcome.detail,
        duration_ms=outcome.duration_ms,
    )


def run_finish(*, run: BatteryRun, results: Sequence[SuiteResult], card: Scorecard) -> BatteryRun:
    """Store the scorecard: status failed, incomplete or passed (Scorecard.status)."""
    run.status = BatteryRun.Status(card.status)
    run.score = round(card.total, 2)
    run.uncapped_score = round(card.uncapped_total, 2)
    run.score_of_run = round(card.total_of_run, 2)
    run.suite_scores = {result.code: result.as_dict() for result in results}
    run.missing_suites = {missing.code: missing.as_dict() for missing in card.missing}
    run.metrics = card.metrics
    run.gates = [gate.as_dict() for gate in card.gates]
    run.finished_at = Now()
    run.save(
        update_fields=[
            "status",
            "score",
            "uncapped_score",
            "score_of_run",
            "suite_scores",
            "missing_suites",
            "metrics",
            "gates",
            "finished_at",
        ]
    )
    run.refresh_from_db(fields=["finished_at"])
    return run


def run_error(*, run: BatteryRun, error: str) -> BatteryRun:
    """Mark the run as broken (not a gate failure: the battery itself could not run)."""
    run.status = BatteryRun.Status.ERROR
    run.error = f"{run.error}\n\n{error}".strip()
    run.finished_at = Now()
    run.save(update_fields=["status", "error", "finished_at"])
    run.refresh_from_db(fields=["finished_at"])
    return run


def battery_run(
    *,
    suite_codes: Sequence[str] | None = None,
    seed: int | None = None,
    report_dir: str | Path | None = None,
    base_url: str | None = None,
    on_item: Callable[[ItemOutcome], None] | None = None,
    via: str | None = None,
) -> BatteryRun:
    """Run the suites (every registered one when none are named) and store the run.

    The total is scored over every designed suite (registry.designed_suites):
    one that was not named, is not registered, or crashed outside its items
    counts 0 and is stored in missing_suites with that reason; the suites
    after a crashed one still run, and its traceback goes to the run's error.

    Always returns the stored run, with status passed (every designed suite
    ran and every gate held), failed (a gate did not), incomplete (no gate
    failed, but a designed suite did not run) or error (the battery itself
    broke, e.g. the service was unreachable), and writes report.json and
    report.html into report_dir (default var/battery/<run id>/). Raises
    InvalidInput, before anything is stored, for an unknown suite code.
    """
    suites = suites_select(codes=suite_codes)
    selected = {suite.code for suite in suites}
    designed = designed_suites()
    absent = [
        MissingSuite(
            code=other.code,
            name=other.name,
            weight=other.weight,
            reason=NOT_SELECTED if other.registered else NOT_REGISTERED,
        )
        for other in designed
        if other.code not in selected
    ]
    if not suites:
        raise InvalidInput("no battery suites are registered", code="no_suites")
    seed = secrets.randbelow(2**31) if seed is None else seed
    transport = transport_open(base_url=base_url, via=via)
    try:
        run = BatteryRun.objects.create(
            seed=seed, suites=[suite.code for suite in suites], target=transport.target
        )
    except Exception:
        transport.close()
        raise
    agent_ids: list = []

    def new_client() -> ApiClient:
        client = throwaway_client_create(run=run, transport=transport, number=len(agent_ids) + 1)
        agent_ids.append(client.agent.pk)
        return client

    try:
        primary = new_client()
        run.agent_name = primary.agent.name
        run.save(update_fields=["agent_name"])
        _preflight(client=primary)
        results = []
        for suite in suites:
            outcomes = []
            try:
                nothing = suite.unavailable() if suite.unavailable else None
                if nothing:
                    absent.append(
                        MissingSuite(
                            code=suite.code,
                            name=suite.name,
                            weight=suite.weight,
                            reason=NOTHING_TO_MEASURE,
                            detail=nothing[:500],
                        )
                    )
                    continue
                for outcome in suite_execute(
                    suite=suite, seed=seed, run_id=run.pk, client=primary, new_client=new_client
                ):
                    item_result_record(run=run, outcome=outcome)
                    outcomes.append(outcome)
                    if on_item is not None:
                        on_item(outcome)
                results.append(suite_result(suite=suite, outcomes=outcomes))
            except Exception as exc:
                absent.append(
                    MissingSuite(
                        code=suite.code,
                        name=suite.name,
                        weight=suite.weight,
                        reason=CRASHED,
                        detail=f"{type(exc).__name__}: {exc}"[:500],
                    )
                )
                crash = f"suite {suite.code} crashed:\n{traceback.format_exc()}"
                run.error = f"{run.error}\n\n{crash}".strip()
                run.save(update_fields=["error"])
        card = score_run(results, designed=designed, absent=absent)
        run_finish(run=run, results=results, card=card)
    except TargetUnusable as exc:
        run_error(run=run, error=str(exc))
    except Exception:
        run_error(run=run, error=traceback.format_exc())
    finally:
        transport.close()
        throwaway_agents_deactivate(agent_ids=agent_ids)

    directory = Path(report_dir) if report_dir else REPORTS_DIR / str(run.pk)
    try:
        report_write(run=run, directory=directory)
    except Exception:
        return run_error(
            run=run, error=f"the report could not be written:\n{traceback.format_exc()}"
        )
    run.report_dir = str(directory.resolve())
    run.save(update_fields=["report_dir"])
    return run
