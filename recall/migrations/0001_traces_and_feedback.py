"""Retrieval traces and the agent's feedback on them. A feedback row belongs to
its trace's agent, and its ledger event to the same agent: composite foreign
keys over (agent_id, …) make a cross-tenant reference impossible."""

import django.db.models.deletion
import django.db.models.functions.datetime
import piper.ids
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('ledger', '0005_record_time_at_chain_lock'),
        ('tenancy', '0002_api_key_rate_positive'),
    ]

    operations = [
        migrations.CreateModel(
            name='RetrievalTrace',
            fields=[
                ('id', models.UUIDField(default=piper.ids.uuid7, editable=False, primary_key=True, serialize=False)),
                ('query', models.TextField(help_text='The question as the agent asked it.')),
                ('route', models.CharField(choices=[('current_fact', 'What is true now (facts)'), ('what_happened', 'What happened (episodes)'), ('how_to', 'How to do it (skills)'), ('what_to_do', 'What am I supposed to do (intentions)'), ('source', 'What a document said (source chunks)'), ('multi_hop', 'How things are related (fact graph)')], help_text='The route taken.', max_length=20)),
                ('explicit', models.BooleanField(help_text='The agent named the route; otherwise the classifier chose it.')),
                ('decision', models.JSONField(blank=True, default=dict, help_text="The classifier's decision: method, rule, matched rules, per-route scores.")),
                ('filters', models.JSONField(blank=True, default=dict)),
                ('candidates', models.JSONField(blank=True, default=list, help_text='Everything considered, with scores and signals, best first.')),
                ('returned', models.JSONField(blank=True, default=list, help_text='The evidence returned: [{kind, id, score}], in order.')),
                ('abstained', models.BooleanField(help_text="Answered 'no supporting memory'.")),
                ('latency_ms', models.FloatField(help_text='Time to answer, embedding included.')),
                ('embedding_model', models.CharField(blank=True, default='', help_text='Empty: no embedding was used.', max_length=200)),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.agent')),
            ],
            options={
                'verbose_name': 'retrieval trace',
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='RecallFeedback',
            fields=[
                ('id', models.UUIDField(default=piper.ids.uuid7, editable=False, primary_key=True, serialize=False)),
                ('used', models.JSONField(blank=True, default=list, help_text='Ids of the returned evidence the agent used.')),
                ('outcome', models.CharField(choices=[('success', 'Success'), ('failure', 'Failure'), ('partial', 'Partial')], max_length=10)),
                ('failure_code', models.CharField(blank=True, choices=[('R0', 'R0 retrieval: the memory exists but was not found'), ('R1', 'R1 retrieval: a wrong or stale memory was returned'), ('R2', 'R2 retrieval: the right memory was ranked below noise'), ('R3', "R3 retrieval: returned what must not be (another agent's, purged, or not current)"), ('A0', 'A0 attention: retrieved but not surfaced when the decision was made'), ('U0', 'U0 use: surfaced but misapplied')], default='', help_text='Where memory broke (failure or partial outcomes only).', max_length=2)),
                ('note', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='tenancy.agent')),
                ('source_event', models.ForeignKey(help_text='The recall.feedback ledger event.', on_delete=django.db.models.deletion.PROTECT, related_name='+', to='ledger.event')),
                ('trace', models.OneToOneField(on_delete=django.db.models.deletion.PROTECT, related_name='feedback', to='recall.retrievaltrace')),
            ],
            options={
                'verbose_name': 'recall feedback',
                'verbose_name_plural': 'recall feedback',
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.AddIndex(
            model_name='retrievaltrace',
            index=models.Index(fields=['agent', '-created_at'], name='recall_trace_agent_time_idx'),
        ),
        migrations.AddIndex(
            model_name='retrievaltrace',
            index=models.Index(fields=['route', 'created_at'], name='recall_trace_route_time_idx'),
        ),
        migrations.AddConstraint(
            model_name='retrievaltrace',
            constraint=models.UniqueConstraint(fields=('agent', 'id'), name='recall_trace_agent_id_uniq'),
        ),
        migrations.AddConstraint(
            model_name='retrievaltrace',
            constraint=models.CheckConstraint(condition=models.Q(('route__in', ['current_fact', 'what_happened', 'how_to', 'what_to_do', 'source', 'multi_hop'])), name='recall_trace_route_known'),
        ),
        migrations.AddConstraint(
            model_name='retrievaltrace',
            constraint=models.CheckConstraint(condition=models.Q(('latency_ms__gte', 0)), name='recall_trace_latency_not_negative'),
        ),
        migrations.AddConstraint(
            model_name='retrievaltrace',
            constraint=models.CheckConstraint(condition=models.Q(('query', ''), _negated=True), name='recall_trace_query_not_empty'),
        ),
        migrations.AddIndex(
            model_name='recallfeedback',
            index=models.Index(fields=['failure_code', 'created_at'], name='recall_feedback_code_time_idx'),
        ),
        migrations.AddConstraint(
            model_name='recallfeedback',
            constraint=models.CheckConstraint(condition=models.Q(('outcome__in', ['success', 'failure', 'partial'])), name='recall_feedback_outcome_known'),
        ),
        migrations.AddConstraint(
            model_name='recallfeedback',
            constraint=models.CheckConstraint(condition=models.Q(('failure_code', ''), ('failure_code__in', ['R0', 'R1', 'R2', 'R3', 'A0', 'U0']), _connector='OR'), name='recall_feedback_code_known'),
        ),
        migrations.AddConstraint(
            model_name='recallfeedback',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('outcome', 'success'), _negated=True), ('failure_code', ''), _connector='OR'), name='recall_feedback_success_has_no_code'),
        ),
        migrations.RunSQL(
            "ALTER TABLE recall_recallfeedback ADD CONSTRAINT recall_feedback_trace_same_agent "
            "FOREIGN KEY (agent_id, trace_id) REFERENCES recall_retrievaltrace (agent_id, id) "
            "DEFERRABLE INITIALLY DEFERRED; "
            "ALTER TABLE recall_recallfeedback ADD CONSTRAINT recall_feedback_event_same_agent "
            "FOREIGN KEY (agent_id, source_event_id) REFERENCES ledger_event (agent_id, id) "
            "DEFERRABLE INITIALLY DEFERRED;",
            "ALTER TABLE recall_recallfeedback DROP CONSTRAINT recall_feedback_trace_same_agent; "
            "ALTER TABLE recall_recallfeedback DROP CONSTRAINT recall_feedback_event_same_agent;",
        ),
    ]
