from django.apps import AppConfig


class IntentionsConfig(AppConfig):
    name = "intentions"
    verbose_name = "Working state and intentions"

    def ready(self) -> None:
        from ledger import hooks

        from .signals import events_committed

        hooks.on_events_committed(events_committed)
