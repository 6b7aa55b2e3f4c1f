from django.apps import AppConfig


class IntentionsConfig(AppConfig):
    name = "intentions"
