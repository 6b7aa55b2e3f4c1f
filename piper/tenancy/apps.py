from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "piper.tenancy"
    label = "tenancy"
    verbose_name = "Agents and API keys"
