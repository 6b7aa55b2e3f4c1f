"""`Authorization: Bearer <key>` authentication."""

from rest_framework import authentication, exceptions

from piper.tenancy.selectors import api_key_for_secret
from piper.tenancy.services import api_key_touch


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """Sets request.user to the Agent and request.auth to the ApiKey."""

    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        parts = header.split()
        # The scheme is case-insensitive (RFC 9110 §11.1): "bearer" is "Bearer".
        if len(parts) != 2 or parts[0].lower() != self.keyword.lower():
            raise exceptions.AuthenticationFailed(
                "malformed Authorization header: send 'Authorization: Bearer <api key>'"
            )
        api_key = api_key_for_secret(parts[1])
        if api_key is None:
            raise exceptions.AuthenticationFailed("the API key is unknown or has been revoked")
        api_key_touch(api_key=api_key)
        return api_key.agent, api_key

    def authenticate_header(self, request) -> str:
        # Having a header makes DRF answer 401 (not 403) to unauthenticated requests.
        return f'{self.keyword} realm="piper"'
