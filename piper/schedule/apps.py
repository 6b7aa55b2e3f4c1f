from django.apps import AppConfig


class ScheduleConfig(AppConfig):
    name = "piper.schedule"
    label = "schedule"
    verbose_name = "Periodic task schedule"
