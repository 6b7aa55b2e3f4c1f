from django.urls import path

from . import apis

urlpatterns = [
    path("context", apis.ContextApi.as_view(), name="context"),
    path("recall", apis.RecallApi.as_view(), name="recall"),
    path("recall/decisions", apis.LookDecisionApi.as_view(), name="recall-decisions"),
    path("carry-over", apis.CarryOverApi.as_view(), name="carry-over"),
    path("recall/<uuid:trace_id>", apis.RecallDetailApi.as_view(), name="recall-detail"),
    path(
        "recall/<uuid:trace_id>/feedback", apis.RecallFeedbackApi.as_view(), name="recall-feedback"
    ),
]
