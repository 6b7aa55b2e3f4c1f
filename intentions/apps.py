from django.apps import AppConfig


class IntentionsConfig(AppConfig):
    name = "intentions"
    verbose_name = "Working state and intentions"

    def ready(self) -> None:
        from ledger import hooks, projections

        from .hooks import events_committed
        from .services import intentions_rebuild
        from .services.rebuild import rebuild_projection

        projections.register("working_state", rebuild_projection)
        projections.register("intentions", intentions_rebuild.rebuild_projection)
        hooks.on_events_committed(events_committed)
