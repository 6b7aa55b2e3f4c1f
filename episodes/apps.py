from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "episodes"
    verbose_name = "Episodes and sources (episodic memory)"

    def ready(self) -> None:
        from ledger import hooks, projections

        from .hooks import events_committed
        from .services import rebuild_projection

        projections.register("episodes", rebuild_projection)
        hooks.on_events_committed(events_committed)
