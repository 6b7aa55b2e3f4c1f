from django.urls import path

from . import apis

urlpatterns = [
    path("episodes", apis.EpisodeListApi.as_view(), name="episodes"),
    path("episodes/<uuid:episode_id>", apis.EpisodeDetailApi.as_view(), name="episode-detail"),
    path(
        "episodes/<uuid:episode_id>/retract",
        apis.EpisodeRetractApi.as_view(),
        name="episode-retract",
    ),
    path(
        "episodes/<uuid:episode_id>/correct",
        apis.EpisodeCorrectApi.as_view(),
        name="episode-correct",
    ),
    path("sources/ingest", apis.SourceIngestApi.as_view(), name="source-ingest"),
    path(
        "sources/<uuid:source_id>/chunks",
        apis.SourceChunkListApi.as_view(),
        name="source-chunks",
    ),
]
