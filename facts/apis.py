"""Thin views over semantic memory: validate, call a service or selector, serialize.

Every write runs inside `idempotent_write` (one transaction; Idempotency-Key
replays), and a fact a write returns is read back through `selectors.fact_get`,
so a write's answer equals what a later read shows.
"""

from __future__ import annotations

import time

from django.utils import timezone
from drf_spectacular.utils import (
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.api.idempotency import idempotent_write
from piper.api.inputs import IDEMPOTENCY_KEY, body_data, query_data, require_json_object
from piper.api.pagination import NewestIdCursorPagination, StrictCursorPagination
from piper.api.serializers import CursorQuerySerializer
from piper.errors import NotFound, PayloadTooLarge
from piper.reads import read_announce
from piper.tenancy.models import Scope

from . import projection, selectors, services
from .serializers import (
    AliasAddInputSerializer,
    AuthorityOrderSerializer,
    ClaimBatchInputSerializer,
    ClaimInputSerializer,
    CorrectInputSerializer,
    EndInputSerializer,
    EntityCreateInputSerializer,
    EntityOutputSerializer,
    EntityPageSerializer,
    EntitySearchOutputSerializer,
    EntitySearchQuerySerializer,
    FactAsKnownAtOutputSerializer,
    FactAsKnownAtQuerySerializer,
    FactAsOfOutputSerializer,
    FactAsOfQuerySerializer,
    FactBatchOutputSerializer,
    FactChainQuerySerializer,
    FactListOutputSerializer,
    FactOutputSerializer,
    FactPageSerializer,
    FactQuerySerializer,
    FactWriteOutputSerializer,
    GraphPathsOutputSerializer,
    GraphPathsQuerySerializer,
    PredicateDefineInputSerializer,
    PredicateOutputSerializer,
    PredicatePageSerializer,
    ProvenanceInputSerializer,
    ResolveInputSerializer,
    RetractInputSerializer,
)


def _write_result(agent, applied: projection.Applied) -> dict:
    return {
        "outcome": applied.outcome,
        "fact": selectors.fact_get(agent=agent, fact_id=applied.fact.pk),
        "superseded": [f.pk for f in applied.superseded],
        "resolved_contests": [f.pk for f in applied.resolved_contests],
    }


# ------------------------------------------------------------------------ entities


class PredicatePagination(StrictCursorPagination):
    ordering = "name"


class ContestPagination(StrictCursorPagination):
    ordering = ("recorded_at", "id")  # oldest first: the queue's order


class EntityListApi(APIView):
    @extend_schema(
        parameters=[CursorQuerySerializer],
        responses=EntityPageSerializer,
        operation_id="v1_entities_list",
        summary="This agent's entities, newest first (cursor pagination)",
    )
    def get(self, request):
        query_data(CursorQuerySerializer, request)
        paginator = NewestIdCursorPagination()
        page = paginator.paginate_queryset(
            selectors.entity_list(agent=request.user), request, view=self
        )
        return paginator.get_paginated_response(EntityOutputSerializer(page, many=True).data)

    @extend_schema(
        request=EntityCreateInputSerializer,
        responses={201: EntityOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Create an entity with its names",
        description="The name is also the entity's first alias. 409 alias_taken when the name "
        "or an alias already names another entity of this agent (case-insensitive).",
    )
    def post(self, request):
        def write():
            data = body_data(EntityCreateInputSerializer, request)
            entity = services.entity_create(agent=request.user, **data)
            entity = selectors.entity_get(agent=request.user, entity_id=entity.pk)
            return Response(EntityOutputSerializer(entity).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write)


class EntityDetailApi(APIView):
    @extend_schema(
        responses=EntityOutputSerializer,
        operation_id="v1_entities_retrieve",
        summary="One entity, with its aliases",
    )
    def get(self, request, entity_id):
        entity = selectors.entity_get(agent=request.user, entity_id=entity_id)
        return Response(EntityOutputSerializer(entity).data)


class EntityAliasApi(APIView):
    @extend_schema(
        request=AliasAddInputSerializer,
        responses={201: EntityOutputSerializer, 200: EntityOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Add a name for an entity",
        description="201 with the entity when the alias is new; 200 when it already names this "
        "entity (nothing written); 409 alias_taken when it names another.",
    )
    def post(self, request, entity_id):
        def write():
            entity = selectors.entity_get(agent=request.user, entity_id=entity_id)
            data = body_data(AliasAddInputSerializer, request)
            known = _names(request.user, data["alias"]) == entity.pk
            services.entity_alias_add(agent=request.user, entity=entity, alias=data["alias"])
            entity = selectors.entity_get(agent=request.user, entity_id=entity_id)
            return Response(
                EntityOutputSerializer(entity).data,
                status=status.HTTP_200_OK if known else status.HTTP_201_CREATED,
            )

        return idempotent_write(request, write)


def _names(agent, alias: str):
    """The id of the entity `alias` names already, or None."""
    try:
        return selectors.entity_resolve(agent=agent, ref=alias.strip()).pk
    except NotFound:
        return None


class EntitySearchApi(APIView):
    @extend_schema(
        parameters=[EntitySearchQuerySerializer],
        responses=EntitySearchOutputSerializer,
        summary="Entities whose names resemble q (trigram similarity), best first",
        description="An exact name comes first; each result says which name matched and how "
        "similar it is (0-1). Similarity only finds candidates: it never decides a fact.",
    )
    def get(self, request):
        params = query_data(EntitySearchQuerySerializer, request)
        matches = selectors.entity_search(
            agent=request.user, query=params["q"], limit=params["limit"]
        )
        return Response(EntitySearchOutputSerializer({"results": matches}).data)


# ---------------------------------------------------------------------- predicates


class PredicateListApi(APIView):
    @extend_schema(
        parameters=[CursorQuerySerializer],
        responses=PredicatePageSerializer,
        operation_id="v1_predicates_list",
        summary="This agent's predicates, by name (cursor pagination)",
    )
    def get(self, request):
        query_data(CursorQuerySerializer, request)
        paginator = PredicatePagination()
        page = paginator.paginate_queryset(
            selectors.predicate_list(agent=request.user), request, view=self
        )
        return paginator.get_paginated_response(PredicateOutputSerializer(page, many=True).data)


class PredicateDetailApi(APIView):
    @extend_schema(
        responses=PredicateOutputSerializer,
        operation_id="v1_predicates_retrieve",
        summary="One predicate",
    )
    def get(self, request, name):
        predicate = selectors.predicate_get(agent=request.user, name=name)
        return Response(PredicateOutputSerializer(predicate).data)

    @extend_schema(
        request=PredicateDefineInputSerializer,
        responses={201: PredicateOutputSerializer, 200: PredicateOutputSerializer},
        parameters=[IDEMPOTENCY_KEY],
        summary="Define a predicate, or redefine it",
        description="201 when new, 200 when it existed (an unchanged definition writes nothing). "
        "Fields left out keep their current value. 409 cardinality_conflict when a subject "
        "holds several values at once and the predicate would become single-valued; 409 "
        "value_type_conflict when believed values do not fit the new type.",
    )
    def put(self, request, name):
        def write():
            data = body_data(PredicateDefineInputSerializer, request)
            try:
                selectors.predicate_get(agent=request.user, name=name)
                existed = True
            except NotFound:
                existed = False
            predicate = services.predicate_define(agent=request.user, name=name, **data)
            return Response(
                PredicateOutputSerializer(predicate).data,
                status=status.HTTP_200_OK if existed else status.HTTP_201_CREATED,
            )

        return idempotent_write(request, write)


def _policy(agent) -> dict:
    order = selectors.authority_order(agent=agent)
    admit_from = selectors.admission_threshold(agent=agent)
    return AuthorityOrderSerializer({"order": list(order), "admit_from": admit_from}).data


class AuthorityOrderApi(APIView):
    @extend_schema(
        responses=AuthorityOrderSerializer,
        summary="The authority precedence in force, most trusted first",
    )
    def get(self, request):
        return Response(_policy(request.user))

    @extend_schema(
        request=AuthorityOrderSerializer,
        responses=AuthorityOrderSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Set this agent's authority precedence (write scope)",
        description="Most trusted first; levels left out rank below the listed ones, in the "
        "default order. It governs later claims only: what is believed now is not re-resolved. "
        "Any key with the write scope may set it, like every other write of the agent's memory.",
    )
    def put(self, request):
        def write():
            data = body_data(AuthorityOrderSerializer, request)
            services.authority_order_set(
                agent=request.user, order=data["order"], admit_from=data["admit_from"]
            )
            return Response(_policy(request.user))

        return idempotent_write(request, write)


# --------------------------------------------------------------------- fact writes


class FactAssertApi(APIView):
    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="FactAssert",
            serializers=[ClaimInputSerializer, ClaimBatchInputSerializer],
            resource_type_field_name=None,
        ),
        responses={
            201: PolymorphicProxySerializer(
                component_name="FactAsserted",
                serializers=[FactWriteOutputSerializer, FactBatchOutputSerializer],
                resource_type_field_name=None,
            ),
            200: OpenApiResponse(
                FactWriteOutputSerializer,
                description="One claim that an existing version already held: evidence added.",
            ),
        },
        parameters=[IDEMPOTENCY_KEY],
        summary="Assert one fact, or a batch of up to 1,000 atomically",
        description="Send a claim, or {\"facts\": [...]}. Per claim the outcome is 'created' "
        "(a new believed version, superseding what it replaces from valid_from until the next "
        "known change), 'confirmed' (the same value was believed: evidence added, no version) "
        "or 'contested' (lower authority than the believed value: stored, not in force). A "
        "batch is all or nothing and answers with one receipt per claim. Unknown entity ids "
        "are 422 unknown_entity; a cardinality or value_type that contradicts an existing "
        "predicate is 409.",
    )
    def post(self, request):
        body = request.data
        require_json_object(body, 'send a fact object, or {"facts": [...]} for a batch')
        if "facts" in body:
            if isinstance(body["facts"], list) and len(body["facts"]) > services.MAX_BATCH:
                raise PayloadTooLarge(
                    f"a batch holds at most {services.MAX_BATCH} facts; "
                    f"this one has {len(body['facts'])}: split it",
                    code="batch_too_large",
                    details={"max_facts": services.MAX_BATCH, "received": len(body["facts"])},
                )
            return idempotent_write(request, lambda: self._assert_batch(request))
        return idempotent_write(request, lambda: self._assert_one(request))

    def _assert_one(self, request):
        params = ClaimInputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        claim = params.to_claim(params.validated_data)
        applied = services.fact_assert(agent=request.user, claim=claim)
        return Response(
            FactWriteOutputSerializer(_write_result(request.user, applied)).data,
            status=status.HTTP_200_OK
            if applied.outcome == projection.Outcome.CONFIRMED
            else status.HTTP_201_CREATED,
        )

    def _assert_batch(self, request):
        params = ClaimBatchInputSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        to_claim = ClaimInputSerializer().to_claim
        claims = [to_claim(item) for item in params.validated_data["facts"]]
        applied = services.facts_assert(agent=request.user, claims=claims)
        body = {
            "count": len(applied),
            "results": [
                {
                    "outcome": a.outcome,
                    "fact_id": a.fact.pk,
                    "recorded_at": a.recorded_at,
                    "superseded": [f.pk for f in a.superseded],
                    "resolved_contests": [f.pk for f in a.resolved_contests],
                }
                for a in applied
            ],
        }
        return Response(FactBatchOutputSerializer(body).data, status=status.HTTP_201_CREATED)


def _fact_action(request, service, serializer_class, fact_id, **fixed):
    def write():
        data = dict(body_data(serializer_class, request))
        provenance = ProvenanceInputSerializer.provenance(data)
        for name in ProvenanceInputSerializer.PROVENANCE_FIELDS:
            data.pop(name, None)
        applied = service(
            agent=request.user, fact_id=fact_id, provenance=provenance, **data, **fixed
        )
        return Response(FactWriteOutputSerializer(_write_result(request.user, applied)).data)

    return idempotent_write(request, write)


class FactRetractApi(APIView):
    @extend_schema(
        request=RetractInputSerializer,
        responses=FactWriteOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Retract a fact: it is no longer believed",
        description="Closes the version's record time only; its valid time is untouched, so "
        "as-known-at for earlier record times still shows it. An open contest can be "
        "withdrawn the same way. 409 not_current for a version that is no longer believed.",
    )
    def post(self, request, fact_id):
        return _fact_action(request, services.fact_retract, RetractInputSerializer, fact_id)


class FactCorrectApi(APIView):
    @extend_schema(
        request=CorrectInputSerializer,
        responses=FactWriteOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Correct a fact: the record was wrong for its valid period",
        description="A new version with the right value replaces it over exactly that period "
        "(outcome 'corrected'); a correction of lower authority is stored as 'contested'.",
    )
    def post(self, request, fact_id):
        def write():
            data = body_data(CorrectInputSerializer, request)
            applied = services.fact_correct(
                agent=request.user,
                fact_id=fact_id,
                value=data.get("value", services.MISSING),
                object_entity=data.get("object_entity"),
                provenance=ProvenanceInputSerializer.provenance(data),
            )
            return Response(FactWriteOutputSerializer(_write_result(request.user, applied)).data)

        return idempotent_write(request, write)


class FactEndApi(APIView):
    @extend_schema(
        request=EndInputSerializer,
        responses=FactWriteOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="End a fact: it stopped being true at valid_to",
        description="A new version with that end replaces it. valid_to must fall inside the "
        "valid period (400); a claim of lower authority than the fact's is refused (409 "
        "insufficient_authority).",
    )
    def post(self, request, fact_id):
        return _fact_action(request, services.fact_end, EndInputSerializer, fact_id)


class FactResolveApi(APIView):
    required_scope = Scope.ADMIN

    @extend_schema(
        request=ResolveInputSerializer,
        responses=FactWriteOutputSerializer,
        parameters=[IDEMPOTENCY_KEY],
        summary="Settle an open contest (admin scope: the operator's action)",
        description="accept: the contested claim goes in force with operator authority "
        "(outcome 'accepted'); reject: it is closed ('rejected'). 409 not_contested when the "
        "fact is not an open contest.",
    )
    def post(self, request, fact_id):
        def write():
            data = body_data(ResolveInputSerializer, request)
            applied = services.contest_resolve(agent=request.user, fact_id=fact_id, **data)
            return Response(FactWriteOutputSerializer(_write_result(request.user, applied)).data)

        return idempotent_write(request, write)


# -------------------------------------------------------------------- fact queries


def _subject_and_predicate(request, params: dict):
    subject = selectors.entity_resolve(agent=request.user, ref=params["subject"])
    name = params.get("predicate")
    predicate = selectors.predicate_get(agent=request.user, name=name) if name else None
    return subject, predicate


class FactDetailApi(APIView):
    @extend_schema(responses=FactOutputSerializer, summary="One fact version")
    def get(self, request, fact_id):
        fact = selectors.fact_get(agent=request.user, fact_id=fact_id)
        return Response(FactOutputSerializer(fact).data)


def _lookup_announced(response, request, params, facts, started: float, *, lookup: str):
    """A fact lookup is a read an agent makes instead of recall: announce it
    (piper.reads) so it is traced and can take feedback."""
    times = {
        name: params[name].isoformat() for name in ("valid_time", "record_time") if name in params
    }
    return read_announce(
        response,
        agent=request.user,
        route="facts_lookup",
        query=" ".join(filter(None, [params["subject"], params.get("predicate")])),
        filters={"lookup": lookup, **times},
        returned=[{"kind": "fact", "id": fact.pk, "score": None} for fact in facts],
        started=started,
    )


class FactCurrentApi(APIView):
    @extend_schema(
        parameters=[FactQuerySerializer],
        responses=FactListOutputSerializer,
        summary="current: what is true now, as currently believed",
        description="Without predicate: every current fact about the subject. Contested claims "
        "are never current; they show in each fact's memory_status.contested_by.",
    )
    def get(self, request):
        started = time.perf_counter()
        params = query_data(FactQuerySerializer, request)
        if params.get("predicate"):
            subject, _, facts = selectors.facts_valid_at_by_ref(
                agent=request.user,
                subject_ref=params["subject"],
                predicate_name=params["predicate"],
            )
        else:
            subject, predicate = _subject_and_predicate(request, params)
            facts = selectors.facts_current(agent=request.user, subject=subject, predicate=None)
        body = {"subject": subject, "predicate": params.get("predicate"), "facts": facts}
        response = Response(FactListOutputSerializer(body).data)
        return _lookup_announced(response, request, params, facts, started, lookup="current")


class FactAsOfApi(APIView):
    @extend_schema(
        parameters=[FactAsOfQuerySerializer],
        responses=FactAsOfOutputSerializer,
        summary="as_of: what was true at valid_time, as currently believed",
    )
    def get(self, request):
        started = time.perf_counter()
        params = query_data(FactAsOfQuerySerializer, request)
        if params.get("predicate"):
            subject, _, facts = selectors.facts_valid_at_by_ref(
                agent=request.user,
                subject_ref=params["subject"],
                predicate_name=params["predicate"],
                valid_time=params["valid_time"],
            )
        else:
            subject, predicate = _subject_and_predicate(request, params)
            facts = selectors.facts_as_of(
                agent=request.user, subject=subject, predicate=None, valid_time=params["valid_time"]
            )
        body = {
            "subject": subject,
            "predicate": params.get("predicate"),
            "valid_time": params["valid_time"],
            "facts": facts,
        }
        response = Response(FactAsOfOutputSerializer(body).data)
        return _lookup_announced(response, request, params, facts, started, lookup="as_of")


class FactAsKnownAtApi(APIView):
    @extend_schema(
        parameters=[FactAsKnownAtQuerySerializer],
        responses=FactAsKnownAtOutputSerializer,
        summary="as_known_at: what the system believed at record_time about valid_time",
        description="For audits and late-arriving evidence: later corrections and "
        "retractions are ignored; contested claims were never believed and never appear.",
    )
    def get(self, request):
        started = time.perf_counter()
        params = query_data(FactAsKnownAtQuerySerializer, request)
        subject, predicate = _subject_and_predicate(request, params)
        facts = selectors.facts_as_known_at(
            agent=request.user,
            subject=subject,
            predicate=predicate,
            valid_time=params["valid_time"],
            record_time=params["record_time"],
        )
        body = {
            "subject": subject,
            "predicate": params.get("predicate"),
            "valid_time": params["valid_time"],
            "record_time": params["record_time"],
            "facts": facts,
        }
        response = Response(FactAsKnownAtOutputSerializer(body).data)
        return _lookup_announced(response, request, params, facts, started, lookup="as_known_at")


CHAIN_DESCRIPTION = (
    "Every version of the subject's predicate ever recorded — believed, superseded, retracted "
    "and contested — in record order, each with its provenance and its supersedes / "
    "superseded_by / contests / contested_by links: 'as of T, and why' in one call."
)


class FactChainApi(APIView):
    @extend_schema(
        parameters=[FactChainQuerySerializer],
        responses=FactListOutputSerializer,
        operation_id="v1_facts_chain_retrieve",
        summary="chain: the history of subject+predicate",
        description=CHAIN_DESCRIPTION,
    )
    def get(self, request):
        params = query_data(FactChainQuerySerializer, request)
        subject, predicate = _subject_and_predicate(request, params)
        facts = selectors.fact_chain(agent=request.user, subject=subject, predicate=predicate)
        body = {"subject": subject, "predicate": predicate.name, "facts": facts}
        return Response(FactListOutputSerializer(body).data)


class FactChainByIdApi(APIView):
    @extend_schema(
        responses=FactListOutputSerializer,
        operation_id="v1_facts_fact_chain_retrieve",
        summary="chain: the history this fact version belongs to",
        description=CHAIN_DESCRIPTION,
    )
    def get(self, request, fact_id):
        fact = selectors.fact_get(agent=request.user, fact_id=fact_id)
        facts = selectors.fact_chain(
            agent=request.user, subject=fact.subject, predicate=fact.predicate
        )
        body = {"subject": fact.subject, "predicate": fact.predicate.name, "facts": facts}
        return Response(FactListOutputSerializer(body).data)


class FactContestedApi(APIView):
    @extend_schema(
        parameters=[CursorQuerySerializer],
        responses=FactPageSerializer,
        operation_id="v1_facts_contested_list",
        summary="The open contests an operator has to settle, oldest first",
        description="Each is a lower-authority claim that changed nothing current; "
        "memory_status.contests names the version it challenges. Settle with "
        "POST /facts/{id}/resolve (admin scope).",
    )
    def get(self, request):
        query_data(CursorQuerySerializer, request)
        paginator = ContestPagination()
        page = paginator.paginate_queryset(
            selectors.contested_queue(agent=request.user), request, view=self
        )
        return paginator.get_paginated_response(FactOutputSerializer(page, many=True).data)


# --------------------------------------------------------------------------- graph


class GraphPathsApi(APIView):
    @extend_schema(
        parameters=[GraphPathsQuerySerializer],
        responses=GraphPathsOutputSerializer,
        summary="Paths of relations from start (to end), believed and valid at valid_time",
        description="One recursive SQL query over relation facts; shortest paths first, no "
        "entity twice in a path. predicates=a,b,c fixes each hop's predicate and the length. "
        "Each path carries its facts as evidence.",
    )
    def get(self, request):
        params = query_data(GraphPathsQuerySerializer, request)
        agent = request.user
        start = selectors.entity_resolve(agent=agent, ref=params["start"])
        end = selectors.entity_resolve(agent=agent, ref=params["end"]) if "end" in params else None
        predicates = [
            selectors.predicate_get(agent=agent, name=name) for name in params.get("predicates", [])
        ]
        valid_time = params.get("valid_time") or timezone.now()
        paths = selectors.graph_paths(
            agent=agent,
            start=start,
            end=end,
            min_hops=params["min_hops"],
            max_hops=params["max_hops"],
            predicates=predicates or None,
            valid_time=valid_time,
            limit=params["limit"],
        )
        return Response(GraphPathsOutputSerializer({"valid_time": valid_time, "paths": paths}).data)
