"""Stored failure codes take the meanings DESIGN §9 gives them.

Before, R0 meant "exists but not found", R1 "a wrong or stale memory
returned", R2 "ranked below noise", R3 "returned what must not be", S0 "not
executed or failed" and S1 "applied where it does not fit". Each stored code
is rewritten to the code of its meaning today; where one old code covered
failures that now have different codes, to the one most of them have (the
suites now tell them apart). Every other code kept its meaning.

Codes are stored in ItemResult.failure_code, in the "code" of each entry of
ItemResult.metrics["misses"] (suites A and C), and in the list of further
misses that ends a detail ("... (and 2 more: R0, R1)"). Every code is mapped
once, from its old meaning: a mapped code is never mapped again. Run reports
already written to disk are not rewritten. The reverse leaves codes as they
are: the old meanings cannot be told apart again.
"""

import re

from django.db import migrations, models
from django.db.models import Case, Value, When

CODE_MAP: dict[str, str] = {
    "R0": "R2",  # exists but not found: not among the candidates
    "R1": "R3",  # a wrong or stale memory returned: a stale or irrelevant one outranked it
    "R2": "R3",  # ranked below noise: outranked
    "S0": "S1",  # not executed or failed: selected but not followed
    "S1": "S2",  # applied where it does not fit: negative transfer
}

MORE_CODES = re.compile(r"\(and (\d+) more: ([A-Z0-9, ]+)\)$")
BATCH = 1000


def code_remap(code: str) -> str:
    """The code of today's meaning for a code stored under the old one."""
    return CODE_MAP.get(code, code)


def misses_remap(metrics: dict) -> dict | None:
    """The metrics with each miss's code remapped, or None when nothing changes."""
    misses = metrics.get("misses")
    if not isinstance(misses, list):
        return None
    remapped = [
        {**miss, "code": code_remap(miss["code"])}
        if isinstance(miss, dict) and isinstance(miss.get("code"), str)
        else miss
        for miss in misses
    ]
    return None if remapped == misses else {**metrics, "misses": remapped}


def detail_remap(detail: str) -> str:
    """The detail with the codes of its closing "(and N more: ...)" remapped."""

    def more(match: re.Match) -> str:
        codes = ", ".join(code_remap(code.strip()) for code in match.group(2).split(","))
        return f"(and {match.group(1)} more: {codes})"

    return MORE_CODES.sub(more, detail)


def codes_remap(apps, schema_editor) -> None:
    ItemResult = apps.get_model("battery", "ItemResult")
    # One UPDATE, so that no code is mapped twice (R0 -> R2 must not then go on to R3).
    ItemResult.objects.filter(failure_code__in=list(CODE_MAP)).update(
        failure_code=Case(
            *(When(failure_code=old, then=Value(new)) for old, new in CODE_MAP.items()),
            default="failure_code",
        )
    )
    rows = (
        ItemResult.objects.filter(passed=False)
        .filter(metrics__has_key="misses")
        .only("id", "metrics", "detail")
    )
    changed = []
    for row in rows.iterator(chunk_size=BATCH):
        metrics = misses_remap(row.metrics)
        detail = detail_remap(row.detail)
        if metrics is None and detail == row.detail:
            continue
        row.metrics = row.metrics if metrics is None else metrics
        row.detail = detail
        changed.append(row)
        if len(changed) >= BATCH:
            ItemResult.objects.bulk_update(changed, ["metrics", "detail"])
            changed = []
    if changed:
        ItemResult.objects.bulk_update(changed, ["metrics", "detail"])


class Migration(migrations.Migration):
    dependencies = [("battery", "0002_run_incomplete_score_of_run")]

    operations = [
        migrations.AlterField(
            model_name="itemresult",
            name="failure_code",
            field=models.CharField(blank=True, choices=[("W0", "W0 write: the memory was not stored, or stored wrongly"), ("W1", "W1 consolidation: stored, but not consolidated or derived correctly"), ("R0", "R0 retrieval: the need to look was not detected (the agent did not look)"), ("R1", "R1 retrieval: the wrong store, or a poor query"), ("R2", "R2 retrieval: the memory was not among the candidates"), ("R3", "R3 retrieval: a stale or irrelevant memory outranked it"), ("A0", "A0 attention: in context, but ignored"), ("U0", "U0 use: used wrongly"), ("P0", "P0 prospective: an intention did not fire when due"), ("P1", "P1 prospective: an intention fired wrongly (twice, early, or after cancel)"), ("S0", "S0 skill: the skill was not retrieved"), ("S1", "S1 skill: selected, but not followed (not executed, or its execution failed)"), ("S2", "S2 skill: negative transfer, a skill applied where it does not fit"), ("I0", "I0 integrity: tampering or a broken chain went undetected")], default="", help_text="Where memory broke (the failure taxonomy); empty when the item passed.", max_length=2),
        ),
        migrations.RunPython(codes_remap, migrations.RunPython.noop, elidable=False),
    ]
