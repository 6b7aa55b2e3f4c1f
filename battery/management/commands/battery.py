"""`battery run` drives the service through its API and scores it; `battery list` shows the suites."""

from django.core.management.base import BaseCommand, CommandError

from battery.models import BatteryRun
from battery.registry import ItemOutcome, suite_list
from battery.services import battery_run
from piper.errors import PiperError


class Command(BaseCommand):
    help = "Run the Memory Battery (DESIGN.md §9), or list its suites. Exits 1 when a gate fails."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="{run,list,locomo}")
        run = actions.add_parser(
            "run", help="run suites, store the run, write JSON and HTML reports"
        )
        run.add_argument(
            "--suite",
            action="append",
            dest="suites",
            metavar="CODE",
            help="suite code to run (repeatable, or comma-separated); default: every suite",
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
        if run.status != BatteryRun.Status.PASSED:
            failed = ", ".join(gate["name"] for gate in run.gates if not gate["passed"])
            raise CommandError(f"battery run {run.pk} failed its gates: {failed}")

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

    def _summary(self, run: BatteryRun) -> None:
        write = self.stdout.write
        write("")
        write(f"{'suite':<6}{'name':<28}{'weight':>7}{'items':>7}{'passed':>8}{'score':>8}  gate")
        for code, suite in sorted(run.suite_scores.items()):
            gate = self.style.SUCCESS("pass") if suite["gate_passed"] else self.style.ERROR("FAIL")
            write(
                f"{code:<6}{suite['name'][:27]:<28}{suite['weight']:>7g}{suite['items']:>7}"
                f"{suite['passed']:>8}{suite['score']:>8.1f}  {gate} (>= {suite['gate']:.0%})"
            )
        for gate in run.gates:
            if gate["kind"] in ("metric", "cap"):
                verdict = self.style.SUCCESS("pass") if gate["passed"] else self.style.ERROR("FAIL")
                write(f"{gate['name']}: {verdict} ({gate['detail']})")
        score = "—" if run.score is None else f"{run.score:.2f}"
        status = (
            self.style.SUCCESS(run.status)
            if run.status == BatteryRun.Status.PASSED
            else self.style.ERROR(run.status)
        )
        write(
            f"total {score}   status {status}   seed {run.seed}   target {run.target}   agent {run.agent_name}"
        )
        if run.error:
            write(self.style.ERROR(run.error))
        if run.report_dir:
            write(f"report: {run.report_dir}/report.html")
