"""Keep each version's intent embedding in the row itself (STORAGE PLAIN), never
TOASTed: matching computes a cosine distance for every validated version of
the agent, and fetching 10k out-of-line vectors tripled its time. The large
columns (procedure, examples, …) are TOASTed instead. Rows written before this
keep their storage until rewritten."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("skills", "0003_immutable_versions_state_machine_and_same_agent")]
    operations = [
        migrations.RunSQL(
            "ALTER TABLE skills_skillversion ALTER COLUMN intent_embedding SET STORAGE PLAIN;",
            "ALTER TABLE skills_skillversion ALTER COLUMN intent_embedding SET STORAGE EXTERNAL;",
        )
    ]
