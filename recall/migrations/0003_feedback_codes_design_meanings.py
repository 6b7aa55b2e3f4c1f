"""Stored feedback codes take the meanings DESIGN §9 gives them (as the
battery's did in battery 0003): before, R0 meant "exists but not found", R1
"a wrong or stale memory returned", R2 "ranked below noise". Each is
rewritten to the code of its meaning today; R3, A0 and U0 kept theirs
closely enough to stay. The `recall.feedback` ledger events keep the code as
it was sent: they record what the agent said, under the meaning of the day.
The reverse leaves codes as they are.
"""

from django.db import migrations, models
from django.db.models import Case, F, Value, When

CODE_MAP = {"R0": "R2", "R1": "R3", "R2": "R3"}


def remap(apps, schema_editor):
    feedback = apps.get_model("recall", "RecallFeedback")
    feedback.objects.filter(failure_code__in=list(CODE_MAP)).update(
        failure_code=Case(
            *(When(failure_code=old, then=Value(new)) for old, new in CODE_MAP.items()),
            default=F("failure_code"),
        )
    )


class Migration(migrations.Migration):
    dependencies = [
        ("recall", "0002_context_traces"),
    ]

    operations = [
        migrations.RunPython(remap, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="recallfeedback",
            name="failure_code",
            field=models.CharField(
                blank=True,
                choices=[
                    (
                        "R0",
                        "R0 retrieval: the need to look was not detected (the agent did not look)",
                    ),
                    ("R1", "R1 retrieval: the wrong store, or a poor query"),
                    ("R2", "R2 retrieval: the memory was not among the candidates"),
                    ("R3", "R3 retrieval: a stale or irrelevant memory outranked it"),
                    ("A0", "A0 attention: in context, but ignored"),
                    ("U0", "U0 use: used wrongly"),
                ],
                default="",
                help_text="Where memory broke (failure or partial outcomes only).",
                max_length=2,
            ),
        ),
    ]
