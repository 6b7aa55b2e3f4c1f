from django.apps import AppConfig


class RecallConfig(AppConfig):
    name = "recall"
    label = "recall"
    verbose_name = "Recall (one endpoint for every memory)"

    def ready(self) -> None:
        from piper.reads import read_served

        from .services.telemetry import read_trace_record

        # The direct read endpoints live in apps below this one; they
        # announce each read and this app traces it (piper.reads).
        read_served.connect(read_trace_record, dispatch_uid="recall.read_trace_record")
