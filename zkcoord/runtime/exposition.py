"""The ``/metrics`` endpoint: one registry's metrics over HTTP, in Prometheus' text format (prometheus_client's
exposition; nothing here formats a metric).

A process serves the :class:`~prometheus_client.CollectorRegistry` its command line built for it -- never the
library's global default registry, so that several brokers or consumers in one process (the tests) each show only
their own.  What the registries hold is the coordinator's and the consumer's business (``docs/metrics.md``).

Threads: :meth:`MetricsServer.start` binds the socket on the caller's thread (so a port in use is the caller's
error, before anything else starts) and serves on a daemon thread, one more thread per request being answered; a
scrape runs the registry's collectors on that thread.  :meth:`MetricsServer.close` may be called from any thread.
"""

from __future__ import annotations

import socket
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from zkcoord.errors import MetricsServerError

#: where the endpoint listens unless told otherwise: this host only (metrics name groups, topics and consumers;
#: ``--metrics-addr 0.0.0.0`` opens it to the network, as a container needs)
DEFAULT_ADDRESS = "127.0.0.1"

#: how often the serving thread looks for a :meth:`MetricsServer.close` (bounds how long closing waits)
_POLL_S = 0.05


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: a scrape every few seconds would bury the process's own lines."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


class MetricsServer:
    """An HTTP server answering ``GET /metrics`` (any path, as prometheus_client's WSGI app does) from one registry.
    A context manager: closed on exit."""

    def __init__(self, server: ThreadingWSGIServer, thread: threading.Thread, address: str) -> None:
        self._server = server
        self._thread = thread
        self.address = address
        #: the port bound (the one asked for, or the one the system chose for port 0)
        self.port: int = server.server_address[1]

    @classmethod
    def start(cls, registry: CollectorRegistry, address: str = DEFAULT_ADDRESS, port: int = 0) -> MetricsServer:
        """Bind ``address:port`` (port 0: any free port) and serve ``registry`` on a daemon thread.

        :raises MetricsServerError: the port is out of range or in use, or the address is not one of this host's.
        """
        if not 0 <= port <= 65535:
            raise MetricsServerError(address, port, "the port must be within 0..65535")
        try:
            family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)[0][0]
        except (OSError, UnicodeError) as e:
            raise MetricsServerError(address, port, f"unknown address ({e})") from e

        class Server(ThreadingWSGIServer):
            address_family = family

        try:
            server = make_server(address, port, make_wsgi_app(registry), Server, handler_class=_QuietHandler)
        except OSError as e:
            raise MetricsServerError(address, port, e.strerror or str(e)) from e
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": _POLL_S}, name=f"metrics-{port}", daemon=True
        )
        thread.start()
        return cls(server, thread, address)

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port (waits for the serving loop to notice: :data:`_POLL_S` at most; a scrape
        being answered finishes on its own thread).  Idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(registry: CollectorRegistry, address: str, port: int) -> MetricsServer | None:
    """The command line's ``--metrics-addr``/``--metrics-port``: serve ``registry`` there, or nothing for port 0
    (off, the default).  :raises MetricsServerError: as :meth:`MetricsServer.start`."""
    if port == 0:
        return None
    return MetricsServer.start(registry, address, port)
