from django.urls import path

from . import search_apis

urlpatterns = [
    path("episodes/search", search_apis.EpisodeSearchApi.as_view(), name="episode-search"),
    path("sources/search", search_apis.ChunkSearchApi.as_view(), name="source-search"),
]
