from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "piper.tenancy"
    label = "tenancy"
    verbose_name = "Agents and API keys"

    def ready(self):
        from django.db.backends.signals import connection_created

        from piper import lookups
        from piper.db import register_vector_dumpers

        lookups.register()

        # The core app, loaded first: every later connection can send vectors.
        connection_created.connect(register_vector_dumpers, dispatch_uid="piper-vector-dumpers")
