"""`battery run` drives the service through its API and scores it; `battery list` shows the suites."""

import argparse

from django.core.management.base import BaseCommand, CommandError

from battery.models import BatteryRun
from battery.registry import ItemOutcome, suite_list
from battery.scoring import MISSING_REASONS
from battery.services import battery_run
from piper.errors import PiperError

# Exit codes of `battery run`.
EXIT_GATE_FAILED = 1  # a gate failed, or the run itself broke (status failed or error)
EXIT_INCOMPLETE = 2  # no gate failed, but a suite the run was asked for did not run

RUN_HELP = """run suites, store the run, write JSON and HTML reports.

The total counts every designed suite: one that did not run counts 0 and the
run is 'incomplete', never 'passed'; the score of the suites that ran is shown
beside it. Exit status: 0 when every suite asked for ran and every gate held
(a run restricted with --suite is 'incomplete' and exits 0 when its own
suites pass); 1 when a gate failed or the run broke; 2 when no gate failed but
a suite asked for did not run (it crashed, it had nothing to measure — suite
H with no live use in its window — or, without --suite, a designed suite is
not registered)."""


class Command(BaseCommand):
    help = (
        "Run the Memory Battery (DESIGN.md §9), or list its suites. `battery run` exits 1 when "
        "a gate fails, 2 when a suite it was asked for did not run (see `battery run --help`)."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{run,list,locomo}")
        run = actions.add_parser(
            "run",
            help="run suites, store the run, write JSON and HTML reports",
            description=RUN_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        run.add_argument(
            "--suite",
            action="append",
            dest="suites",
            metavar="CODE",
            help="suite code to run (repeatable, or comma-separated); default: every suite. "
            "The others count 0 in the total and the run is 'incomplete'",
        )
        run.add_argument("--seed", type=int, help="seed of the reference agent (default: random)")
        run.add_argument(
            "--report",
            dest="report_dir",
            metavar="DIR",
            help="report directory (default: var/battery/<run id>/)",
        )
        run.add_argument(
            "--base-url",
            metavar="URL",
            help="drive a running server over HTTP (default: in-process, full WSGI stack)",
        )
        run.add_argument(
            "--transport",
            choices=("direct", "sdk"),
            default="direct",
            help="sdk: send every request through the Python SDK (piper_client), in process "
            "or to --base-url",
        )
        actions.add_parser("list", help="list the registered suites")
        locomo = actions.add_parser(
            "locomo",
            help="LoCoMo evidence recall@5/@10 per category (battery/locomo.py); stored as a run",
        )
        locomo.add_argument("--data", required=True, metavar="PATH", help="locomo10.json")
        locomo.add_argument(
            "--conversations", type=int, metavar="N", help="only the first N conversations"
        )
        locomo.add_argument(
            "--limit-questions",
            type=int,
            metavar="N",
            help="at most N questions of each conversation",
        )
        locomo.add_argument(
            "--through",
            choices=("search", "recall"),
            default="search",
            help="episode_search with abstention off (default), or recall's what_happened route",
        )

    def handle(self, *args, action, **options):
        if action == "list":
            return self._list()
        if action == "locomo":
            return self._locomo(**options)
        return self._run(**options)

    def _locomo(self, *, data, conversations, limit_questions, through, **options) -> None:
        from battery.locomo import TARGET_R10, locomo_run, summary_table

        try:
            run, summary = locomo_run(
                data=data,
                conversations=conversations,
                limit_questions=limit_questions,
                through=through,
                on_progress=lambda line: self.stdout.write(f"  {line}"),
            )
        except PiperError as exc:
            raise CommandError(exc.message) from exc
        for line in summary_table(summary):
            self.stdout.write(line)
        r10 = summary.overall["r10"]
        verdict = self.style.SUCCESS("pass") if r10 >= TARGET_R10 else self.style.ERROR("below")
        self.stdout.write(
            f"battery run {run.pk}: overall R@10 {r10:.3f} {verdict} (target {TARGET_R10:g})"
        )

    def _list(self) -> None:
        self.stdout.write(f"{'suite':<6}{'weight':>7}{'gate':>7}{'items':>7}  name")
        for suite in suite_list():
            self.stdout.write(
                f"{suite.code:<6}{suite.weight:>7g}{suite.gate:>7.0%}{suite.item_count():>7}  {suite.name}"
            )
            self.stdout.write(f"{'':<6}{suite.description}")
            for gate in suite.metric_gates:
                self.stdout.write(f"{'':<6}gate: {gate.name}")

    def _run(self, *, suites, seed, report_dir, base_url, transport, **options) -> None:
        codes = [code for value in suites or [] for code in value.split(",") if code.strip()]
        try:
            run = battery_run(
                suite_codes=codes,
                seed=seed,
                report_dir=report_dir,
                base_url=base_url,
                on_item=self._progress,
                via=transport,
            )
        except PiperError as exc:
            raise CommandError(exc.message) from exc
        self._summary(run)
        if run.status == BatteryRun.Status.ERROR:
            raise CommandError(f"battery run {run.pk} could not complete; see its error above")
        if run.status == BatteryRun.Status.FAILED:
            # A cap that failed closed for want of a suite that did not run is not the failure.
            failed = ", ".join(
                gate["name"]
                for gate in run.gates
                if not gate["passed"] and not (gate.get("fail_closed") and run.missing_suites)
            )
            raise CommandError(
                f"battery run {run.pk} failed its gates: {failed}", returncode=EXIT_GATE_FAILED
            )
        # Without --suite every designed suite was asked for; with it, only those named.
        unrun = [code for code in run.missing_suites if not codes or code in run.suites]
        if run.status == BatteryRun.Status.INCOMPLETE and unrun:
            raise CommandError(
                f"battery run {run.pk} is incomplete: {self._missing(run, unrun)}",
                returncode=EXIT_INCOMPLETE,
            )

    def _progress(self, outcome: ItemOutcome) -> None:
        if outcome.generator and outcome.passed:
            return  # hundreds of generated items: their failures and the totals say enough
        verdict = (
            self.style.SUCCESS("pass")
            if outcome.passed
            else self.style.ERROR(f"FAIL {outcome.failure_code}")
        )
        self.stdout.write(
            f"  {outcome.suite}.{outcome.item:<32} {verdict}  {outcome.duration_ms:8.1f} ms"
        )
        if not outcome.passed:
            self.stdout.write(f"      {outcome.detail.splitlines()[-1] if outcome.detail else ''}")

    @staticmethod
    def _missing(run: BatteryRun, codes) -> str:
        reasons = []
        for code in codes:
            missing = run.missing_suites[code]
            reasons.append(f"{code} {MISSING_REASONS.get(missing['reason'], missing['reason'])}")
        return ", ".join(reasons)

    def _summary(self, run: BatteryRun) -> None:
        write = self.stdout.write
        write("")
        write(f"{'suite':<6}{'name':<28}{'weight':>7}{'items':>7}{'passed':>8}{'score':>8}  gate")
        rows = {**run.suite_scores, **run.missing_suites}
        for code, suite in sorted(rows.items()):
            if code in run.missing_suites:
                reason = MISSING_REASONS.get(suite["reason"], suite["reason"])
                write(
                    f"{code:<6}{suite['name'][:27]:<28}{suite['weight']:>7g}{'—':>7}{'—':>8}"
                    f"{0:>8.1f}  {self.style.WARNING(f'did not run ({reason}): counts 0')}"
                )
                continue
            gate = self.style.SUCCESS("pass") if suite["gate_passed"] else self.style.ERROR("FAIL")
            write(
                f"{code:<6}{suite['name'][:27]:<28}{suite['weight']:>7g}{suite['items']:>7}"
                f"{suite['passed']:>8}{suite['score']:>8.1f}  {gate} (>= {suite['gate']:.0%})"
            )
        for gate in run.gates:
            if gate["kind"] in ("metric", "cap"):
                if gate["passed"]:
                    verdict = self.style.SUCCESS("pass")
                elif gate.get("fail_closed") and run.missing_suites:
                    # Unmeasured because suites did not run: the run is incomplete, not failed.
                    verdict = self.style.WARNING("not measured")
                else:
                    verdict = self.style.ERROR("FAIL")
                write(f"{gate['name']}: {verdict} ({gate['detail']})")
        score = "—" if run.score is None else f"{run.score:.2f}"
        status = (
            self.style.SUCCESS(run.status)
            if run.status == BatteryRun.Status.PASSED
            else self.style.WARNING(run.status)
            if run.status == BatteryRun.Status.INCOMPLETE
            else self.style.ERROR(run.status)
        )
        if run.missing_suites and run.score_of_run is not None:
            ran = ", ".join(sorted(run.suite_scores)) or "none"
            write(
                f"total {score} over every designed suite, {len(run.missing_suites)} of which "
                f"did not run and count 0 ({', '.join(sorted(run.missing_suites))})"
            )
            write(
                f"score of the suites that ran ({ran}): {run.score_of_run:.2f}"
                " (not the battery's total)"
            )
        write(
            f"total {score}   status {status}   seed {run.seed}   target {run.target}   agent {run.agent_name}"
        )
        if run.error:
            write(self.style.ERROR(run.error))
        if run.report_dir:
            write(f"report: {run.report_dir}/report.html")
