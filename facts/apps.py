from django.apps import AppConfig


class FactsConfig(AppConfig):
    name = "facts"
    verbose_name = "Facts (semantic memory)"

    def ready(self):
        from ledger import hooks, projections

        from .hooks import events_committed
        from .services import rebuild_projection

        projections.register("facts", rebuild_projection)
        # The fact texts a plain question finds facts by follow each commit.
        hooks.on_events_committed(events_committed)
