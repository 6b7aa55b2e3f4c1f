"""The SDK's tests: a package, so its conftest is not the top-level `conftest` the
project's tests import make_client from."""
