from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from piper.api.health import healthz

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="api-redoc"),
    path("api/v1/", include("piper.api.urls")),
    path("api/v1/", include("ledger.urls")),
    path("api/v1/", include("facts.urls")),
    path("api/v1/", include("skills.urls")),
    path("api/v1/", include("intentions.urls")),
    path("api/v1/", include("consolidation.urls")),
    path("api/v1/", include("recall.urls")),
    path("api/v1/", include("forgetting.urls")),
    path("api/v1/", include("episodes.urls")),
    path("api/v1/", include("episodes.search_urls")),
]

handler404 = "piper.api.views.not_found"
handler500 = "piper.api.views.server_error"
