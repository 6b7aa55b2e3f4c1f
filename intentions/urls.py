from django.urls import path

from . import apis, thread_apis

urlpatterns = [
    path("threads", thread_apis.ThreadListApi.as_view(), name="threads"),
    path("threads/<uuid:thread_id>", thread_apis.ThreadDetailApi.as_view(), name="thread-detail"),
    path(
        "threads/<uuid:thread_id>/state", thread_apis.ThreadStateApi.as_view(), name="thread-state"
    ),
    path(
        "threads/<uuid:thread_id>/versions",
        thread_apis.ThreadVersionsApi.as_view(),
        name="thread-versions",
    ),
    path(
        "threads/<uuid:thread_id>/handover",
        thread_apis.ThreadHandoverApi.as_view(),
        name="thread-handover",
    ),
    path(
        "threads/<uuid:thread_id>/resume",
        thread_apis.ThreadResumeApi.as_view(),
        name="thread-resume",
    ),
    path(
        "threads/<uuid:thread_id>/acknowledge",
        thread_apis.ThreadAcknowledgeApi.as_view(),
        name="thread-acknowledge",
    ),
    path(
        "threads/<uuid:thread_id>/pending/clear",
        thread_apis.PendingClearApi.as_view(),
        name="thread-pending-clear",
    ),
    path("intentions", apis.IntentionListApi.as_view(), name="intentions"),
    path("intentions/due", apis.IntentionDueApi.as_view(), name="intentions-due"),
    path("intentions/tick", apis.IntentionTickApi.as_view(), name="intentions-tick"),
    path(
        "intentions/<uuid:intention_id>",
        apis.IntentionDetailApi.as_view(),
        name="intention-detail",
    ),
    path(
        "intentions/<uuid:intention_id>/start",
        apis.IntentionStartApi.as_view(),
        name="intention-start",
    ),
    path(
        "intentions/<uuid:intention_id>/complete",
        apis.IntentionCompleteApi.as_view(),
        name="intention-complete",
    ),
    path(
        "intentions/<uuid:intention_id>/skip",
        apis.IntentionSkipApi.as_view(),
        name="intention-skip",
    ),
    path(
        "intentions/<uuid:intention_id>/fail",
        apis.IntentionFailApi.as_view(),
        name="intention-fail",
    ),
    path(
        "intentions/<uuid:intention_id>/escalation-policy",
        apis.IntentionEscalationPolicyApi.as_view(),
        name="intention-escalation-policy",
    ),
    path(
        "intentions/<uuid:intention_id>/cancel",
        apis.IntentionCancelApi.as_view(),
        name="intention-cancel",
    ),
    path(
        "intentions/<uuid:intention_id>/expire",
        apis.IntentionExpireApi.as_view(),
        name="intention-expire",
    ),
    path(
        "intentions/<uuid:intention_id>/fire",
        apis.IntentionFireApi.as_view(),
        name="intention-fire",
    ),
    path(
        "intentions/<uuid:intention_id>/dependencies",
        apis.IntentionDependenciesApi.as_view(),
        name="intention-dependencies",
    ),
    path("webhook", apis.WebhookApi.as_view(), name="webhook"),
    path("clock", apis.ClockApi.as_view(), name="clock"),
]
