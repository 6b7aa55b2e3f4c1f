"""Suite E's seeded draw: the intentions each item makes, the cues and
distractors it sends, what it does when they fire, and what it checks.

Pure: a function of the random.Random it is given and nothing else (no
clock, no I/O, no iteration over sets), so the same seed draws the same items.

Every item runs on one simulated timeline of STEPS (hourly, with a day-long
gap after step 8, when the agent is away). At each step the suite sets the
agent's clock, performs that step's actions of every item in PHASES order,
runs the engine (POST /intentions/tick) and reads what is due.

An item's `data`:
* `actions`: `{step, op, …}`. `create` makes the intention `ref` (its `deps`
  and `thread` named by ref); `complete`, `skip`, `cancel` act on one;
  `event` and `fact` are cues and distractors (an `early` event is sent
  before the step's intentions are made); `thread`, `handover`, `resume`,
  `acknowledge` drive a thread's succession.
* `checks`: each graded on its own, under one metric:
  - `recall` / `handover_fire`: `ref` is due with `occurrence` at `step`;
  - `quiet`: `ref` is not due at `step` (`why` names the temptation);
  - `suppressed`: cancelled at `step`, never due again nor fired after;
  - `zombie`: completed at `step`, never due again nor fired after;
  - `settled` (metric zombie): `ref`, blocked on `dependency` when that was
    cancelled, never fired and ended cancelled, naming it — not left blocked;
  - `once`: the ledger records each occurrence of `ref` fired at most once,
    and only the `occurrences` listed;
  - `handover` (E5): the resume lists the thread's open intentions (`listed`)
    and not its finished ones (`unlisted`), due and overdue first (`order`),
    the fired one in the pending list (`pending`); after the
    acknowledgement each is `inherited` by the successor. (E8): the resume
    also lists the promises of no thread that the handing-over session made,
    among the hundreds of other reminders the run's agent holds.
"""

from __future__ import annotations

import copy
import fnmatch
import random
import string
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ...registry import ItemSpec
from ...taxonomy import FailureCode as F

COUNTS = {"e1": 60, "e2": 60, "e3": 40, "e4": 30, "e5": 30, "e6": 40, "e7": 40, "e8": 20}

T0 = datetime(2031, 6, 2, 8, 0, tzinfo=UTC)
STEP_HOURS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 32, 33, 34, 35, 36, 37, 38)
STEPS = tuple(T0 + timedelta(hours=h) for h in STEP_HOURS)
LAST = len(STEPS) - 1
GAP_STEP = STEP_HOURS.index(32)  # the first step after the agent was away for a day
ACTOR = "battery-reference-agent"

# Within a step: early cues, threads, new intentions, the agent's actions on
# intentions, then the step's events and facts. Then the tick.
PHASES = ("early", "thread", "create", "act", "event", "fact")
THREAD_OPS = ("thread", "handover", "resume", "acknowledge")
INTENTION_OPS = ("complete", "skip", "cancel")

METRICS = ("recall", "handover_fire", "quiet", "once", "suppressed", "zombie", "handover")


def phase_of(action: dict[str, Any]) -> int:
    op = action["op"]
    if op == "event":
        return PHASES.index("early" if action.get("early") else "event")
    if op in THREAD_OPS:
        return PHASES.index("thread")
    if op in INTENTION_OPS:
        return PHASES.index("act")
    return PHASES.index(op)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def fire_step(due: datetime, after: int) -> int | None:
    """The first step from `after` on whose tick finds `due` passed (None: none does)."""
    for step in range(after, LAST + 1):
        if STEPS[step] >= due:
            return step
    return None


def between(rng: random.Random, step: int) -> datetime:
    """A whole second strictly between the ticks of step-1 and step."""
    span = int((STEPS[step] - STEPS[step - 1]).total_seconds())
    return STEPS[step - 1] + timedelta(seconds=rng.randrange(1, span))


class Draw:
    """One run's draw: its randomness and the tokens it has handed out."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.taken: set[str] = set()

    def token(self, length: int = 6) -> str:
        alphabet = string.ascii_lowercase + string.digits
        while True:
            token = "".join(self.rng.choice(alphabet) for _ in range(length))
            if token not in self.taken and not token[0].isdigit():
                self.taken.add(token)
                return token

    def lookalike(self, token: str) -> str:
        """Another unused token one character away from `token`."""
        alphabet = string.ascii_lowercase + string.digits
        while True:
            index = self.rng.randrange(1, len(token))
            candidate = token[:index] + self.rng.choice(alphabet) + token[index + 1 :]
            if candidate != token and candidate not in self.taken:
                self.taken.add(candidate)
                return candidate


class Plan:
    """One item's actions and checks, as it is drawn."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.actions: list[dict[str, Any]] = []
        self.checks: list[dict[str, Any]] = []

    def act(self, step: int, op: str, **fields: Any) -> None:
        if not 0 <= step <= LAST:
            raise ValueError(f"step {step} is off the timeline")
        self.actions.append({"step": step, "op": op, **fields})

    def create(self, step: int, ref: str, body: dict[str, Any], **fields: Any) -> None:
        self.act(step, "create", ref=ref, body=body, **fields)

    def check(self, q: str, metric: str, **fields: Any) -> None:
        self.checks.append({"q": q, "metric": metric, **fields})

    def recall(self, ref: str, step: int, *, occurrence: int = 1, metric: str = "recall") -> None:
        self.check("recall", metric, ref=ref, step=step, occurrence=occurrence)

    def quiet(self, ref: str, step: int, why: str) -> None:
        if not any(
            c["q"] == "quiet" and c["ref"] == ref and c["step"] == step for c in self.checks
        ):
            self.check("quiet", "quiet", ref=ref, step=step, why=why)

    def complete(self, ref: str, step: int, *, op: str = "complete", last: bool = True) -> None:
        """The agent completes (or skips) `ref` at `step`; a last completion is
        watched for zombies from then on."""
        self.act(step, op, ref=ref)
        if last:
            self.check("zombie", "zombie", ref=ref, step=step)

    def once(self, ref: str, occurrences: Sequence[int] = (1,)) -> None:
        self.check("once", "once", ref=ref, occurrences=list(occurrences))

    def cancel(self, ref: str, step: int) -> None:
        self.act(step, "cancel", ref=ref)
        self.check("suppressed", "suppressed", ref=ref, step=step)

    def spec(self, kind: str, number: int, title: str, variant: str) -> ItemSpec:
        """The item, its checks in timeline order (those about the end last), so
        that its first miss is the earliest."""
        self.checks.sort(key=lambda check: check.get("step", LAST + 1))
        planned: dict[str, int] = {}
        for check in self.checks:
            planned[check["metric"]] = planned.get(check["metric"], 0) + 1
        return ItemSpec(
            key=f"{kind}_{number:04d}",
            title=title,
            default_code=F.P0,
            data={"token": self.token, "actions": self.actions, "checks": self.checks},
            metrics={"kind": kind.upper(), "variant": variant, "planned": planned},
        )


