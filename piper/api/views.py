"""Core API: who am I, API keys; JSON 404/500 for everything under /api/."""

from __future__ import annotations

from django.http import JsonResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from piper.errors import NotFound
from piper.provenance import PrivacyClass
from piper.tenancy.models import MAX_RATE_PER_MINUTE, ApiKey, Scope
from piper.tenancy.selectors import api_key_list
from piper.tenancy.services import api_key_create, api_key_revoke

from .errors import error_body
from .idempotency import idempotent_write
from .serializers import StrictSerializer


def not_found(request, exception=None):
    return JsonResponse(error_body("not_found", f"no such endpoint: {request.path}"), status=404)


def server_error(request):
    return JsonResponse(
        error_body("server_error", "internal error; it has been logged"), status=500
    )


class AgentMeApi(APIView):
    class OutputSerializer(serializers.Serializer):
        id = serializers.UUIDField()
        name = serializers.CharField()
        description = serializers.CharField()
        created_at = serializers.DateTimeField()
        scopes = serializers.ListField(child=serializers.CharField())

    @extend_schema(responses=OutputSerializer, summary="The agent this key belongs to")
    def get(self, request):
        agent = request.user
        data = {
            "id": agent.pk,
            "name": agent.name,
            "description": agent.description,
            "created_at": agent.created_at,
            "scopes": request.auth.scopes,
        }
        return Response(self.OutputSerializer(data).data)


class ApiKeyOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "scopes",
            "rate_per_minute",
            "clearance",
            "tools",
            "created_at",
            "last_used_at",
            "revoked_at",
        ]


class ApiKeyListApi(APIView):
    required_scope = Scope.ADMIN

    class InputSerializer(StrictSerializer):
        name = serializers.CharField(max_length=100)
        scopes = serializers.ListField(
            child=serializers.ChoiceField(choices=Scope.choices),
            min_length=1,
            default=[Scope.READ, Scope.WRITE],
        )
        rate_per_minute = serializers.IntegerField(
            min_value=1, max_value=MAX_RATE_PER_MINUTE, required=False, allow_null=True
        )
        clearance = serializers.ChoiceField(
            choices=PrivacyClass.choices,
            required=False,
            default=PrivacyClass.PERSONAL,
            help_text="The most private memories the key may read.",
        )
        tools = serializers.ListField(
            child=serializers.CharField(max_length=50),
            required=False,
            default=list,
            help_text="The MCP tools the key may call; empty: every tool its scopes allow.",
        )

    class CreatedSerializer(ApiKeyOutputSerializer):
        key = serializers.CharField(help_text="The secret. Shown once, never again.")

        class Meta(ApiKeyOutputSerializer.Meta):
            fields = [*ApiKeyOutputSerializer.Meta.fields, "key"]

    @extend_schema(
        responses=ApiKeyOutputSerializer(many=True), summary="This agent's API keys (admin scope)"
    )
    def get(self, request):
        return Response(ApiKeyOutputSerializer(api_key_list(agent=request.user), many=True).data)

    @extend_schema(
        request=InputSerializer,
        responses={201: CreatedSerializer},
        summary="Create an API key (admin scope)",
    )
    def post(self, request):
        def write():
            params = self.InputSerializer(data=request.data)
            params.is_valid(raise_exception=True)
            api_key, raw = api_key_create(agent=request.user, **params.validated_data)
            api_key.key = raw
            return Response(self.CreatedSerializer(api_key).data, status=status.HTTP_201_CREATED)

        return idempotent_write(request, write, secret_fields=("key",))


class ApiKeyDetailApi(APIView):
    required_scope = Scope.ADMIN

    @extend_schema(
        request=None, responses=ApiKeyOutputSerializer, summary="Revoke an API key (admin scope)"
    )
    def delete(self, request, key_id):
        api_key = api_key_list(agent=request.user).filter(pk=key_id).first()
        if api_key is None:
            raise NotFound(f"API key {key_id} not found")
        return Response(ApiKeyOutputSerializer(api_key_revoke(api_key=api_key)).data)
