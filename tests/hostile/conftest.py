"""Fixtures the hostile suites share."""

from __future__ import annotations

import pytest

from tests.zkutil import ZkFactory
from zkcoord.zkserver import ZkServer


@pytest.fixture
def server(zk_factory: ZkFactory) -> ZkServer:
    """A server of the test's own: stopped and started again on the same port and data, or paused."""
    return zk_factory.server()
