from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "episodes"
    verbose_name = "Episodes and sources (episodic memory)"

    def ready(self) -> None:
        from ledger import hooks, projections

        from .services import rebuild_projection
        from .tasks import sources_committed

        projections.register("episodes", rebuild_projection)
        hooks.on_events_committed(sources_committed)
