from django.urls import path

from . import apis

urlpatterns = [
    path("erasure", apis.ErasureListApi.as_view(), name="erasure"),
    path("erasure/<uuid:erasure_id>", apis.ErasureDetailApi.as_view(), name="erasure-detail"),
    path("retention-policies", apis.RetentionPolicyListApi.as_view(), name="retention-policies"),
    path(
        "retention-policies/<uuid:policy_id>",
        apis.RetentionPolicyDetailApi.as_view(),
        name="retention-policy-detail",
    ),
]
