"""Pipelined bursts: many reads (or many transactions) sent at once, their replies waited for in order.

One round trip of latency for a burst instead of one per znode: ZooKeeper answers one session's requests in the order
they were sent.  Each function takes the kazoo client to send with and the waiter for the replies (what
:class:`~zkcoord.zk.client.ZkClient` gives them: its client checked against the stop deadline, and its bounded wait),
so it knows nothing of the client object.  Callers use the ``*_many`` methods of
:class:`~zkcoord.zk.client.ZkClient`, which delegate here; the contracts are stated on both.

Runs on the caller's thread and blocks until every reply has come (or the wait gives up).  Part of the ZooKeeper
boundary (:mod:`zkcoord.zk`); may import kazoo, :mod:`zkcoord.errors` and :mod:`zkcoord.zk.{handler,translate,types}`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

from kazoo.client import KazooClient

from zkcoord import errors
from zkcoord.zk.handler import Waiter
from zkcoord.zk.translate import Refused, Transaction, translate
from zkcoord.zk.types import OneShot, Stat, WatchEvent

#: what :meth:`ZkClient.read_many` reads of a znode: its data, or its children
ReadKind = Literal["get", "children"]


def get_many(
    kazoo: KazooClient,
    wait: Waiter,
    paths: Sequence[str],
    watch: Callable[[WatchEvent], None] | None = None,
    watched: Collection[str] | None = None,
    *,
    refused: Refused | None = None,
) -> list[tuple[bytes, Stat] | None]:
    """Read many znodes in one pipelined burst (one round trip of latency, not one per node).

    Absent nodes give ``None`` (and no watch).  With ``watch``, each node read (or only those in ``watched``)
    gets a one-shot data watch, as :func:`children_stat_many` sets children watches (``CHANGED``, ``DELETED`` or
    ``RESET``).  :raises ZkError: for any other failure.
    """
    pending = [
        (
            path,
            kazoo.get_async(path)
            if watch is None or (watched is not None and path not in watched)
            else kazoo.get_async(path, watch=OneShot(watch, path)),
        )
        for path in paths
    ]
    out: list[tuple[bytes, Stat] | None] = []
    for path, result in pending:
        try:
            with translate(path, refused, "get"):
                data, stat = wait(result, path, None)
        except errors.NoNodeError:
            out.append(None)
            continue
        out.append((data or b"", stat))
    return out


def read_many(
    kazoo: KazooClient,
    wait: Waiter,
    reads: Sequence[tuple[ReadKind, str]],
    timeout: float | None = None,
    *,
    refused: Refused | None = None,
) -> list[Any]:
    """Run ``reads`` (``("get", path)`` or ``("children", path)``) in one pipelined burst; return their results in
    order: ``(data, stat)`` for ``get``, the child list for ``children``, ``None`` for an absent znode.  Each
    reply waited for at most ``timeout`` s (and never past the client's stop deadline).

    :raises ZkError: (typed) for any other failure, :class:`ZkUnavailableError` for a reply not in time.
    """
    pending = [
        (kind, path, kazoo.get_async(path) if kind == "get" else kazoo.get_children_async(path)) for kind, path in reads
    ]
    out: list[Any] = []
    for kind, path, result in pending:
        try:
            with translate(path, refused, "get"):
                value = wait(result, path, timeout)
        except errors.NoNodeError:
            value = None
        out.append(value if value is None or kind == "children" else ((value[0] or b""), value[1]))
    return out


def children_stat_many(
    kazoo: KazooClient,
    wait: Waiter,
    paths: Sequence[str],
    watch: Callable[[WatchEvent], None] | None = None,
    *,
    refused: Refused | None = None,
) -> list[tuple[list[str], Stat] | None]:
    """List the children of many znodes in one pipelined burst, with each listed node's own stat; absent nodes give
    ``None``.

    With ``watch``, each listing that succeeds also sets a one-shot children watch on its path (``CHILD``,
    ``DELETED`` or ``RESET``); no watch is set on an absent node.  ``watch`` runs on kazoo's watch thread: enqueue,
    do not block, do not call ZooKeeper.
    """
    pending = [
        (
            path,
            kazoo.get_children_async(path, watch=None if watch is None else OneShot(watch, path), include_data=True),
        )
        for path in paths
    ]
    out: list[tuple[list[str], Stat] | None] = []
    for path, result in pending:
        try:
            with translate(path, refused, "get"):
                children, stat = wait(result, path, None)
        except errors.NoNodeError:
            out.append(None)
            continue
        out.append((children, stat))
    return out


def commit_many(transactions: Sequence[Transaction]) -> list[list[Any] | errors.ZkError]:
    """Commit several transactions pipelined; ZooKeeper applies one session's requests in order.

    Returns, per transaction, its results or the typed error it failed with (never raises for one of them).
    """
    pending = [txn.commit_begin() for txn in transactions]
    out: list[list[Any] | errors.ZkError] = []
    for txn, result in zip(transactions, pending, strict=True):
        try:
            out.append(txn.commit_end(result))
        except errors.ZkError as e:
            out.append(e)
    return out
