from django.urls import path

from . import views

urlpatterns = [
    path("agent", views.AgentMeApi.as_view(), name="agent-me"),
    path("keys", views.ApiKeyListApi.as_view(), name="api-keys"),
    path("keys/<uuid:key_id>", views.ApiKeyDetailApi.as_view(), name="api-key-detail"),
]
