"""The admins' display helpers (piper.admin_display)."""

from piper.admin_display import compact_json, preformatted, pretty_json

PRE = '<pre style="white-space: pre-wrap; margin: 0">{}</pre>'


def test_preformatted_escapes_and_marks_empty_text():
    assert preformatted("a < b") == PRE.format("a &lt; b")
    assert preformatted("") == PRE.format("-")


def test_pretty_json_is_indented_with_sorted_keys():
    assert pretty_json({"b": 1, "a": "é"}) == PRE.format(
        "{\n  &quot;a&quot;: &quot;é&quot;,\n  &quot;b&quot;: 1\n}"
    )


def test_compact_json_is_one_line_as_stored():
    assert compact_json({"b": [1, 2], "a": "é"}) == '{"b": [1, 2], "a": "é"}'
    assert compact_json(None) == "null"