def _fired_then_done(plan: Plan, ref: str, fired: int, occurrences: Sequence[int] = (1,)) -> None:
    """It fired at `fired`: the agent completes it at the next step."""
    plan.complete(ref, fired + 1)
    plan.once(ref, occurrences)


def _description(rng: random.Random, token: str, what: str) -> str:
    return f"{what} ({token})"


TASKS = (
    "Send the weekly status report",
    "Renew the TLS certificate",
    "Ping the vendor about the invoice",
    "Re-run the flaky integration suite",
    "Rotate the API keys",
    "Check the backup restore test",
    "Follow up on the security review",
    "Close the incident postmortem",
    "Water the office plants",
    "Update the on-call schedule",
)


def _time_body(rng: random.Random, token: str, due: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "description": _description(rng, token, rng.choice(TASKS)),
        "trigger_type": "time",
        "due_at": iso(due),
        "priority": rng.randrange(-3, 6),
        **extra,
    }


# ------------------------------------------------------------------------ E1 time

E1_VARIANTS = (
    "between",
    "between",
    "at_tick",
    "just_after",
    "window",
    "window",
    "same_step",
    "in_gap",
    "overdue",
)


def e1_time(draw: Draw, count: int) -> list[ItemSpec]:
    """Time triggers fire at the first tick at or after due_at: not before
    (premature), not never (missed), also across the day-long gap and when
    already overdue when made."""
    return [_e1_item(draw, number) for number in range(1, count + 1)]


def _e1_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    variant = rng.choice(E1_VARIANTS)
    extra: dict[str, Any] = {}
    if variant == "in_gap":
        created, fires = rng.randrange(0, GAP_STEP), GAP_STEP
        due = between(rng, fires)
    elif variant == "overdue":
        created = fires = rng.randrange(1, LAST - 1)
        due = STEPS[created] - timedelta(seconds=rng.randrange(60, 5 * 3600))
    elif variant == "same_step":
        created = rng.randrange(0, LAST - 1)
        fires = created + 1
        due = between(rng, fires)
    else:
        created = rng.randrange(0, LAST - 2)
        fires = rng.randrange(created + 1, LAST)
        if variant == "at_tick":
            due = STEPS[fires]
        elif variant == "just_after":
            due = STEPS[fires - 1] + timedelta(seconds=1)
        else:
            due = between(rng, fires)
        if variant == "window":  # not_before passes a tick before due_at does
            extra["not_before"] = iso(STEPS[fires - 1] - timedelta(seconds=rng.randrange(1, 1800)))
    plan.create(created, "x", _time_body(rng, token, due, **extra))
    if fires - 1 >= created:
        plan.quiet("x", fires - 1, f"the tick before due_at {iso(due)}")
    plan.recall("x", fires)
    _fired_then_done(plan, "x", fires)
    return plan.spec(
        "e1", number, f"E1 time ({variant}): due {iso(due)}, fires at step {fires}", variant
    )


# ----------------------------------------------------------------------- E2 event

EVENT_FAMILIES = (
    ("invoice", ("paid", "voided", "sent")),
    ("deploy", ("finished", "started", "rolled_back")),
    ("ticket", ("closed", "reopened", "assigned")),
    ("build", ("failed", "passed")),
    ("payment", ("refunded", "captured")),
    ("order", ("shipped", "cancelled")),
    ("backup", ("completed", "failed")),
    ("review", ("requested", "approved")),
    ("alert", ("resolved", "fired")),
    ("email", ("received", "bounced")),
)
EVENT_FIELDS = ("event_type", "actor", "session_id", "source_type", "source_ref")
ABSENT = {"__absent__": True}  # a mutation that removes the field


