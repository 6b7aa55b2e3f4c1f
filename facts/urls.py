from django.urls import path

from . import apis

urlpatterns = [
    path("entities", apis.EntityListApi.as_view(), name="entities"),
    path("entities/search", apis.EntitySearchApi.as_view(), name="entity-search"),
    path("entities/<uuid:entity_id>", apis.EntityDetailApi.as_view(), name="entity-detail"),
    path("entities/<uuid:entity_id>/aliases", apis.EntityAliasApi.as_view(), name="entity-aliases"),
    path("predicates", apis.PredicateListApi.as_view(), name="predicates"),
    path("predicates/<str:name>", apis.PredicateDetailApi.as_view(), name="predicate-detail"),
    path("facts", apis.FactAssertApi.as_view(), name="facts"),
    path("facts/authority-order", apis.AuthorityOrderApi.as_view(), name="authority-order"),
    path("facts/current", apis.FactCurrentApi.as_view(), name="facts-current"),
    path("facts/as-of", apis.FactAsOfApi.as_view(), name="facts-as-of"),
    path("facts/as-known-at", apis.FactAsKnownAtApi.as_view(), name="facts-as-known-at"),
    path("facts/chain", apis.FactChainApi.as_view(), name="facts-chain"),
    path("facts/contested", apis.FactContestedApi.as_view(), name="facts-contested"),
    path("facts/<uuid:fact_id>", apis.FactDetailApi.as_view(), name="fact-detail"),
    path("facts/<uuid:fact_id>/chain", apis.FactChainByIdApi.as_view(), name="fact-chain"),
    path("facts/<uuid:fact_id>/retract", apis.FactRetractApi.as_view(), name="fact-retract"),
    path("facts/<uuid:fact_id>/correct", apis.FactCorrectApi.as_view(), name="fact-correct"),
    path("facts/<uuid:fact_id>/end", apis.FactEndApi.as_view(), name="fact-end"),
    path("facts/<uuid:fact_id>/resolve", apis.FactResolveApi.as_view(), name="fact-resolve"),
    path("graph/paths", apis.GraphPathsApi.as_view(), name="graph-paths"),
]
