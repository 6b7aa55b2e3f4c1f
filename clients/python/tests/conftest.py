"""Fixtures of the SDK tests (helpers in sdk_support.py)."""

import pytest

from .sdk_support import Keys, in_process, make_keys


@pytest.fixture
def keys(transactional_db) -> Keys:
    return make_keys()


@pytest.fixture
def memory(keys):
    with in_process(keys.write) as client:
        yield client


@pytest.fixture
def admin(keys):
    with in_process(keys.admin) as client:
        yield client
