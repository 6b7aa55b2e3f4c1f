"""Celery workers killed with SIGKILL, again and again, while intentions come
due and tasks run: every intention that should fire fires exactly once, none
that should not, no process is left behind, and the derived work is done.

The run has a PostgreSQL and a Redis of its own (scripts/chaos/_stack.py:
private_services), the web server (gunicorn), `--workers` Celery workers and
`--beats` celery-beats (two at once by default: both send the engine's cycle)
with the intentions engine every 2 s and the embedding backlog sweep. Before
the run: `--intentions` time-triggered intentions due over the next
`--spread` seconds, event-triggered ones waiting for one of 30 signals and
state-triggered ones waiting for one of 30 services to be down — and, for
each kind, some whose moment never comes in the run. During the run the
script sends the signals (POST /events), records the services down (POST
/facts) and records episodes (their vectors are tasks), at random moments;
and every `--kill-every` seconds it kills a random worker that has been up
for `--min-up` seconds — SIGKILL to its process group, the pool child with
it: no warm shutdown, no acknowledgement (acks_late) — and starts another;
one kill in `--beat-every` is of a beat instead.

Consolidation and skill validation run through the kills too
(scripts/chaos/_derived.py): `--statements` episodes state who owns one of 40
services (facts consolidation: candidate facts, asserted), `--traces` verified
skill traces of two procedures (skills consolidation: candidate skills, each a
version the sandbox validates), and `--skills` skills are made through the
API (each validated on its examples, then replayed on its hold-out cases and
drawn inputs), and `--consolidations` runs are asked for through the API
(POST /consolidation/runs, which queues the task) and `--executions` sandbox
runs of those skills (POST …/execute), at random moments; beat
runs `consolidation.consolidate_due`
every 5 s (a run whose worker died is resumed after 20 s) and the validations
reconciler `skills.validation_backlog` every 10 s (grace 20 s); consolidation
runs step 25 episodes at a time, 10 s a task.

Checked: each intention whose moment came has exactly one Firing, one
`intention.fired` event and one transition to due, and is due; those whose
moment did not come have none; every episode has its vector; every
consolidation run succeeded, once, over contiguous ranges, reading every
episode and trace exactly once; each stated claim is one candidate with
exactly its episodes as evidence and one believed fact; each procedure one
candidate skill with exactly its traces; every validation finished exactly
once (one finish event, its cases stored once), every version promoted once
with its replays requested once; every execution finished exactly once; the agent's hash chain verifies; after the
run no worker or beat process is left and none of this script's children is
a zombie.

    .venv/bin/python scripts/chaos/worker_kill.py        # 3 workers, 2 beats, ~110 kills
    .venv/bin/python scripts/chaos/worker_kill.py --workers 4 --intentions 3000 --spread 240

Exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _derived  # noqa: E402
import _faults  # noqa: E402
import _stack  # noqa: E402

SIGNALS = 30
SERVICES = 30


def queues() -> list[str]:
    """What a worker consumes: the chaos queue and the sandbox's, as the Procfile's
    worker consumes `celery,sandbox` — the sandbox's runs queue apart, and a
    worker takes from each in turn instead of one FIFO behind them."""
    queue = _stack.env()["PIPER_CHAOS_QUEUE"]
    os.environ.setdefault("PIPER_CHAOS_SANDBOX_QUEUE", f"{queue}-sandbox")
    return [queue, os.environ["PIPER_CHAOS_SANDBOX_QUEUE"]]


class Proc:
    """A worker or a beat this script can kill and replace."""

    def __init__(self, kind: str, n: int, name: str):
        self.kind, self.n, self.name = kind, n, name
        self.generation = 0
        self.process: subprocess.Popen | None = None
        self.started = 0.0

    @property
    def hostname(self) -> str:
        return f"chaos-{self.name}-{self.kind}{self.n}-{os.getpid()}@%h"

    def start(self) -> None:
        self.generation += 1
        log_path = _stack.LOG_DIR / f"chaos-{self.name}-{self.kind}{self.n}.log"
        if self.kind == "worker":
            args = [
                "worker",
                "--concurrency",
                "1",
                "-n",
                self.hostname,
                "-Q",
                ",".join(queues()),
                "--without-mingle",
                "--without-gossip",
            ]
        else:
            args = [
                "beat",
                "-S",
                "django_celery_beat.schedulers:DatabaseScheduler",
                "--max-interval",
                "1",
                "--pidfile=",
            ]
        cmd = [_stack.PYTHON, "-m", "celery", "-A", "piper", *args, "--loglevel", "WARNING"]
        with open(log_path, "a") as log:
            log.write(f"\n==== start {self.generation} at {time.strftime('%H:%M:%S')}\n")
            log.flush()
            self.process = subprocess.Popen(
                cmd,
                cwd=_stack.ROOT,
                env=_stack.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started = time.monotonic()

    def kill(self) -> None:
        """SIGKILL to the whole process group (the pool child too), and reap it."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


