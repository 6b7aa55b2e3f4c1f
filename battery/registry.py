"""The suite registry. A suite is a module in battery/suites/ that builds a Suite,
declares its items with `@suite.item(...)` and calls `register(suite)`; the
runner finds it by importing every module of that package.

An item is a function of an ItemContext. It returns its metrics (a JSON-able
dict, or None) when it passes, and raises ItemFailure with a failure code from
the taxonomy when memory broke. Any other exception is also a failure, under
the item's default code, with the traceback's tail as the detail.

A suite may also declare generated items (`suite.generated(...)`): a pure
function of the run's seeded randomness draws the items (the same seed, the
same items), one `prepare` writes the world they need in batches, and one
`check` per item asks its questions. Each generated item is stored as its own
result. Suites may gate named metrics (MetricGate) besides their pass rate.
"""

from __future__ import annotations

import importlib
import pkgutil
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from piper.errors import InvalidInput

from .taxonomy import FailureCode

if TYPE_CHECKING:
    from .runner import ItemContext

# DESIGN.md §9: A15 B15 C20 D20 E20 F10 (issue 21 gives F its 10); G, the
# metamemory suite added beside them, 5. L is an integrity gate, not
# behaviour, so it carries no weight.
DESIGN_WEIGHTS: dict[str, float] = {
    "A": 15,
    "B": 15,
    "C": 20,
    "D": 20,
    "E": 20,
    "F": 10,
    "G": 5,
    "H": 0,  # live carry-over: reported and gated, not weighted (DESIGN §9 weighs A-F)
    "L": 0,
}

SUITE_CODE = re.compile(r"^[A-Z][A-Z0-9]{0,3}$")  # BatteryRun.suites holds up to 4 characters
ITEM_KEY = re.compile(r"^[a-z][a-z0-9_]{0,99}$")

ItemFunc = Callable[["ItemContext"], Mapping[str, Any] | None]


class ItemFailure(Exception):
    """An item found memory at fault: `code` says where (taxonomy), `detail` what."""

    def __init__(
        self, code: FailureCode | str, detail: str, *, metrics: Mapping[str, Any] | None = None
    ):
        super().__init__(f"{code}: {detail}")
        self.code = FailureCode(code)
        self.detail = detail
        self.metrics = dict(metrics or {})


def expect(condition: bool, code: FailureCode, detail: str) -> None:
    if not condition:
        raise ItemFailure(code, detail)


def expect_equal(actual: Any, expected: Any, *, code: FailureCode, what: str) -> None:
    if actual != expected:
        raise ItemFailure(code, f"{what}: expected {expected!r}, got {actual!r}")


@dataclass(frozen=True)
class Item:
    key: str
    title: str
    run: ItemFunc
    default_code: FailureCode


@dataclass(frozen=True)
class ItemSpec:
    """One generated item, drawn before anything is written.

    `data` is what the suite's prepare and check need (not stored); `metrics`
    is stored with the item's result whether it passes or fails, so a summary
    can count what the item was meant to measure even when it crashed.
    """

    key: str
    title: str
    default_code: FailureCode
    data: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Any] = field(default_factory=dict)


Generate = Callable[[random.Random], Sequence[ItemSpec]]
Prepare = Callable[["ItemContext", Sequence[ItemSpec]], Any]
Check = Callable[["ItemContext", ItemSpec, Any], Mapping[str, Any] | None]


@dataclass(frozen=True)
class Generator:
    """Generated items: `generate(rng)` draws them (pure: no I/O, nothing but
    rng), `prepare(ctx, specs)` writes their world once and returns a state,
    `check(ctx, spec, state)` runs one item like a declared item's function.
    If prepare raises, every item fails with its ItemFailure code, or with
    `setup_code` for any other exception."""

    key: str
    generate: Generate
    prepare: Prepare
    check: Check
    setup_code: FailureCode = FailureCode.W0


@dataclass(frozen=True)
class MetricGate:
    """A bound on a metric the suite's summary reports; unreported fails."""

    metric: str
    minimum: float | None = None
    maximum: float | None = None

    def __post_init__(self) -> None:
        if (self.minimum is None) == (self.maximum is None):
            raise ValueError(f"metric gate {self.metric}: give a minimum or a maximum")

    @property
    def name(self) -> str:
        if self.minimum is not None:
            return f"{self.metric} >= {self.minimum:g}"
        return f"{self.metric} <= {self.maximum:g}"

    def holds(self, value: float | None) -> bool:
        if value is None:
            return False
        if self.minimum is not None:
            return value >= self.minimum
        return value <= self.maximum


@dataclass(frozen=True)
class ItemOutcome:
    """What one item did in one run."""

    suite: str
    item: str
    title: str
    passed: bool
    failure_code: str
    detail: str
    metrics: dict[str, Any]
    duration_ms: float
    generator: str = ""  # the Generator's key, for a generated item


@dataclass(frozen=True)
class SuiteSummary:
    """A suite's own score (0-100) and the named metrics the caps look at."""

    score: float
    metrics: dict[str, float] = field(default_factory=dict)


def pass_rate(outcomes: Sequence[ItemOutcome]) -> float:
    return sum(o.passed for o in outcomes) / len(outcomes) if outcomes else 0.0


def default_summary(outcomes: Sequence[ItemOutcome]) -> SuiteSummary:
    return SuiteSummary(score=pass_rate(outcomes) * 100)


