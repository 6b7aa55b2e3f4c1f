"""Factories for ledger rows. Events go through the service, never Event.objects.create."""

import factory

from ledger.models import Event, Source
from ledger.services import event_append, source_register
from piper.tenancy.tests.factories import AgentFactory


class EventFactory(factory.Factory):
    """`EventFactory(agent=…, event_type=…, payload=…)` appends through ledger.services."""

    class Meta:
        model = Event

    agent = factory.SubFactory(AgentFactory)
    event_type = "test.happened"
    payload = factory.Sequence(lambda n: {"n": n})

    @classmethod
    def _create(cls, model_class, *, agent, event_type, **fields):
        return event_append(agent=agent, event_type=event_type, **fields)

    @classmethod
    def _build(cls, model_class, **fields):
        raise NotImplementedError("events only exist once appended: use EventFactory()")


class SourceFactory(factory.Factory):
    class Meta:
        model = Source

    agent = factory.SubFactory(AgentFactory)
    title = factory.Sequence(lambda n: f"Document {n}")
    content = factory.Sequence(lambda n: f"The content of document {n}.")

    @classmethod
    def _create(cls, model_class, **fields):
        return source_register(**fields)[0]
