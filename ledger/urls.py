from django.urls import path

from . import apis

urlpatterns = [
    path("events", apis.EventListApi.as_view(), name="events"),
    path("events/<uuid:event_id>", apis.EventDetailApi.as_view(), name="event-detail"),
    path("sources", apis.SourceListApi.as_view(), name="sources"),
    path("sources/<uuid:source_id>", apis.SourceDetailApi.as_view(), name="source-detail"),
]
