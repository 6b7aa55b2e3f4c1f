import re

import pytest

from battery import registry
from battery.registry import (
    DESIGN_WEIGHTS,
    ItemSpec,
    MetricGate,
    Suite,
    registered,
    suite_list,
    suites_select,
)
from battery.taxonomy import FailureCode
from piper.errors import InvalidInput

from .helpers import fake_generated_suite, fake_suite


def _suite(**overrides) -> Suite:
    return Suite(**{"code": "ZZ", "name": "Z", "description": "", "weight": 1, **overrides})


@pytest.mark.parametrize("code", ["l", "", "ABCDE", "1A", "A-B"])
def test_a_suite_code_is_one_to_four_upper_case_letters_or_digits(code):
    with pytest.raises(ValueError, match="1-4 upper-case letters or digits"):
        _suite(code=code)


def test_design_suites_must_carry_their_design_weight():
    with pytest.raises(ValueError, match=r"suite C: DESIGN.md §9 gives it weight 20, not 15"):
        _suite(code="C", weight=15)
    assert _suite(code="C", weight=20).weight == 20
    assert DESIGN_WEIGHTS == {
        "A": 15,
        "B": 15,
        "C": 20,
        "D": 20,
        "E": 20,
        "F": 10,
        "G": 5,
        "H": 0,
        "L": 0,
    }
    # DESIGN §9's six weights, A to F, sum to 100; G (metamemory) came beside them.
    assert sum(DESIGN_WEIGHTS[code] for code in "ABCDEF") == 100


@pytest.mark.parametrize("overrides", [{"gate": 1.01}, {"gate": -0.1}, {"weight": -1}])
def test_gate_and_weight_ranges(overrides):
    with pytest.raises(ValueError):
        _suite(**overrides)


def test_items_keep_declaration_order_and_unique_keys():
    suite = _suite()

    @suite.item("second_thing", "B", default_code=FailureCode.R0)
    def b(ctx):
        return None

    @suite.item("first_thing", "A", default_code="W0")
    def a(ctx):
        return None

    assert [(i.key, i.title, i.default_code) for i in suite.items] == [
        ("second_thing", "B", FailureCode.R0),
        ("first_thing", "A", FailureCode.W0),
    ]
    with pytest.raises(ValueError, match="suite ZZ already has an item 'first_thing'"):
        suite.item("first_thing", "again", default_code=FailureCode.W0)
    with pytest.raises(ValueError, match="item key 'Bad Key'"):
        suite.item("Bad Key", "bad", default_code=FailureCode.W0)


def test_suite_L_is_discovered_with_its_items_in_order():
    suites = {suite.code: suite for suite in suite_list()}
    ledger = suites["L"]
    assert (ledger.name, ledger.weight, ledger.gate) == ("Ledger integrity", 0, 1.0)
    assert [item.key for item in ledger.items] == [
        "append_read_back",
        "batch_atomic",
        "idempotent_retry",
        "tamper_detected",
        "isolation",
    ]
    assert [item.default_code for item in ledger.items] == [
        FailureCode.W0,
        FailureCode.W0,
        FailureCode.W0,
        FailureCode.I0,
        FailureCode.R3,
    ]


def test_registered_adds_a_suite_for_the_block_only():
    fake = fake_suite("ZQ")
    with registered(fake):
        assert suites_select(codes=["zq"]) == [fake]
        with pytest.raises(ValueError, match="another suite is already registered as 'ZQ'"):
            registry.register(fake_suite("ZQ"))
        registry.register(fake)  # the same object again is a no-op
    assert "ZQ" not in {suite.code for suite in suite_list()}


def test_suites_select_orders_dedupes_and_defaults_to_every_suite():
    first, second = fake_suite("ZA"), fake_suite("ZB")
    with registered(second, first):
        assert suites_select(codes=["ZB", " za", "ZB"]) == [first, second]
        assert suites_select(codes=None) == suite_list()
        assert suites_select(codes=[" "]) == suite_list()
        assert [s.code for s in suite_list()] == sorted(s.code for s in suite_list())


def test_suites_select_refuses_unknown_codes():
    with pytest.raises(InvalidInput) as caught:
        suites_select(codes=["L", "Q9"])
    assert caught.value.code == "unknown_suite"
    assert caught.value.details == {"suites": ["Q9"]}
    assert caught.value.message.startswith("unknown suite Q9; available: ")


def test_generated_items_are_drawn_from_the_seed_and_keyed_by_the_generator():
    suite = fake_generated_suite("ZG", count=4)
    generator = suite.generators[0]
    first = suite.specs(generator, seed=5)
    assert [(s.key, s.title, s.default_code) for s in first] == [
        (f"gen_{i}", f"Generated item {i}", FailureCode.W0) for i in range(4)
    ]
    assert suite.specs(generator, seed=5) == first
    assert [s.data for s in suite.specs(generator, seed=6)] != [s.data for s in first]
    assert (suite.item_count(), len(suite.items)) == (4, 0)


def test_a_generator_needs_a_valid_unique_key():
    suite = fake_generated_suite("ZG")
    with pytest.raises(ValueError, match="suite ZG already has a generator 'gen'"):
        suite.generated("gen", generate=list, prepare=print, check=print)
    with pytest.raises(ValueError, match="generator key 'Gen'"):
        suite.generated("Gen", generate=list, prepare=print, check=print)


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["ok", "Not Ok"], "generated item key 'Not Ok': lower-case letters, digits and '_'"),
        (["twice", "twice"], "suite ZG: generated item key 'twice' is taken"),
        (["declared"], "suite ZG: generated item key 'declared' is taken"),
    ],
)
def test_generated_keys_must_be_valid_unique_and_not_clash_with_declared_items(keys, message):
    suite = _suite(code="ZG")
    suite.item("declared", "A declared item", default_code=FailureCode.W0)(lambda ctx: None)
    generator = suite.generated(
        "bad",
        generate=lambda rng: [
            ItemSpec(key=key, title=key, default_code=FailureCode.W0) for key in keys
        ],
        prepare=print,
        check=print,
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        suite.specs(generator, seed=1)


def test_a_metric_gate_bounds_a_metric_from_below_or_above():
    floor = MetricGate("recall", minimum=0.99)
    ceiling = MetricGate("stale_rate", maximum=0.005)
    assert (floor.name, ceiling.name) == ("recall >= 0.99", "stale_rate <= 0.005")
    assert [floor.holds(v) for v in (0.99, 1.0, 0.9899, None)] == [True, True, False, False]
    assert [ceiling.holds(v) for v in (0.005, 0.0, 0.0051, None)] == [True, True, False, False]
    for bounds in ({}, {"minimum": 0.1, "maximum": 0.2}):
        with pytest.raises(ValueError, match="metric gate x: give a minimum or a maximum"):
            MetricGate("x", **bounds)
