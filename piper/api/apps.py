from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "piper.api"
    label = "api"
    verbose_name = "API conventions"

    def ready(self) -> None:
        from . import schema  # noqa: F401  (registers the auth scheme with drf-spectacular)
