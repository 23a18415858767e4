"""The ZooKeeper boundary: the only package that imports kazoo.

:mod:`zkcoord.zk.client` (:class:`ZkClient`: every call the project makes, watches whose callbacks only enqueue),
:mod:`zkcoord.zk.translate` (kazoo's exceptions translated into :mod:`zkcoord.errors`, and :class:`Transaction`),
:mod:`zkcoord.zk.many` (pipelined bursts behind the ``*_many`` methods), :mod:`zkcoord.zk.config` (validated connection
settings: hosts, chroot, timeouts), :mod:`zkcoord.zk.handler` (kazoo's handler made to stop within a deadline) and
:mod:`zkcoord.zk.types` (the project's own names for what kazoo reports: stats, states, watch events).  Callers import
from here.
"""

from zkcoord.zk.auth import load_credential
from zkcoord.zk.client import ChildrenWatch, ZkClient
from zkcoord.zk.config import ZkAddress, ZkConfig
from zkcoord.zk.many import ReadKind
from zkcoord.zk.translate import Transaction, translate
from zkcoord.zk.types import ConnState, Stat, WatchEvent, WatchKind

__all__ = [
    "ChildrenWatch",
    "ConnState",
    "ReadKind",
    "Stat",
    "Transaction",
    "WatchEvent",
    "WatchKind",
    "ZkAddress",
    "ZkClient",
    "ZkConfig",
    "load_credential",
    "translate",
]