@dataclass
class Suite:
    code: str
    name: str
    description: str
    weight: float
    gate: float = 1.0  # minimum pass rate, 0-1
    summarize: Callable[[Sequence[ItemOutcome]], SuiteSummary] = default_summary
    metric_gates: tuple[MetricGate, ...] = ()
    items: list[Item] = field(default_factory=list)
    generators: list[Generator] = field(default_factory=list)
    # Why the suite has nothing to measure now (suite H with no live use in its
    # window), or None. A suite with nothing to measure does not run: it counts
    # 0 and the run is incomplete, never passed.
    unavailable: Callable[[], str | None] | None = None

    def __post_init__(self) -> None:
        if not SUITE_CODE.match(self.code):
            raise ValueError(f"suite code {self.code!r}: 1-4 upper-case letters or digits")
        if self.weight < 0:
            raise ValueError(f"suite {self.code}: weight must be >= 0")
        if self.code in DESIGN_WEIGHTS and self.weight != DESIGN_WEIGHTS[self.code]:
            raise ValueError(
                f"suite {self.code}: DESIGN.md §9 gives it weight {DESIGN_WEIGHTS[self.code]}, not {self.weight}"
            )
        if not 0.0 <= self.gate <= 1.0:
            raise ValueError(f"suite {self.code}: gate is a pass rate between 0 and 1")

    def item(
        self, key: str, title: str, *, default_code: FailureCode
    ) -> Callable[[ItemFunc], ItemFunc]:
        """Declare the decorated function as this suite's next item."""
        if not ITEM_KEY.match(key):
            raise ValueError(f"item key {key!r}: lower-case letters, digits and '_'")
        if any(existing.key == key for existing in self.items):
            raise ValueError(f"suite {self.code} already has an item {key!r}")

        def declare(func: ItemFunc) -> ItemFunc:
            self.items.append(
                Item(key=key, title=title, run=func, default_code=FailureCode(default_code))
            )
            return func

        return declare

    def generated(
        self,
        key: str,
        *,
        generate: Generate,
        prepare: Prepare,
        check: Check,
        setup_code: FailureCode = FailureCode.W0,
    ) -> Generator:
        """Declare generated items; `key` seeds their draw (see Generator)."""
        if not ITEM_KEY.match(key):
            raise ValueError(f"generator key {key!r}: lower-case letters, digits and '_'")
        if any(existing.key == key for existing in self.generators):
            raise ValueError(f"suite {self.code} already has a generator {key!r}")
        generator = Generator(
            key=key,
            generate=generate,
            prepare=prepare,
            check=check,
            setup_code=FailureCode(setup_code),
        )
        self.generators.append(generator)
        return generator

    def specs(self, generator: Generator, *, seed: int) -> list[ItemSpec]:
        """The items `generator` draws for `seed`: the same seed, the same items.

        Keys must be valid, unique, and not clash with the suite's declared items.
        """
        rng = random.Random(f"{seed}:{self.code}:{generator.key}:generate")
        specs = list(generator.generate(rng))
        taken = {item.key for item in self.items}
        for spec in specs:
            if not ITEM_KEY.match(spec.key):
                raise ValueError(
                    f"generated item key {spec.key!r}: lower-case letters, digits and '_'"
                )
            if spec.key in taken:
                raise ValueError(f"suite {self.code}: generated item key {spec.key!r} is taken")
            taken.add(spec.key)
        return specs

    def item_count(self, *, seed: int = 0) -> int:
        """Declared items plus what the generators draw for `seed`."""
        return len(self.items) + sum(len(self.specs(g, seed=seed)) for g in self.generators)


_suites: dict[str, Suite] = {}
_discovered = False


def register(suite: Suite) -> Suite:
    existing = _suites.get(suite.code)
    if existing is not None and existing is not suite:
        raise ValueError(f"another suite is already registered as {suite.code!r}: {existing.name}")
    _suites[suite.code] = suite
    return suite


def unregister(code: str) -> None:
    _suites.pop(code, None)


@contextmanager
def registered(*suites: Suite) -> Iterator[None]:
    """Register suites for the duration of a block (tests' fake suites)."""
    discover()
    for suite in suites:
        register(suite)
    try:
        yield
    finally:
        for suite in suites:
            unregister(suite.code)


def discover() -> None:
    """Import every module in battery.suites once; each registers its suite."""
    global _discovered
    if _discovered:
        return
    from . import suites as package

    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")
    _discovered = True


def suite_list() -> list[Suite]:
    discover()
    return [_suites[code] for code in sorted(_suites)]


@dataclass(frozen=True)
class DesignedSuite:
    """A suite the battery's total is computed over, whether or not a run ran it."""

    code: str
    name: str
    weight: float
    registered: bool


def designed_suites() -> list[DesignedSuite]:
    """Every suite a total counts, in code order: DESIGN §9's (DESIGN_WEIGHTS),
    registered or not, and every registered suite."""
    suites = {suite.code: suite for suite in suite_list()}
    designed = [
        DesignedSuite(code=code, name=f"suite {code}", weight=weight, registered=False)
        for code, weight in DESIGN_WEIGHTS.items()
        if code not in suites
    ]
    designed += [
        DesignedSuite(code=s.code, name=s.name, weight=s.weight, registered=True)
        for s in suites.values()
    ]
    return sorted(designed, key=lambda suite: suite.code)


def suites_select(*, codes: Sequence[str] | None) -> list[Suite]:
    """The suites named (in code order, each once), or every suite when codes is empty."""
    available = {suite.code: suite for suite in suite_list()}
    wanted = sorted({code.strip().upper() for code in codes or () if code.strip()})
    if not wanted:
        return list(available.values())
    unknown = [code for code in wanted if code not in available]
    if unknown:
        raise InvalidInput(
            f"unknown suite {', '.join(unknown)}; available: {', '.join(available) or 'none'}",
            code="unknown_suite",
            details={"suites": unknown},
        )
    return [available[code] for code in wanted]
