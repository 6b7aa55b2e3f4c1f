from django.apps import AppConfig


class BatteryConfig(AppConfig):
    name = "battery"
    verbose_name = "Memory Battery"
