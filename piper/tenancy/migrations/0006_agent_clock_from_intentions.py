"""The agent clock moves from intentions down into tenancy, beside the agent it
belongs to (recall, retention and the intention engine all read it).

State only: the table stays `intentions_agentclock` (Meta.db_table) and no row
moves; intentions 0013 drops the model from its own state. The content type
follows, so permissions granted on the clock's admin page carry over.
"""

import django.db.models.deletion
from django.db import migrations, models


def content_type_to(app_label: str, from_label: str):
    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        if not ContentType.objects.filter(app_label=app_label, model="agentclock").exists():
            ContentType.objects.filter(app_label=from_label, model="agentclock").update(
                app_label=app_label
            )

    return move


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("tenancy", "0005_key_rate_limit_bound"),
        # where the table was created
        ("intentions", "0002_threads_states_intentions"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AgentClock",
                    fields=[
                        (
                            "agent",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                primary_key=True,
                                related_name="+",
                                serialize=False,
                                to="tenancy.agent",
                            ),
                        ),
                        ("now", models.DateTimeField()),
                    ],
                    options={"db_table": "intentions_agentclock"},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_type_to("tenancy", from_label="intentions"),
            content_type_to("intentions", from_label="tenancy"),
        ),
    ]