def _path_set(event: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    target = event
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    if value == ABSENT:
        target.pop(parts[-1], None)
    else:
        target[parts[-1]] = copy.deepcopy(value)


def _lookup(record: dict[str, Any], path: str) -> tuple[bool, Any]:
    value: Any = record
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def condition_holds(op: str, found: bool, actual: Any, expected: Any) -> bool:
    """The trigger spec's conditions, as documented (the suite's own model)."""
    if op == "exists":
        return found
    if op == "absent":
        return not found
    if not found:
        return False
    if op == "eq":
        return _json_equal(actual, expected)
    if op == "ne":
        return not _json_equal(actual, expected)
    if op == "in":
        return any(_json_equal(actual, v) for v in expected)
    if op == "contains":
        if isinstance(actual, list):
            return any(_json_equal(v, expected) for v in actual)
        return isinstance(actual, str) and isinstance(expected, str) and expected in actual
    numbers = (int, float)
    if isinstance(actual, bool) or isinstance(expected, bool):
        return False
    if not isinstance(actual, numbers) or not isinstance(expected, numbers):
        return False
    return {
        "gt": actual > expected,
        "gte": actual >= expected,
        "lt": actual < expected,
        "lte": actual <= expected,
    }[op]


def event_matches(spec: dict[str, Any], event: dict[str, Any]) -> bool:
    """Does `event` (as sent) match the event trigger `spec`? The suite's model."""
    if not fnmatch.fnmatchcase(event["event_type"], spec["event_type"]):
        return False
    record = {name: event.get(name, "") for name in EVENT_FIELDS}
    record["payload"] = event.get("payload", {})
    return all(
        condition_holds(c.get("op", "eq"), *_lookup(record, c["field"]), c.get("value"))
        for c in spec.get("conditions", [])
    )


def _condition_kinds(rng: random.Random) -> list[tuple[dict, dict, list[dict]]]:
    """(condition, what makes it hold, look-alike values that must not) per kind."""
    threshold = rng.choice((100, 250, 1000))
    regions = rng.sample(["eu-west-1", "eu-central-1", "us-east-1", "ap-south-1"], 2)
    return [
        (
            {"field": "payload.env", "op": "eq", "value": "prod"},
            {"payload.env": "prod"},
            [{"payload.env": v} for v in ("production", "Prod", "staging", "prod ")],
        ),
        (
            {"field": "payload.amount", "op": "gte", "value": threshold},
            {"payload.amount": rng.choice((threshold, threshold + 0.5, threshold * 2))},
            [
                {"payload.amount": threshold - 0.01},
                {"payload.amount": str(threshold * 2)},
                {"payload.amount": ABSENT},
            ],
        ),
        (
            {"field": "payload.attempts", "op": "eq", "value": 3},
            {"payload.attempts": 3},
            [{"payload.attempts": v} for v in ("3", 3.5, 4)],
        ),
        (
            {"field": "payload.urgent", "op": "eq", "value": True},
            {"payload.urgent": True},
            [{"payload.urgent": v} for v in (1, "true", False)],
        ),
        (
            {"field": "payload.region", "op": "in", "value": regions},
            {"payload.region": rng.choice(regions)},
            [{"payload.region": v} for v in (regions[0][:-2], "sa-east-1", [regions[0]])],
        ),
        (
            {"field": "payload.order.status", "op": "eq", "value": "shipped"},
            {"payload.order": {"status": "shipped", "lines": rng.randrange(1, 9)}},
            [
                {"payload.order": {"status": "shipping"}},
                {"payload.order": ABSENT, "payload.order_status": "shipped"},
            ],
        ),
        (
            {"field": "payload.error", "op": "absent"},
            {"payload.error": ABSENT},
            [{"payload.error": v} for v in ("timeout", "")],
        ),
        (
            {"field": "payload.assignee", "op": "exists"},
            {"payload.assignee": rng.choice(("ana", "bo", "chidi"))},
            [{"payload.assignee": ABSENT}],
        ),
        (
            {"field": "actor", "op": "eq", "value": "ci-bot"},
            {"actor": "ci-bot"},
            [{"actor": v} for v in ("ci-bot-2", "CI-bot")],
        ),
        (
            {"field": "payload.tags", "op": "contains", "value": "urgent"},
            {"payload.tags": ["ops", "urgent"]},
            [{"payload.tags": v} for v in (["urgently", "non-urgent"], [])],
        ),
    ]


def _type_lookalikes(family: str, name: str, names: Sequence[str]) -> list[str]:
    return [
        f"{family}s.{name}",
        f"{family}.{name}.retry",
        f"{name}.{family}",
        f"{family}-{name}",
        f"pre.{family}.{name}",
        *(f"{family}.{other}" for other in names if other != name),
    ]


def _event(event_type: str, payload: dict[str, Any], actor: str = ACTOR) -> dict[str, Any]:
    return {
        "event_type": event_type,
        "payload": payload,
        "actor": actor,
        "source_type": "tool_result",
    }


def _mutated(event: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    mutated = copy.deepcopy(event)
    for path, value in changes.items():
        _path_set(mutated, path, value)
    return mutated


def event_trigger(draw: Draw, token: str) -> tuple[dict, dict, list[tuple[str, dict]]]:
    """An event trigger, an event that matches it, and distractors that look
    like it but must not: (spec, cue, [(what differs, event)])."""
    rng = draw.rng
    family, names = rng.choice(EVENT_FAMILIES)
    name = rng.choice(names)
    glob = rng.random() < 0.3
    pattern = f"{family}.*" if glob else f"{family}.{name}"
    kinds = _condition_kinds(rng)
    extra = rng.sample(kinds, rng.randrange(0, 3))
    spec = {
        "event_type": pattern,
        "conditions": [
            {"field": "payload.ref", "op": "eq", "value": token},
            *(condition for condition, _, _ in extra),
        ],
    }
    cue = _event(f"{family}.{rng.choice(names) if glob else name}", {"ref": token, "n": 1})
    for _, good, _ in extra:
        cue = _mutated(cue, good)
    distractors: list[tuple[str, dict]] = []
    lookalike_types = [
        t for t in _type_lookalikes(family, name, names) if not fnmatch.fnmatchcase(t, pattern)
    ]
    distractors.append(
        ("event type", {**copy.deepcopy(cue), "event_type": rng.choice(lookalike_types)})
    )
    distractors.append(("ref", _mutated(cue, {"payload.ref": draw.lookalike(token)})))
    for condition, _, bads in extra:
        distractors.append(
            (f"{condition['field']} {condition['op']}", _mutated(cue, rng.choice(bads)))
        )
    if not event_matches(spec, cue) or any(event_matches(spec, e) for _, e in distractors):
        raise AssertionError(f"event trigger draw for {token} is inconsistent")
    return spec, cue, distractors


def e2_event(draw: Draw, count: int) -> list[ItemSpec]:
    """Event triggers among distractors (look-alike types, payload values of
    the wrong type or value, a matching event sent before the intention
    existed): fire on the cue only, at the tick after it."""
    return [_e2_item(draw, number) for number in range(1, count + 1)]


def _e2_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    spec, cue, distractors = event_trigger(draw, token)
    silent = rng.random() < 0.15  # the cue never comes
    created = rng.randrange(0, LAST - 4)
    fires = None if silent else rng.randrange(created + 2, LAST)
    window_end = LAST if silent else fires - 1
    body = {
        "description": _description(rng, token, f"React to {spec['event_type']}"),
        "trigger_type": "event",
        "trigger_spec": spec,
        "priority": rng.randrange(0, 5),
    }
    if rng.random() < 0.3:  # the cue, once, before the intention exists
        plan.act(created, "event", event=_mutated(cue, {"payload.n": 0}), early=True)
        plan.quiet("x", created, "a matching event sent before the intention was made")
    plan.create(created, "x", body)
    chosen = rng.sample(distractors, rng.randrange(min(2, len(distractors)), len(distractors) + 1))
    for what, event in chosen:
        step = rng.randrange(created, window_end + 1)
        plan.act(step, "event", event=event)
        plan.quiet("x", step, f"a distractor differing in {what}")
    if silent:
        plan.quiet("x", LAST, "no matching event ever came")
        variant = "silent"
    else:
        plan.act(fires, "event", event=cue)
        plan.recall("x", fires)
        _fired_then_done(plan, "x", fires)
        variant = "glob" if "*" in spec["event_type"] else "exact"
    title = f"E2 event {spec['event_type']} with {len(spec['conditions'])} conditions, {len(chosen)} distractors"
    return plan.spec("e2", number, title + (", no cue" if silent else ""), variant)


# ----------------------------------------------------------------------- E3 state

# (predicate, value type, op, value, initial value (None: no fact), values that
# must not satisfy it, values that do, a neighbouring predicate)
STATE_FAMILIES: tuple[tuple[str, str, str, Any, Any, tuple, tuple, str], ...] = (
    (
        "status",
        "string",
        "eq",
        "degraded",
        "healthy",
        ("degrading", "Degraded", "healthy"),
        ("degraded",),
        "status_reason",
    ),
    ("disk_free_gb", "number", "lt", 10, 42.5, (10, 10.5, 64), (9.5, 0.25), "disk_total_gb"),
    ("queue_depth", "integer", "gte", 1000, 12, (999, 640), (1000, 4200), "queue_limit"),
    (
        "region",
        "string",
        "in",
        ["eu-west-1", "eu-central-1"],
        "us-east-1",
        ("eu-west-2", "eu-west"),
        ("eu-central-1", "eu-west-1"),
        "backup_region",
    ),
    (
        "deploy_mode",
        "string",
        "ne",
        "manual",
        "manual",
        ("manual",),
        ("auto", "canary"),
        "deploy_target",
    ),
    ("on_call", "string", "exists", None, None, (), ("Ana Lima", "Bo Chen"), "on_call_backup"),
)


def _claim(
    subject: str, predicate: str, value: Any, value_type: str, valid_from: datetime, token: str
) -> dict[str, Any]:
    return {
        "subject": subject,
        "predicate": predicate,
        "value": value,
        "value_type": value_type,
        "valid_from": iso(valid_from),
        "cardinality": "one",
        "subject_type": "service",
        "source_type": "tool_result",
        "authority": "tool_result",
        "source_ref": f"battery:{token}:{predicate}:{iso(valid_from)}",
        "confidence": 1.0,
        "actor": ACTOR,
    }


class StateCue:
    """A state trigger over one subject's fact, with the facts that make it
    hold and the look-alike facts that must not."""

    def __init__(self, draw: Draw, token: str) -> None:
        rng = draw.rng
        (
            self.predicate,
            self.value_type,
            self.op,
            self.value,
            self.initial,
            self.wrong,
            self.right,
            self.neighbour,
        ) = rng.choice(STATE_FAMILIES)
        self.token = token
        self.subject = f"svc-{token}"
        self.lookalike = f"svc-{draw.lookalike(token)}"
        self.rng = rng
        self.spec = {"subject": self.subject, "predicate": self.predicate, "op": self.op}
        if self.op != "exists":
            self.spec["value"] = self.value

    def claim(
        self,
        value: Any,
        valid_from: datetime,
        *,
        subject: str | None = None,
        predicate: str | None = None,
    ) -> dict[str, Any]:
        return _claim(
            subject or self.subject,
            predicate or self.predicate,
            value,
            self.value_type,
            valid_from,
            self.token,
        )

    def holding(self, valid_from: datetime) -> dict[str, Any]:
        return self.claim(self.rng.choice(self.right), valid_from)

    def distractors(self) -> list[str]:
        kinds = ["look-alike subject", "neighbouring predicate"]
        if self.wrong:
            kinds.append("a value that does not satisfy it")
        return kinds

    def distractor(self, kind: str, valid_from: datetime) -> dict[str, Any]:
        if kind == "look-alike subject":
            return self.claim(self.rng.choice(self.right), valid_from, subject=self.lookalike)
        if kind == "neighbouring predicate":
            return self.claim(self.rng.choice(self.right), valid_from, predicate=self.neighbour)
        return self.claim(self.rng.choice(self.wrong), valid_from)

    def body(self, description: str) -> dict[str, Any]:
        return {
            "description": _description(self.rng, self.token, description),
            "trigger_type": "state",
            "trigger_spec": self.spec,
            "priority": self.rng.randrange(0, 5),
        }


def e3_state(draw: Draw, count: int) -> list[ItemSpec]:
    """State triggers over current facts: fire when the fact comes to satisfy
    the condition (at the engine's clock: a change valid only from later
    fires later), not on look-alike subjects, neighbouring predicates or
    changes that still do not satisfy it."""
    return [_e3_item(draw, number) for number in range(1, count + 1)]


def _e3_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    cue = StateCue(draw, token)
    variant = rng.choices(("changes", "scheduled", "already", "silent"), (50, 25, 10, 15))[0]
    created = rng.randrange(0, LAST - 5)
    plan.create(created, "x", cue.body(f"Act when {cue.predicate} {cue.op} {cue.value}"))
    if variant == "already":
        plan.act(created, "fact", claim=cue.holding(STEPS[created] - timedelta(hours=2)))
        plan.recall("x", created)
        _fired_then_done(plan, "x", created)
        return plan.spec(
            "e3", number, f"E3 state {cue.predicate} {cue.op}: holds when made", variant
        )
    if cue.initial is not None:
        plan.act(created, "fact", claim=cue.claim(cue.initial, STEPS[created] - timedelta(hours=2)))
    plan.quiet("x", created, "the condition does not hold yet")
    kinds = cue.distractors()
    steps = sorted(rng.sample(range(created + 1, created + 5), rng.randrange(1, 4)))
    for step in steps:
        kind = rng.choice(kinds)
        plan.act(step, "fact", claim=cue.distractor(kind, STEPS[step] - timedelta(minutes=30)))
        plan.quiet("x", step, f"a distractor fact: {kind}")
    if variant == "silent":
        plan.quiet("x", LAST, "no fact ever satisfied the condition")
        return plan.spec("e3", number, f"E3 state {cue.predicate} {cue.op}: never holds", variant)
    fires = rng.randrange(steps[-1] + 1, LAST)
    posted = fires - 1 if variant == "scheduled" else fires
    plan.act(posted, "fact", claim=cue.holding(STEPS[fires] - timedelta(minutes=20)))
    if variant == "scheduled":
        plan.quiet("x", posted, "a satisfying fact, valid only from after this tick")
    plan.recall("x", fires)
    _fired_then_done(plan, "x", fires)
    return plan.spec(
        "e3", number, f"E3 state {cue.predicate} {cue.op}: holds from step {fires}", variant
    )


# ------------------------------------------------------------------ E4 dependency


def _manual_body(rng: random.Random, token: str, what: str) -> dict[str, Any]:
    return {
        "description": _description(rng, token, what),
        "trigger_type": "manual",
        "priority": rng.randrange(0, 3),
    }


def _dependent_body(rng: random.Random, token: str, what: str) -> dict[str, Any]:
    return {
        "description": _description(rng, token, what),
        "trigger_type": "dependency",
        "priority": rng.randrange(0, 3),
    }


def e4_dependency(draw: Draw, count: int) -> list[ItemSpec]:
    """Dependency triggers fire only once every dependency has completed (a
    dependency that fired is not done; a cancelled one never is: its blocked
    dependent is cancelled with it, not left blocked), and chains fire link by
    link, in order."""
    return [_e4_item(draw, number) for number in range(1, count + 1)]


def _e4_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    variant = rng.choices(
        ("fan_in", "cancelled_dependency", "made_after", "chain"), (45, 15, 15, 25)
    )[0]
    if variant == "chain":
        return _e4_chain(draw, number)
    token = draw.token()
    plan = Plan(token)
    count = rng.randrange(2, 5)
    created = rng.randrange(0, 3)
    done_steps = sorted(rng.sample(range(created + 1, LAST - 2), count))
    refs = [f"d{i + 1}" for i in range(count)]
    order = rng.sample(refs, count)  # the order they complete in
    fired_deps: dict[str, int] = {}
    for ref in refs:
        done = done_steps[order.index(ref)]
        if rng.random() < 0.3 and done - 1 > created:  # a timed dependency: fires, then is done
            fires = rng.randrange(created + 1, done)
            plan.create(created, ref, _time_body(rng, token, between(rng, fires)))
            plan.recall(ref, fires)
            plan.once(ref)
            fired_deps[ref] = fires
        else:
            plan.create(created, ref, _manual_body(rng, token, f"Prerequisite {ref}"))
    cancelled = rng.choice(refs) if variant == "cancelled_dependency" else None
    made = done_steps[-1] + 1 if variant == "made_after" else created
    body = _dependent_body(rng, token, "Ship once every prerequisite is done")
    for ref, done in zip(order, done_steps, strict=True):
        if ref == cancelled:
            plan.cancel(ref, done)
        else:
            plan.complete(ref, done)
    plan.create(made, "x", body, deps=refs)
    if variant != "made_after":
        for ref, done in zip(order[:-1], done_steps[:-1], strict=True):
            plan.quiet(
                "x", done, f"{ref} {'cancelled' if ref == cancelled else 'completed'}, others not"
            )
        for ref, fires in fired_deps.items():
            if fires < done_steps[-1]:
                plan.quiet("x", fires, f"{ref} fired but is not done")
    if cancelled is not None:
        plan.quiet("x", done_steps[-1], f"every dependency done but {cancelled}, cancelled")
        plan.quiet("x", LAST, f"{cancelled} was cancelled, never completed")
        plan.check("settled", "zombie", ref="x", dependency=cancelled)
        title = f"E4 dependency: {count} prerequisites, one cancelled: never fires"
    else:
        fires = made if variant == "made_after" else done_steps[-1]
        plan.recall("x", fires)
        _fired_then_done(plan, "x", fires)
        title = (
            f"E4 dependency: made after its {count} prerequisites completed"
            if variant == "made_after"
            else f"E4 dependency: {count} prerequisites completed at steps {done_steps}"
        )
    return plan.spec("e4", number, title, variant)


def _e4_chain(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    count = rng.randrange(3, 5)
    created = rng.randrange(0, 3)
    refs = [f"d{i + 1}" for i in range(count)]
    first_done = rng.randrange(created + 1, LAST - count)
    plan.create(created, refs[0], _manual_body(rng, token, "Start of the chain"))
    for previous, ref in zip(refs, refs[1:], strict=False):
        plan.create(
            created,
            ref,
            _dependent_body(rng, token, f"Step {ref} after {previous}"),
            deps=[previous],
        )
    for later in refs[1:]:
        plan.quiet(later, created, "nothing in the chain is done yet")
    plan.complete(refs[0], first_done)
    for index, ref in enumerate(refs[1:], start=1):
        fires = first_done + index - 1  # when the one before it completed
        plan.recall(ref, fires)
        for later in refs[index + 1 :]:
            plan.quiet(later, fires, f"{ref} fired but is not done")
        _fired_then_done(plan, ref, fires)
    return plan.spec(
        "e4",
        number,
        f"E4 dependency chain of {count}, link by link from step {first_done}",
        "chain",
    )


# -------------------------------------------------------------------- E5 handover


def e5_handover(draw: Draw, count: int) -> list[ItemSpec]:
    """A thread's intentions survive its handover: the resume lists the open
    ones (due and overdue first) and not the finished ones, the fired one is
    pending, the successor inherits them all, and they fire afterwards."""
    return [_e5_item(draw, number) for number in range(1, count + 1)]


def _e5_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    first, successor = f"session-{token}-1", f"session-{token}-2"
    created = rng.randrange(0, 3)
    handover = rng.randrange(created + 2, LAST - 4)
    resume = handover + 1
    thread = {
        "key": f"e5-{token}",
        "session": first,
        "state": {
            "goal": f"Keep the promises of {token} across a restart",
            "next_action": {"tool": "resume", "thread": f"e5-{token}"},
        },
    }
    plan.act(created, "thread", ref="t", **thread)
    session = {"thread": "t", "source_session": first}
    early = rng.randrange(created + 1, handover)
    plan.create(created, "early", _time_body(rng, token, between(rng, early)), **session)
    plan.recall("early", early)
    opened = ["early"]
    overdue = rng.random() < 0.5
    if overdue:  # due while the thread is handed over: overdue when resumed
        plan.create(created, "overdue", _time_body(rng, token, between(rng, resume)), **session)
        plan.quiet("overdue", handover, "due only after this tick")
        plan.recall("overdue", resume, metric="handover_fire")
        opened.append("overdue")
    later = rng.randrange(resume + 1, LAST)
    plan.create(created, "later", _time_body(rng, token, between(rng, later)), **session)
    plan.quiet("later", later - 1, "the tick before due_at")
    plan.recall("later", later, metric="handover_fire")
    opened.append("later")
    if rng.random() < 0.5:
        spec, cue, _ = event_trigger(draw, token)
        body = {
            "description": _description(rng, token, f"React to {spec['event_type']}"),
            "trigger_type": "event",
            "trigger_spec": spec,
        }
        plan.create(created, "event", body, **session)
        cue_step = rng.randrange(resume + 1, LAST)
        plan.act(cue_step, "event", event=cue)
        plan.recall("event", cue_step, metric="handover_fire")
        opened.append("event")
    finished = rng.random() < 0.5
    if finished:  # done before the handover: not the successor's business
        plan.create(created, "done", _manual_body(rng, token, "Already handled"), **session)
        plan.complete("done", created + 1)
    plan.act(
        handover, "handover", ref="t", to=successor, **{"from": first}, note=f"restart of {token}"
    )
    plan.act(resume, "resume", ref="t", session=successor)
    plan.act(resume, "acknowledge", ref="t", session=successor)
    for ref in opened:
        plan.check("listed", "handover", thread="t", ref=ref, step=resume)
        plan.check("inherited", "handover", ref=ref, session=successor)
    if finished:
        plan.check("unlisted", "handover", thread="t", ref="done", step=resume)
    plan.check(
        "order",
        "handover",
        thread="t",
        step=resume,
        groups=[
            ["early"],
            ["overdue"] if overdue else [],
            [r for r in opened if r not in ("early", "overdue")],
        ],
    )
    plan.check("pending", "handover", thread="t", ref="early", step=resume)
    fired_at = {"early": early, "overdue": resume, "later": later}
    if "event" in opened:
        fired_at["event"] = cue_step
    for ref in opened:
        # The successor completes each once it has fired (the early one once it holds the thread).
        _fired_then_done(plan, ref, max(fired_at[ref], resume))
    title = f"E5 handover at step {handover}: {len(opened)} open intentions" + (
        ", one done" if finished else ""
    )
    return plan.spec("e5", number, title, "across_gap" if resume == GAP_STEP else "within_day")


# ------------------------------------------------------------------ E6 cancellation

RECURRENCES = (
    ("FREQ=HOURLY;INTERVAL=2", timedelta(hours=2)),
    ("FREQ=HOURLY;INTERVAL=3", timedelta(hours=3)),
    ("FREQ=DAILY", timedelta(days=1)),
)


def e6_cancellation(draw: Draw, count: int) -> list[ItemSpec]:
    """Cancelled intentions never fire and leave the due list: cancelled
    before a time, event or state cue, while due, between two occurrences of
    a recurring one, or while waiting for a dependency that then completes."""
    return [_e6_item(draw, number) for number in range(1, count + 1)]


def _e6_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    variant = rng.choice(("time", "time", "event", "state", "while_due", "recurring", "dependency"))
    created = rng.randrange(0, LAST - 5)
    if variant == "time":
        fires = rng.randrange(created + 1, LAST)
        plan.create(created, "x", _time_body(rng, token, between(rng, fires)))
        plan.cancel("x", rng.randrange(created, fires))
        title = f"E6 cancelled before its time (step {fires})"
    elif variant == "event":
        spec, cue, _ = event_trigger(draw, token)
        plan.create(
            created,
            "x",
            {
                "description": _description(rng, token, "React"),
                "trigger_type": "event",
                "trigger_spec": spec,
            },
        )
        cancel = rng.randrange(created, LAST - 1)
        plan.cancel("x", cancel)
        plan.act(rng.randrange(cancel, LAST), "event", event=cue)
        title = f"E6 cancelled before its event {cue['event_type']}"
    elif variant == "state":
        cue = StateCue(draw, token)
        plan.create(created, "x", cue.body("Act on the fact"))
        if cue.initial is not None:
            plan.act(
                created, "fact", claim=cue.claim(cue.initial, STEPS[created] - timedelta(hours=2))
            )
        cancel = rng.randrange(created, LAST - 1)
        plan.cancel("x", cancel)
        holds = rng.randrange(cancel, LAST)
        plan.act(holds, "fact", claim=cue.holding(STEPS[holds] - timedelta(minutes=20)))
        title = f"E6 cancelled before {cue.predicate} {cue.op} held"
    elif variant == "while_due":
        fires = rng.randrange(created + 1, LAST)
        plan.create(created, "x", _time_body(rng, token, between(rng, fires)))
        plan.recall("x", fires)
        plan.cancel("x", fires + 1)
        plan.once("x")
        title = f"E6 cancelled while due (fired at step {fires})"
    elif variant == "recurring":
        while True:
            rule, interval = rng.choice(RECURRENCES)
            first = rng.randrange(created + 1, LAST - 2)
            due = between(rng, first)
            second = fire_step(due + interval, first + 2)
            if second is not None and STEPS[first + 1] < due + interval:
                break
        plan.create(created, "x", _time_body(rng, token, due, rrule=f"{rule};COUNT=3"))
        plan.recall("x", first)
        plan.complete("x", first + 1, last=False)
        plan.cancel("x", rng.randrange(first + 1, second))
        plan.once("x")
        title = f"E6 recurring ({rule}) cancelled between occurrences 1 and 2"
    else:
        plan.create(created, "d", _manual_body(rng, token, "Prerequisite"))
        plan.create(created, "x", _dependent_body(rng, token, "After the prerequisite"), deps=["d"])
        cancel = rng.randrange(created, LAST - 1)
        plan.cancel("x", cancel)
        plan.complete("d", rng.randrange(cancel, LAST))
        title = "E6 cancelled while waiting for a dependency that then completes"
    return plan.spec("e6", number, title, variant)


# ------------------------------------------------------------ E7 completion


def e7_completion(draw: Draw, count: int) -> list[ItemSpec]:
    """Completed one-shots never fire again (the cue repeated, the condition
    still holding, time going on); recurring ones move to their next
    occurrence, fire at it, and stop when the rule ends."""
    return [_e7_item(draw, number) for number in range(1, count + 1)]


def _e7_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    variant = rng.choice(("time", "event", "state", "recurring", "recurring", "recurring_skip"))
    if variant.startswith("recurring"):
        return _e7_recurring(draw, plan, number, skip=variant == "recurring_skip")
    created = rng.randrange(0, LAST - 4)
    fires = rng.randrange(created + 1, LAST - 1)
    if variant == "time":
        plan.create(created, "x", _time_body(rng, token, between(rng, fires)))
        title = f"E7 one-shot time trigger completed at step {fires + 1}"
    elif variant == "event":
        spec, cue, _ = event_trigger(draw, token)
        plan.create(
            created,
            "x",
            {
                "description": _description(rng, token, "React"),
                "trigger_type": "event",
                "trigger_spec": spec,
            },
        )
        plan.act(fires, "event", event=cue)
        for step in sorted(rng.sample(range(fires + 1, LAST + 1), min(2, LAST - fires))):
            plan.act(step, "event", event=_mutated(cue, {"payload.n": step}))
        title = "E7 one-shot event trigger completed, then its cue again"
    else:
        cue = StateCue(draw, token)
        plan.create(created, "x", cue.body("Act on the fact"))
        if cue.initial is not None:
            plan.act(
                created, "fact", claim=cue.claim(cue.initial, STEPS[created] - timedelta(hours=2))
            )
        plan.act(fires, "fact", claim=cue.holding(STEPS[fires] - timedelta(minutes=20)))
        again = rng.randrange(fires + 1, LAST + 1)
        plan.act(again, "fact", claim=cue.holding(STEPS[again] - timedelta(minutes=10)))
        title = f"E7 one-shot state trigger completed while {cue.predicate} {cue.op} still holds"
    plan.recall("x", fires)
    _fired_then_done(plan, "x", fires)
    return plan.spec("e7", number, title, variant)


def _e7_recurring(draw: Draw, plan: Plan, number: int, *, skip: bool) -> ItemSpec:
    """Occurrence i fires at the first tick after it; the agent completes (or
    skips) it at the next step, which schedules i+1 strictly after then."""
    rng = draw.rng
    while True:
        rule, interval = rng.choice(RECURRENCES)
        occurrences = rng.choice((2, 3))
        created = rng.randrange(0, 4)
        first = rng.randrange(created + 1, GAP_STEP + 2)
        due = STEPS[first] if rng.random() < 0.2 else between(rng, first)
        fired, done, ok = [], [], True
        after = created
        for index in range(occurrences):
            moment = due + index * interval
            if index and moment <= STEPS[done[-1]]:
                ok = False  # the next occurrence would already be past: redraw
                break
            step = fire_step(moment, after)
            if step is None or step + 1 > LAST:
                ok = False
                break
            fired.append(step)
            done.append(step + 1)
            after = step + 1
        if ok:
            break
    token = plan.token
    body = _time_body(rng, token, due, rrule=f"{rule};COUNT={occurrences}")
    plan.create(created, "x", body)
    for index, (step, finish) in enumerate(zip(fired, done, strict=True)):
        occurrence = index + 1
        if index:
            plan.quiet(
                "x",
                step - 1,
                f"occurrence {occurrence} is due only at {iso(due + index * interval)}",
            )
        plan.recall("x", step, occurrence=occurrence)
        plan.complete(
            "x", finish, op="skip" if skip else "complete", last=occurrence == occurrences
        )
    plan.once("x", range(1, occurrences + 1))
    how = "skipped" if skip else "completed"
    title = f"E7 recurring {rule};COUNT={occurrences} ({token}), each {how}, at steps {fired}"
    return plan.spec("e7", number, title, "recurring_skip" if skip else "recurring")


# --------------------------------------------------- E8 promises of no thread


def e8_threadless(draw: Draw, count: int) -> list[ItemSpec]:
    """A session's promises that belong to no thread survive its handover: the
    successor's resume lists them (beside the run's hundreds of other reminders,
    many more urgent), and they fire afterwards, once."""
    return [_e8_item(draw, number) for number in range(1, count + 1)]


def _e8_item(draw: Draw, number: int) -> ItemSpec:
    rng = draw.rng
    token = draw.token()
    plan = Plan(token)
    first, successor = f"session-{token}-1", f"session-{token}-2"
    created = rng.randrange(0, 3)
    handover = rng.randrange(created + 2, LAST - 4)
    resume = handover + 1
    plan.act(
        created,
        "thread",
        ref="t",
        key=f"e8-{token}",
        session=first,
        state={"goal": f"Answer the customer for {token}", "next_action": "draft the reply"},
    )
    promises = ["promise"] + (["second"] if rng.random() < 0.5 else [])
    fired_at = {}
    for ref in promises:
        due = rng.randrange(resume + 1, LAST)
        body = _time_body(rng, token, between(rng, due))
        body["description"] = _description(rng, token, rng.choice(TASKS) + " (no thread)")
        plan.create(created, ref, body, source_session=first)
        plan.quiet(ref, due - 1, "the tick before due_at")
        plan.recall(ref, due, metric="handover_fire")
        fired_at[ref] = due
    plan.act(
        handover, "handover", ref="t", to=successor, **{"from": first}, note=f"restart {token}"
    )
    plan.act(resume, "resume", ref="t", session=successor)
    plan.act(resume, "acknowledge", ref="t", session=successor)
    for ref in promises:
        plan.check("listed", "handover", thread="t", ref=ref, step=resume)
        _fired_then_done(plan, ref, fired_at[ref])
    title = f"E8 handover at step {handover}: {len(promises)} promises of no thread"
    return plan.spec("e8", number, title, "across_gap" if resume == GAP_STEP else "within_day")


KINDS: dict[str, Callable[[Draw, int], list[ItemSpec]]] = {
    "e1": e1_time,
    "e2": e2_event,
    "e3": e3_state,
    "e4": e4_dependency,
    "e5": e5_handover,
    "e6": e6_cancellation,
    "e7": e7_completion,
    "e8": e8_threadless,
}


def generate(rng: random.Random, counts: dict[str, int] | None = None) -> list[ItemSpec]:
    """Every item of a run, E1 to E8, in that order."""
    counts = {**COUNTS, **(counts or {})}
    draw = Draw(rng)
    return [spec for kind, make in KINDS.items() for spec in make(draw, counts[kind])]
