"""consolidation.skill_mining: a trace's shape, and the skill definition a shape becomes."""

from __future__ import annotations

import base64
import hashlib
import re
import zlib

import pytest

from consolidation import skill_mining
from consolidation.skill_mining import NotReplayable, TraceSeen, shape_of
from skills import tools


def fingerprint_trace(text: str) -> tuple[dict, list, str]:
    digest = hashlib.sha256(text.encode()).hexdigest()
    encoded = base64.b64encode(digest.encode()).decode()
    steps = [
        {"tool": "sha256", "args": {"text": text}, "result": digest},
        {"tool": "base64_encode", "args": {"text": digest}, "result": encoded},
    ]
    return {"document": text}, steps, encoded


def order_number_trace(line: str) -> tuple[dict, list, int]:
    found = re.search(r"\d+", line)
    match = {"match": found.group(0), "groups": [], "named": {}}
    checksum = zlib.crc32(found.group(0).encode())
    steps = [
        {"tool": "regex_match", "args": {"pattern": r"\d+", "text": line}, "result": match},
        {"tool": "crc32", "args": {"text": found.group(0)}, "result": checksum},
    ]
    return {"line": line}, steps, checksum


class TestShape:
    def test_traces_of_one_procedure_with_other_inputs_share_a_shape(self):
        a = shape_of(*fingerprint_trace("invoice 4411, Okafor Ltd"))
        b = shape_of(*fingerprint_trace("credit note 17 for Brandt GmbH"))
        assert a.key == b.key
        assert a.steps == (
            ("sha256", (("text", 'input:"document"'),)),
            ("base64_encode", (("text", "step:0"),)),
        )
        assert a.output == "step:1"
        assert a.tools == ["sha256", "base64_encode"]

    def test_another_data_flow_is_another_shape(self):
        inputs, steps, output = fingerprint_trace("invoice 4411")
        # The second step encodes the input again instead of the digest.
        steps[1] = {
            "tool": "base64_encode",
            "args": {"text": "invoice 4411"},
            "result": base64.b64encode(b"invoice 4411").decode(),
        }
        other = shape_of(inputs, steps, steps[1]["result"])
        assert other.key != shape_of(*fingerprint_trace("invoice 4411")).key

    def test_a_field_of_an_earlier_result_is_a_source(self):
        shape = shape_of(*order_number_trace("Order 1234 shipped to Leeds"))
        assert shape.steps[0][1] == (("pattern", 'const:"\\\\d+"'), ("text", 'input:"line"'))
        assert shape.steps[1][1] == (("text", 'step:0:"match"'),)
        assert shape.key == shape_of(*order_number_trace("parcel 98 returned")).key

    def test_an_output_from_nowhere_is_not_replayable(self):
        inputs, steps, _ = fingerprint_trace("invoice 4411")
        with pytest.raises(NotReplayable):
            shape_of(inputs, steps, "a value no step produced")

    def test_a_constant_that_differs_is_another_shape(self):
        a = shape_of(*order_number_trace("Order 1234"))
        inputs, steps, output = order_number_trace("Order 1234")
        steps[0]["args"]["pattern"] = r"[0-9]+"
        assert shape_of(inputs, steps, output).key != a.key


class RealTools:
    """The tools as the sandbox offers them (call by name), run here."""

    def call(self, name, args):
        return tools.TOOLS[name].run(None, args)


def run_generated(source: str) -> dict:
    scope: dict = {}
    exec(compile(source, "<generated>", "exec"), scope)  # noqa: S102 - our own generated code
    return scope


class TestDefinition:
    def traces(self, maker, texts):
        seen = []
        for i, text in enumerate(texts):
            inputs, _, output = maker(text)
            seen.append(
                TraceSeen(f"e{i}", f"Fingerprint the scanned {text} for the ledger", inputs, output)
            )
        return seen

    def test_the_procedure_reproduces_every_trace(self):
        texts = ["invoice 4411", "credit note 17", "receipt 9"]
        shape = shape_of(*fingerprint_trace(texts[0]))
        fields = skill_mining.definition(shape, self.traces(fingerprint_trace, texts))
        scope = run_generated(fields["procedure"])
        for case in fields["examples"]:
            assert scope["run"](case["params"], RealTools()) == case["expected"]
        checker: dict = {}
        exec(compile(fields["validator"], "<validator>", "exec"), checker)  # noqa: S102
        assert checker["validate"]({}, "text", None)["passed"] is True
        assert checker["validate"]({}, None, None)["passed"] is False
        assert fields["parameter_schema"] == {
            "type": "object",
            "properties": {"document": {"type": "string"}},
            "required": ["document"],
            "additionalProperties": False,
        }
        assert fields["required_tools"] == ["sha256", "base64_encode"]
        assert {"fingerprint", "scanned", "ledger"} <= set(fields["trigger"]["keywords"])
        assert fields["purpose"].startswith("Learned from 3 verified traces")

    def test_a_field_access_is_generated_for_a_field_source(self):
        texts = ["Order 1234 shipped", "parcel 98 returned", "crate 7 lost"]
        shape = shape_of(*order_number_trace(texts[0]))
        fields = skill_mining.definition(shape, self.traces(order_number_trace, texts))
        scope = run_generated(fields["procedure"])
        for case in fields["examples"]:
            assert scope["run"](case["params"], RealTools()) == case["expected"]
        assert fields["parameter_schema"]["properties"] == {"line": {"type": "string"}}

    def test_repeated_inputs_count_once_and_split_into_examples_and_holdout(self):
        texts = [f"invoice {n}" for n in range(8)] + ["invoice 0", "invoice 1"]
        shape = shape_of(*fingerprint_trace(texts[0]))
        seen = self.traces(fingerprint_trace, texts)
        assert len(skill_mining.distinct_inputs(seen)) == 8
        fields = skill_mining.definition(shape, seen)
        assert len(fields["examples"]) == skill_mining.MAX_EXAMPLES
        assert len(fields["holdout"]) == 3

    def test_names_and_constants_are_python_literals_whatever_they_hold(self):
        inputs = {'odd "name"\\': "x y"}
        steps = [{"tool": "hmac_sha256", "args": {"key": "k'\"\n", "text": "x y"}, "result": "h"}]
        shape = shape_of(inputs, steps, "h")
        source = skill_mining.procedure(shape)
        compile(source, "<generated>", "exec")
        scope = run_generated(source)
        calls = []

        class Recording:
            def call(self, name, args):
                calls.append((name, args))
                return "h"

        assert scope["run"](inputs, Recording()) == "h"
        assert calls == [("hmac_sha256", {"key": "k'\"\n", "text": "x y"})]


def test_keywords_are_words_most_tasks_share():
    words = skill_mining.keywords(
        [
            "Fingerprint the scanned invoice for the audit ledger",
            "fingerprint a scanned credit note for the ledger",
            "Fingerprint scanned receipt",
        ]
    )
    assert words[0] == "fingerprint"
    assert set(words) == {"fingerprint", "scanned", "ledger"}
