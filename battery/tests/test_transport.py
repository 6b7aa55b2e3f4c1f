import pytest
from django.test import override_settings

from battery.transport import ApiResponse, HttpTransport, TransportFailure, allowed_host


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (["*"], "testserver"),
        ([".example.com", "other"], "example.com"),
        (["piper.internal"], "piper.internal"),
        ([], "localhost"),
    ],
)
def test_in_process_requests_use_a_host_the_service_allows(hosts, expected):
    with override_settings(ALLOWED_HOSTS=hosts):
        assert allowed_host() == expected


def test_error_code_and_description_of_a_response():
    body = {"error": {"code": "not_found", "message": "m", "details": {}}}
    response = ApiResponse(status=404, body=body, headers={}, text="x" * 500)
    assert response.error_code() == "not_found"
    assert response.describe(limit=3) == "HTTP 404 xxx…"
    assert ApiResponse(status=200, body=[1], headers={}, text="[1]").error_code() is None


def test_an_unreachable_server_is_a_transport_failure():
    transport = HttpTransport(base_url="http://127.0.0.1:9/")
    try:
        with pytest.raises(
            TransportFailure, match=r"^GET http://127.0.0.1:9/healthz: ConnectError\("
        ):
            transport.request("GET", "/healthz")
    finally:
        transport.close()
