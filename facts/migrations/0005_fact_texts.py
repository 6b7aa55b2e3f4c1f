"""FactText: each (subject, predicate) as words, with a generated full-text vector
(GIN) and an embedding (HNSW, cosine), so a plain question finds the fact.

Its subject and predicate belong to its own agent (composite foreign keys, as
in 0004). They are NO ACTION and deferred, not CASCADE: the rebuild deletes
and replays entities and predicates under the same ids in one transaction, and
the texts — with their embeddings — must survive it.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
import django.db.models.expressions
import pgvector.django.indexes
import pgvector.django.vector
from pgvector.django import VectorExtension
import piper.ids
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('facts', '0004_same_agent_references'),
        ('tenancy', '0002_api_key_rate_positive'),
    ]

    operations = [
        VectorExtension(),
        migrations.CreateModel(
            name='FactText',
            fields=[
                ('id', models.UUIDField(default=piper.ids.uuid7, editable=False, primary_key=True, serialize=False)),
                ('text', models.TextField(help_text='Predicate, subject (with its names) and current values.')),
                ('search_vector', models.GeneratedField(db_persist=True, expression=django.db.models.expressions.RawSQL("to_tsvector('english'::regconfig, coalesce(text, ''))", ()), output_field=django.contrib.postgres.search.SearchVectorField())),
                ('embedding', pgvector.django.vector.VectorField(blank=True, dimensions=384, null=True)),
                ('embedding_model', models.CharField(blank=True, default='', max_length=200)),
                ('embedded_at', models.DateTimeField(blank=True, null=True)),
                ('rendered_at', models.DateTimeField(help_text='When the text was last rendered.')),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.agent')),
                ('predicate', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='facts.predicate')),
                ('subject', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='facts.entity')),
            ],
            options={
                'verbose_name': 'fact text',
                'ordering': ['agent', 'subject', 'predicate'],
                'indexes': [django.contrib.postgres.indexes.GinIndex(fields=['search_vector'], name='facts_facttext_search_gin'), pgvector.django.indexes.HnswIndex(ef_construction=64, fields=['embedding'], m=16, name='facts_facttext_embedding_hnsw', opclasses=['vector_cosine_ops']), models.Index(condition=models.Q(('embedding__isnull', True)), fields=['agent', 'id'], name='facts_facttext_unembedded_idx')],
                'constraints': [models.UniqueConstraint(fields=('agent', 'subject', 'predicate'), name='facts_facttext_pair_uniq'), models.CheckConstraint(condition=models.Q(('embedding__isnull', True), models.Q(('embedding_model', ''), _negated=True), _connector='OR'), name='facts_facttext_embedding_has_model')],
            },
        ),
        migrations.RunSQL(
            "ALTER TABLE facts_facttext ADD CONSTRAINT facts_facttext_subject_same_agent "
            "FOREIGN KEY (agent_id, subject_id) REFERENCES facts_entity (agent_id, id) "
            "DEFERRABLE INITIALLY DEFERRED; "
            "ALTER TABLE facts_facttext ADD CONSTRAINT facts_facttext_predicate_same_agent "
            "FOREIGN KEY (agent_id, predicate_id) REFERENCES facts_predicate (agent_id, id) "
            "DEFERRABLE INITIALLY DEFERRED;",
            "ALTER TABLE facts_facttext DROP CONSTRAINT facts_facttext_subject_same_agent; "
            "ALTER TABLE facts_facttext DROP CONSTRAINT facts_facttext_predicate_same_agent;",
        ),
    ]
