from django.apps import AppConfig


class EpisodesConfig(AppConfig):
    name = "episodes"
