from django.apps import AppConfig


class SkillsConfig(AppConfig):
    name = "skills"

    def ready(self) -> None:
        from ledger import projections

        from .services.rebuild import rebuild_projection

        projections.register("skills", rebuild_projection)
