from django.urls import path

from . import apis

urlpatterns = [
    path("consolidation/runs", apis.RunListApi.as_view(), name="consolidation-runs"),
    path(
        "consolidation/runs/<uuid:run_id>",
        apis.RunDetailApi.as_view(),
        name="consolidation-run-detail",
    ),
    path(
        "consolidation/candidates",
        apis.CandidateListApi.as_view(),
        name="consolidation-candidates",
    ),
    path(
        "consolidation/candidates/<uuid:candidate_id>",
        apis.CandidateDetailApi.as_view(),
        name="consolidation-candidate-detail",
    ),
    path(
        "consolidation/candidates/<uuid:candidate_id>/accept",
        apis.CandidateAcceptApi.as_view(),
        name="consolidation-candidate-accept",
    ),
    path(
        "consolidation/candidates/<uuid:candidate_id>/reject",
        apis.CandidateRejectApi.as_view(),
        name="consolidation-candidate-reject",
    ),
    path(
        "consolidation/skill-candidates",
        apis.CandidateSkillListApi.as_view(),
        name="consolidation-skill-candidates",
    ),
    path(
        "consolidation/skill-candidates/<uuid:candidate_id>",
        apis.CandidateSkillDetailApi.as_view(),
        name="consolidation-skill-candidate-detail",
    ),
    path(
        "consolidation/skill-candidates/<uuid:candidate_id>/reject",
        apis.CandidateSkillRejectApi.as_view(),
        name="consolidation-skill-candidate-reject",
    ),
]
