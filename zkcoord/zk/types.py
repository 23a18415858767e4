"""The types callers of :mod:`zkcoord.zk` see: znode stats, connection states, watch events.

No kazoo import here: these are the project's own names for what kazoo reports (:mod:`zkcoord.zk` maps them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

log = logging.getLogger("zkcoord.zk")


class Stat(Protocol):
    """The znode metadata ZooKeeper returns (kazoo's ``ZnodeStat`` named tuple): the fields this project reads."""

    @property
    def version(self) -> int: ...
    @property
    def czxid(self) -> int: ...
    @property
    def mzxid(self) -> int: ...
    @property
    def ephemeralOwner(self) -> int: ...  # ZooKeeper's own camelCase names
    @property
    def numChildren(self) -> int: ...
    @property
    def cversion(self) -> int: ...
    @property
    def ctime(self) -> int: ...
    @property
    def mtime(self) -> int: ...


class ConnState(Enum):
    """The connection states callers see (kazoo's ``KazooState``, as an enum).

    Legal transitions: ``LOST -> CONNECTED`` (first connect, or a new session after expiry), ``CONNECTED ->
    SUSPENDED`` (connection lost, session maybe alive), ``SUSPENDED -> CONNECTED`` (same session resumed),
    ``SUSPENDED -> LOST`` (the session expired meanwhile: ephemerals are gone), ``CONNECTED -> LOST`` (closed).
    """

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


class WatchKind(Enum):
    """What fired a one-shot watch (ZooKeeper's event types).  ``RESET``: the connection was lost and the watch is
    gone without anything having changed (kazoo does not re-register raw watches): re-read and re-watch."""

    CREATED = "CREATED"
    DELETED = "DELETED"
    CHANGED = "CHANGED"
    CHILD = "CHILD"
    RESET = "NONE"


_WATCH_KINDS = {kind.value: kind for kind in WatchKind}


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One firing of a one-shot watch set by :meth:`ZkClient.children_many`: its kind and the watched path."""

    kind: WatchKind
    path: str


@dataclass(frozen=True, slots=True)
class OneShot:
    """A raw kazoo watcher for one path.  Equal for the same ``(func, path)``, so kazoo's per-path watcher set keeps
    one of them however often the path is re-watched before it fires (one event per change, not one per re-read)."""

    func: Callable[[WatchEvent], None]
    path: str

    def __call__(self, event: Any) -> None:
        kind = _WATCH_KINDS.get(event.type, WatchKind.RESET)
        try:
            self.func(WatchEvent(kind, self.path))
        except Exception:  # a raising callback must not kill kazoo's watch thread
            log.exception("watch callback on %s failed", self.path)
