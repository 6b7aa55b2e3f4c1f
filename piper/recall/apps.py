from django.apps import AppConfig


class RecallConfig(AppConfig):
    name = "piper.recall"
    label = "recall"
    verbose_name = "Recall (one endpoint for every memory)"
