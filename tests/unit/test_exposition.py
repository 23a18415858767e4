"""The ``/metrics`` endpoint (zkcoord/runtime/exposition.py): one registry per server, over real sockets."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from tests.scrape import scrape, try_scrape
from zkcoord.errors import MetricsServerError
from zkcoord.runtime.exposition import MetricsServer, serve_metrics


def _registry(name: str, value: float) -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter(name, "a test counter", registry=registry).inc(value)
    return registry


def test_each_server_shows_its_own_registry_and_frees_its_port() -> None:
    with MetricsServer.start(_registry("one", 1)) as a, MetricsServer.start(_registry("two", 2)) as b:
        assert a.port != b.port and a.url == f"http://127.0.0.1:{a.port}/metrics"
        first, second = scrape(a.port), scrape(b.port)
        assert (first.get("one_total"), first.value("two_total")) == (1, None)
        assert (second.get("two_total"), second.value("one_total")) == (2, None)
    assert try_scrape(a.port) is None
    a.close()  # idempotent
    with MetricsServer.start(_registry("again", 3), port=a.port) as again:  # a restarted process binds it again
        assert scrape(again.port).get("again_total") == 3


def test_a_port_in_use_or_out_of_range_is_refused_with_the_reason() -> None:
    taken = MetricsServer.start(CollectorRegistry())
    with taken, pytest.raises(MetricsServerError, match=rf"127\.0\.0\.1:{taken.port}: Address already in use$"):
        MetricsServer.start(CollectorRegistry(), port=taken.port)
    with pytest.raises(MetricsServerError, match=r"within 0\.\.65535"):
        MetricsServer.start(CollectorRegistry(), port=-1)
    with pytest.raises(MetricsServerError, match=r"256\.1\.1\.1:0: unknown address"):
        MetricsServer.start(CollectorRegistry(), "256.1.1.1")


def test_port_zero_on_the_command_line_is_no_endpoint() -> None:
    assert serve_metrics(CollectorRegistry(), "127.0.0.1", 0) is None
    with MetricsServer.start(CollectorRegistry()) as probe:
        port = probe.port  # a port free a moment ago
    server = serve_metrics(_registry("three", 3), "127.0.0.1", port)
    assert server is not None
    with server:
        assert scrape(port).get("three_total") == 3
