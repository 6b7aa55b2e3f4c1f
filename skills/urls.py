from django.urls import path

from . import apis

urlpatterns = [
    path("skills", apis.SkillListApi.as_view(), name="skills"),
    path("skills/match", apis.MatchApi.as_view(), name="skills-match"),
    path("skills/traces", apis.TraceListApi.as_view(), name="skill-traces"),
    path("skills/traces/<uuid:trace_id>", apis.TraceDetailApi.as_view(), name="skill-trace-detail"),
    path("skills/<uuid:skill_id>", apis.SkillDetailApi.as_view(), name="skill-detail"),
    path(
        "skills/<uuid:skill_id>/versions",
        apis.SkillVersionCreateApi.as_view(),
        name="skill-versions",
    ),
    path(
        "skills/versions/<uuid:version_id>",
        apis.VersionDetailApi.as_view(),
        name="skill-version-detail",
    ),
    path(
        "skills/versions/<uuid:version_id>/promote",
        apis.VersionPromoteApi.as_view(),
        name="skill-version-promote",
    ),
    path(
        "skills/versions/<uuid:version_id>/deprecate",
        apis.VersionDeprecateApi.as_view(),
        name="skill-version-deprecate",
    ),
    path(
        "skills/versions/<uuid:version_id>/retire",
        apis.VersionRetireApi.as_view(),
        name="skill-version-retire",
    ),
    path(
        "skills/versions/<uuid:version_id>/validate",
        apis.VersionValidateApi.as_view(),
        name="skill-version-validate",
    ),
    path(
        "skills/versions/<uuid:version_id>/validations",
        apis.VersionValidationsApi.as_view(),
        name="skill-version-validations",
    ),
    path(
        "skills/versions/<uuid:version_id>/execute",
        apis.VersionExecuteApi.as_view(),
        name="skill-version-execute",
    ),
    path(
        "skills/versions/<uuid:version_id>/executions",
        apis.VersionExecutionsApi.as_view(),
        name="skill-version-executions",
    ),
    path(
        "skills/validations/<uuid:validation_id>",
        apis.ValidationDetailApi.as_view(),
        name="skill-validation-detail",
    ),
    path(
        "skills/executions/<uuid:execution_id>",
        apis.ExecutionDetailApi.as_view(),
        name="skill-execution-detail",
    ),
]