# Consolidation and the validations reconciler on a run's time scale (the
# workers and beat read these at start).
DERIVED_ENV = {
    "CONSOLIDATION_STALE_SECONDS": "20",
    "CONSOLIDATION_BATCH_SIZE": "25",
    "CONSOLIDATION_TASK_BUDGET_SECONDS": "10",
}


def configure_beat() -> list[str]:
    _faults.BEAT_TASKS["piper:intentions-engine"] = (2, {})
    _faults.BEAT_TASKS["piper:consolidation-due"] = (5, {})
    _faults.BEAT_TASKS["piper:skills-validation-backlog"] = (10, {"grace_seconds": 20})
    return _faults.configure_beat()


def make_intentions(agent, args, start: datetime) -> dict[str, list]:
    """The intentions, by what should happen to them: (id, due_at or cue)."""
    from intentions.services.lifecycle import IntentionInput, intention_create

    rng = random.Random(7)
    made: dict[str, list] = {"time": [], "event": [], "state": [], "never": []}

    def create(description: str, trigger_type: str, **fields):
        data = IntentionInput(description=description, trigger_type=trigger_type, **fields)
        return intention_create(agent=agent, data=data).pk

    for n in range(args.intentions):
        due = start + timedelta(seconds=10 + rng.uniform(0, args.spread))
        made["time"].append((create(f"timed {n}", "time", due_at=due), due))
    for n in range(args.intentions // 20):  # due long after the run
        due = start + timedelta(hours=1, seconds=n)
        made["never"].append((create(f"later {n}", "time", due_at=due), "time"))
    for n in range(SIGNALS * 5):
        spec = {"event_type": f"chaos.signal.{n % SIGNALS}"}
        made["event"].append((create(f"on signal {n}", "event", trigger_spec=spec), n % SIGNALS))
    for n in range(SIGNALS):  # a signal never sent
        spec = {"event_type": f"chaos.silence.{n}"}
        made["never"].append((create(f"on silence {n}", "event", trigger_spec=spec), "event"))
    for n in range(SERVICES * 5):
        spec = {"subject": f"svc-{n % SERVICES}", "predicate": "status", "value": "down"}
        made["state"].append((create(f"when down {n}", "state", trigger_spec=spec), n % SERVICES))
    for n in range(SERVICES):  # a service never down
        spec = {"subject": f"steady-{n}", "predicate": "status", "value": "down"}
        made["never"].append((create(f"steady {n}", "state", trigger_spec=spec), "state"))
    return made


def cues(server, key, args, stop: threading.Event, sent: dict) -> None:
    """Signals, services down and episodes at random moments of the run."""
    rng = random.Random(11)
    plan = (
        [("signal", k) for k in range(SIGNALS)]
        + [("down", k) for k in range(SERVICES)]
        + [("episode", k) for k in range(args.episodes)]
        + [("statement", k) for k in range(args.statements)]
        + [("trace", k) for k in range(args.traces)]
        + [("skill", k) for k in range(args.skills)]
        + [("consolidate", k) for k in range(args.consolidations)]
        + [("execute", k) for k in range(args.executions)]
    )
    rng.shuffle(plan)
    pause = (args.spread - 10) / max(len(plan), 1)
    versions: list[str] = []  # of the skills made so far
    with _stack.client(server.url, key) as http:
        for kind, k in plan:
            if stop.wait(pause):
                break
            if kind == "signal":
                body = {"event_type": f"chaos.signal.{k}", "payload": {"k": k}}
                path = "/api/v1/events"
            elif kind == "down":
                body = {
                    "subject": f"svc-{k}",
                    "predicate": "status",
                    "value": "down",
                    "cardinality": "one",
                    "source_type": "observation",
                }
                path = "/api/v1/facts"
            elif kind == "statement":
                body = _derived.statement_episode(k, datetime.now(UTC).isoformat())
                path = "/api/v1/episodes"
            elif kind == "trace":
                body = _derived.trace_body(k)[1]
                path = "/api/v1/skills/traces"
            elif kind == "skill":
                body = _derived.skill_body(k)
                path = "/api/v1/skills"
            elif kind == "execute":  # a run in the sandbox of a skill made earlier (202)
                if not versions:
                    sent.setdefault("execute skipped", []).append((k, 0, time.time()))
                    continue
                body = {"params": {"record": f"X-{k}"}, "allow_unvalidated": True}
                path = f"/api/v1/skills/versions/{versions[k % len(versions)]}/execute"
            elif kind == "consolidate":  # a client asks for a run (202, or 200: nothing new)
                body = {"kind": ("facts", "skills", "duplicates")[k % 3]}
                path = "/api/v1/consolidation/runs"
            else:
                body = {
                    "occurred_at": datetime.now(UTC).isoformat(),
                    "summary": f"service check {k}: latency normal after the deploy",
                    "actor": "chaos",
                }
                path = "/api/v1/episodes"
            label = f"{kind}-{k}"
            reply = _faults.write_once_accepted(
                http, kind, label, "POST", path, body, f"cue-{label}"
            )
            sent.setdefault(kind, []).append((k, reply.status, time.time()))
            if kind == "skill" and reply.status == 201:
                versions.append(reply.body["versions"][0]["id"])


def unacknowledged(redis) -> Counter:
    """The tasks killed workers took and never acknowledged, by name (kombu keeps
    each in the `unacked` hash as [message, exchange, routing key])."""
    import json

    names = Counter()
    for raw in redis.hvals("unacked"):
        try:
            names[json.loads(raw)[0]["headers"]["task"]] += 1
        except (ValueError, KeyError, IndexError, TypeError):
            names["?"] += 1
    return names


def leftovers(name: str) -> list[str]:
    """Processes of this run's workers and beats still alive, and zombie children."""
    import psutil

    left = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            cmd = " ".join(proc.info["cmdline"] or [])
            if f"chaos-{name}-" in cmd and str(os.getpid()) in cmd:
                left.append(f"{proc.info['pid']} {proc.info['status']} {cmd[:80]}")
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() == psutil.STATUS_ZOMBIE:
                left.append(f"zombie {child.pid}")
    return left


def check(agent, made: dict, sent: dict) -> tuple[dict, list[str]]:
    from django.db.models import Count

    from intentions.models import Firing, Intention, Transition
    from ledger.models import Event
    from ledger.selectors import chain_verify

    violations: list[str] = []
    signalled = {k for k, status, _ in sent.get("signal", []) if status == 201}
    downed = {k for k, status, _ in sent.get("down", []) if status == 201}
    should = [i for i, _ in made["time"]]
    should += [i for i, k in made["event"] if k in signalled]
    should += [i for i, k in made["state"] if k in downed]
    should_not = [i for i, _ in made["never"]]
    should_not += [i for i, k in made["event"] if k not in signalled]
    should_not += [i for i, k in made["state"] if k not in downed]

    firings = Counter(
        dict(
            Firing.objects.filter(agent=agent)
            .values("intention_id")
            .annotate(n=Count("id"))
            .values_list("intention_id", "n")
        )
    )
    events = Counter(
        Event.objects.filter(agent=agent, event_type="intention.fired").values_list(
            "payload__intention_id", flat=True
        )
    )
    to_due = Counter(
        Transition.objects.filter(intention__agent=agent, to_status="due").values_list(
            "intention_id", flat=True
        )
    )
    statuses = dict(Intention.objects.filter(agent=agent).values_list("pk", "status"))
    lost = [i for i in should if firings[i] == 0]
    doubled = [i for i in should if firings[i] > 1 or events[str(i)] > 1 or to_due[i] > 1]
    wrong = [i for i in should_not if firings[i] or events[str(i)]]
    mismatched = [i for i in should if firings[i] == 1 and (events[str(i)] != 1 or to_due[i] != 1)]
    not_due = [i for i in should if firings[i] == 1 and statuses[i] != "due"]
    for name, ids in (
        ("lost (never fired)", lost),
        ("fired more than once", doubled),
        ("fired though its moment never came", wrong),
        ("a firing without exactly one event and one transition", mismatched),
        ("fired but not due", not_due),
    ):
        if ids:
            violations.append(f"{len(ids)} intention(s) {name}: e.g. {ids[:3]}")
    late = []
    fired_at = dict(Firing.objects.filter(agent=agent).values_list("intention_id", "fired_at"))
    for i, due in made["time"]:
        if i in fired_at:
            late.append((fired_at[i] - due).total_seconds())
    report = chain_verify(agent=agent)
    if not report.ok:
        violations.append(f"the hash chain is broken: {report.first_break}")
    late.sort()
    cue_at = {("event", k): at for k, _, at in sent.get("signal", [])}
    cue_at.update({("state", k): at for k, _, at in sent.get("down", [])})
    after_cue = sorted(
        fired_at[i].timestamp() - cue_at[(kind, k)]
        for kind in ("event", "state")
        for i, k in made[kind]
        if i in fired_at and (kind, k) in cue_at
    )
    figures = {
        "should fire / fired exactly once": f"{len(should)} / "
        f"{sum(1 for i in should if firings[i] == 1)}",
        "should not fire / fired": f"{len(should_not)} / {len(wrong)}",
        "lost / duplicated": f"{len(lost)} / {len(doubled)}",
        "time triggers: fired after due_at, p50 / p95 / max": (
            f"{_stack.percentile(late, 50):.1f} / {_stack.percentile(late, 95):.1f} / "
            f"{late[-1]:.1f} s"
            if late
            else "-"
        ),
        "signals sent / services down": f"{len(signalled)} / {len(downed)}",
        "event and state triggers: fired after the cue was accepted, p50 / max": (
            f"{_stack.percentile(after_cue, 50):.1f} / {after_cue[-1]:.1f} s" if after_cue else "-"
        ),
        "hash chain": f"ok, {report.events_checked} events" if report.ok else "BROKEN",
    }
    return figures, violations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--beats", type=int, default=2)
    parser.add_argument("--intentions", type=int, default=2000, help="time-triggered, due")
    parser.add_argument("--spread", type=float, default=180, help="seconds they come due over")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--statements", type=int, default=80, help="episodes stating a fact")
    parser.add_argument("--traces", type=int, default=12, help="verified skill traces")
    parser.add_argument("--skills", type=int, default=16, help="skills made through the API")
    parser.add_argument(
        "--consolidations", type=int, default=12, help="runs asked for through the API"
    )
    parser.add_argument("--executions", type=int, default=24, help="sandbox runs asked for")
    parser.add_argument("--kill-every", type=float, default=1.6)
    parser.add_argument("--min-up", type=float, default=3, help="a worker is killed once up")
    parser.add_argument("--beat-every", type=int, default=10, help="one kill in N is a beat's")
    parser.add_argument("--settle", type=float, default=120)
    parser.add_argument("--port", type=int, default=8543)
    args = parser.parse_args()
    name = "worker-kill"
    violations: list[str] = []
    for variable, value in DERIVED_ENV.items():
        os.environ.setdefault(variable, value)
    queues()  # the sandbox's queue, for every process of the run
    with _stack.private_services(name) as (_postgres, _redis, note):
        _stack.setup_django()
        beat_tasks = configure_beat()
        agent, key = _stack.agent_with_key(name)
        # The first come due 10 s after the kills begin: time to make them and
        # to start the workers (~0.01 s an intention here).
        start = datetime.now(UTC) + timedelta(seconds=5 + args.intentions * 0.01)
        made_at = time.monotonic()
        made = make_intentions(agent, args, start)
        made_s = time.monotonic() - made_at
        workers = [Proc("worker", n, name) for n in range(args.workers)]
        beats = [Proc("beat", n, name) for n in range(args.beats)]
        kills = Counter()
        with _stack.gunicorn(args.port, 2, 4, name) as server:
            print(
                _stack.header(
                    "Celery workers killed while intentions come due",
                    server,
                    f"{note}\n{args.workers} workers (concurrency 1, -Q {','.join(queues())}), "
                    f"{args.beats} beats with "
                    f"{'; '.join(beat_tasks)}\nintentions: {len(made['time'])} time-triggered "
                    f"due over {args.spread:.0f} s, {len(made['event'])} on {SIGNALS} signals, "
                    f"{len(made['state'])} on {SERVICES} services down, {len(made['never'])} "
                    f"whose moment never comes (made in {made_s:.0f} s); {args.episodes} "
                    f"episodes, {args.statements} stating a fact, {args.traces} skill traces, "
                    f"{args.skills} skills, {args.consolidations} consolidations and "
                    f"{args.executions} sandbox runs asked for; a kill "
                    f"every {args.kill_every} s",
                ),
                flush=True,
            )
            for proc in workers + beats:
                proc.start()
            stop = threading.Event()
            sent: dict = {}
            cue_thread = threading.Thread(target=cues, args=(server, key, args, stop, sent))
            cue_thread.start()
            rng = random.Random(3)
            until = time.monotonic() + (start - datetime.now(UTC)).total_seconds() + 10
            until += args.spread
            try:
                while time.monotonic() < until:
                    time.sleep(args.kill_every)
                    n = sum(kills.values()) + 1
                    pool = beats if beats and n % args.beat_every == 0 else workers
                    ready = [p for p in pool if time.monotonic() - p.started >= args.min_up]
                    if not ready:
                        continue
                    victim = rng.choice(ready)
                    victim.kill()
                    kills[victim.kind] += 1
                    victim.start()
                cue_thread.join(timeout=args.spread)
                # acks_late: what a killed worker had taken stays unacknowledged (until
                # the visibility timeout, an hour): the kills that cut a task short.
                cut_short = unacknowledged(_redis.client())
                print(
                    f"-- kill phase over: {kills['worker']} workers and {kills['beat']} beats "
                    f"killed (SIGKILL) and restarted; {sum(cut_short.values())} tasks taken by "
                    f"a killed worker and never acknowledged: {dict(cut_short.most_common())}",
                    flush=True,
                )
                settle_start = time.monotonic()
                expected = len(made["time"])
                from intentions.models import Firing

                print(f"   pending then: {_derived.pending(agent)}", flush=True)
                while time.monotonic() - settle_start < args.settle:
                    left = _faults.derived_backlog(agent)["episodes without a vector"]
                    left += sum(_derived.pending(agent).values())
                    fired = Firing.objects.filter(
                        intention_id__in=[i for i, _ in made["time"]]
                    ).count()
                    if fired >= expected and not left:
                        break
                    time.sleep(2)
                print(f"   settled in {time.monotonic() - settle_start:.0f} s", flush=True)
            finally:
                stop.set()
                for proc in workers + beats:
                    proc.stop()
            cue_answers = Counter(
                f"{kind} {status}" for kind, got in sent.items() for _, status, _ in got
            )
            print(f"-- cues sent: {dict(cue_answers)}")
            fine = ("consolidate 200", "consolidate 202", "execute 202", "execute skipped 0")
            if any(not (k.endswith(" 201") or k in fine) for k in cue_answers):
                violations.append(f"a cue was not accepted: {dict(cue_answers)}")
            if kills["worker"] < 100:
                print(f"   note: {kills['worker']} worker kills, fewer than 100")
            figures, found = check(agent, made, sent)
            violations += found
            print("-- the intentions")
            for label, value in figures.items():
                print(f"   {label}: {value}")
            backlog = _faults.derived_backlog(agent)
            print(f"-- derived work left: {backlog}")
            if backlog["episodes without a vector"]:
                violations.append(f"episodes left without a vector: {backlog}")
            left = _derived.pending(agent)
            print(f"-- consolidation and validation left: {left}")
            violations += [f"left undone: {n} {what}" for what, n in left.items() if n]
            figures, found = _derived.check(agent, sent)
            violations += found
            print("-- consolidation and skill validation")
            for label, value in figures.items():
                print(f"   {label}: {value}")
            time.sleep(1)
            left = leftovers(name)
            print(f"-- processes left behind: {len(left)}")
            violations += [f"left behind: {p}" for p in left]
        return _stack.finish(violations, server)


if __name__ == "__main__":
    sys.exit(main())
