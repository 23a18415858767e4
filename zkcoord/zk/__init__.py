"""The ZooKeeper boundary: the only package that imports kazoo.

:mod:`zkcoord.zk.client` (:class:`ZkClient`: every call the project makes, kazoo's exceptions translated into
:mod:`zkcoord.errors`, watches whose callbacks only enqueue), :mod:`zkcoord.zk.config` (validated connection
settings: hosts, chroot, timeouts), :mod:`zkcoord.zk.handler` (kazoo's handler made to stop within a deadline) and
:mod:`zkcoord.zk.types` (the project's own names for what kazoo reports: stats, states, watch events).  Callers import
from here.
"""

from zkcoord.zk.client import ReadKind, Transaction, ZkClient, translate
from zkcoord.zk.config import ZkAddress, ZkConfig
from zkcoord.zk.types import ConnState, Stat, WatchEvent, WatchKind

__all__ = [
    "ConnState",
    "ReadKind",
    "Stat",
    "Transaction",
    "WatchEvent",
    "WatchKind",
    "ZkAddress",
    "ZkClient",
    "ZkConfig",
    "translate",
]
