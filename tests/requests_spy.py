"""Counting the ZooKeeper requests a client sends, for tests of what a protocol step costs (issue 16's budget).

:class:`Requests` wraps kazoo's ``KazooClient._call`` -- the one queue every request of a client goes through (pings
and the session's own handshake do not) -- for the duration of a test, and records each request's type and path,
per kazoo client.  A multi is one request (``Transaction``), as the server counts it.
"""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient


class Requests:
    """Every request sent by any kazoo client while the test runs: ``(client id, request type, path)``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[int, str, str | None]] = []
        original = KazooClient._call

        def call(client: KazooClient, request: Any, async_object: Any) -> Any:
            self.seen.append((id(client), type(request).__name__, getattr(request, "path", None)))
            return original(client, request, async_object)

        monkeypatch.setattr(KazooClient, "_call", call)

    def mark(self) -> int:
        """A position in the record: :meth:`since` counts from it."""
        return len(self.seen)

    def since(self, mark: int, client: KazooClient | None = None) -> list[tuple[str, str | None]]:
        """The requests sent since ``mark`` (by ``client`` only, if given): ``(type, path)`` each."""
        return [(kind, path) for cid, kind, path in self.seen[mark:] if client is None or cid == id(client)]

    def reads(self, mark: int, path: str, client: KazooClient | None = None) -> int:
        """How many reads (``get``, ``exists``) of ``path`` were sent since ``mark``."""
        kinds = {"GetData", "Exists"}
        return sum(1 for kind, p in self.since(mark, client) if kind in kinds and p is not None and p.endswith(path))
