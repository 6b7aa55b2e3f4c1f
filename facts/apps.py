from django.apps import AppConfig


class FactsConfig(AppConfig):
    name = "facts"
    verbose_name = "Facts (semantic memory)"

    def ready(self):
        from ledger import projections

        from .services import rebuild_projection

        projections.register("facts", rebuild_projection)
