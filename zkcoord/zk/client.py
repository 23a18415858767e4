"""The ZooKeeper boundary's client: the package :mod:`zkcoord.zk` is the only one of the product that imports kazoo.
This module creates kazoo clients and sends every request; :mod:`zkcoord.zk.translate` translates kazoo's exceptions
(and holds :class:`~zkcoord.zk.translate.Transaction`); :mod:`zkcoord.zk.many` sends pipelined bursts;
:mod:`zkcoord.zk.handler` holds kazoo's threading handler and closes a client (catching kazoo's exceptions of
``stop()``/``close()`` itself, and raising nothing).  The :attr:`ZkClient.kazoo` property is for tests (forcing a
session expiry); ``zkcoord/bench/scale`` speaks ZooKeeper's wire protocol on its own, outside the product.  May import
kazoo, :mod:`zkcoord.errors`, :mod:`zkcoord.runtime` and the rest of :mod:`zkcoord.zk`.

Everything above these modules talks to :class:`ZkClient` and catches the project's own errors
(:mod:`zkcoord.errors`): every operation maps kazoo's failures through the one context manager
:func:`~zkcoord.zk.translate.translate` (:mod:`zkcoord.zk.translate` has the table).  Threads (kazoo's threading
handler): one connection thread that also runs state listeners, one worker that runs watch callbacks, one that runs
completion callbacks.  Listeners and watch callbacks registered through this module **must not block and must not
call ZooKeeper** (kazoo issues #356, #381, #405): they record a flag or put an event on a queue for a worker thread
of the caller's own.  The types callers see (``Stat``, ``ConnState``, ``WatchEvent``, ``WatchKind``) live in
:mod:`zkcoord.zk.types` and are re-exported here.  A stopping process bounds every call with
:meth:`ZkClient.bound` and closes the session with ``stop(timeout)`` (:mod:`zkcoord.runtime.shutdown`): kazoo
itself would wait forever for a server that refuses connections.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any, cast

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry

from zkcoord import errors
from zkcoord.layout.acl import POLICY, AclPolicy
from zkcoord.runtime.shutdown import Deadline
from zkcoord.zk import many
from zkcoord.zk.auth import AclContext, auth_data, kazoo_logger
from zkcoord.zk.config import ZkAddress, ZkConfig
from zkcoord.zk.handler import PollThreadingHandler, close_kazoo, on_negotiated_timeout
from zkcoord.zk.many import ReadKind
from zkcoord.zk.translate import RefusalReporter, Transaction, translate
from zkcoord.zk.types import ConnState, Stat, WatchEvent, WatchKind

log = logging.getLogger(__name__)

__all__ = [
    "ChildrenWatch",
    "ConnState",
    "Stat",
    "Transaction",
    "WatchEvent",
    "WatchKind",
    "ZkAddress",
    "ZkClient",
    "ZkConfig",
    "translate",
]


_STATE_MAP = {KazooState.CONNECTED: ConnState.CONNECTED, KazooState.SUSPENDED: ConnState.SUSPENDED}

#: How often a call waiting for its reply looks whether a stop deadline was set meanwhile (:meth:`ZkClient.bound`).
_WAIT_SLICE_S = 0.2


class ZkClient:
    """One ZooKeeper session, with the project's errors and states.

    Create it, call :meth:`start` (blocks until connected), use it from any number of threads, then :meth:`stop`.
    Nothing runs in ``__init__``.  A session expiry does not end the client: kazoo reconnects with a new session and
    listeners see ``SUSPENDED -> LOST -> CONNECTED``; ephemeral nodes and raw watches of the old session are gone.
    """

    def __init__(self, config: ZkConfig, *, name: str = "zkcoord") -> None:
        self.config = config
        self.name = name
        self._kazoo: KazooClient | None = None
        #: the session timeout the server granted to the current session (set before CONNECTED is reported); the
        #: requested one until the first connection
        self.session_timeout_s = config.session_timeout_s
        self._listeners: list[Callable[[ConnState], None]] = []
        self._lock = threading.Lock()
        #: set by :meth:`bound` when the process is stopping: no call waits past it
        self._deadline: Deadline | None = None
        #: with credentials: the ACL every znode this session creates gets (set by :meth:`start`)
        self._acl: AclContext | None = None
        #: told of every refusal this client raises (``refusals.add(listener)``; :class:`RefusalReporter`)
        self.refusals = self._report = RefusalReporter(
            name, lambda: self.role, config.auth.user if config.auth else None
        )

    # --- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> ZkClient:
        """Connect.  Blocks up to ``connect_timeout_s``.

        :raises ZkUnavailableError: ZooKeeper did not answer in time (the message says how to start one).
        """
        cfg = self.config
        if cfg.create_chroot and cfg.address.chroot:
            self._ensure_chroot()
        client = self._new_kazoo(str(cfg.address))
        client.add_listener(self._on_kazoo_state)
        try:
            client.start(timeout=cfg.connect_timeout_s)
        except KazooTimeoutError as e:
            client.stop()
            client.close()
            raise errors.ZkUnavailableError(self._unreachable_message()) from e
        self._kazoo = client
        if cfg.auth is not None:
            try:
                self._acl = AclContext.of(cfg.policy or self._read_policy(), cfg.auth, cfg.consumer_id)
            except errors.ZkCoordError:
                self.stop()
                raise
        return self

    def _read_policy(self) -> AclPolicy:
        """The deployment's ACL policy.  :raises ConfigurationError: there is none; :raises CodecError: malformed."""
        try:
            data, _ = self.get(POLICY)
        except errors.NoNodeError:
            raise errors.ConfigurationError(
                f"--zk-auth given but this ZooKeeper has no ACL policy ({POLICY}): secure it first with "
                "zkcoord zk secure --zk-auth COORDINATOR_CREDENTIALS --member-auth MEMBER_CREDENTIALS"
            ) from None
        return AclPolicy.decode(data)

    @property
    def role(self) -> str | None:
        """With credentials, this session's role in the ACL policy (``coordinator`` or ``member``); else None."""
        return None if self._acl is None else self._acl.role

    def _acl_of(self, path: str) -> list[Any] | None:
        return None if self._acl is None else self._acl.acl(path)

    def stop(self, timeout: float | None = None) -> bool:
        """Close the session (its ephemeral nodes vanish at once) and release the client's threads.  Idempotent.

        With ``timeout``, blocks at most that long: a server that is gone or paused does not hold the caller (the
        client is then left to finish closing on its own daemon threads).  Returns whether ZooKeeper acknowledged
        the close, i.e. whether the session and its ephemerals are gone now (False also when not started).
        """
        client, self._kazoo = self._kazoo, None
        return False if client is None else close_kazoo(client, timeout)

    def bound(self, deadline: Deadline) -> None:
        """Bound every call by ``deadline`` from now on, calls already waiting included: the process is stopping.

        A call whose reply has not come by then raises :class:`ZkUnavailableError` (it may still be applied, should
        the server get it), and a call made after it raises :class:`ZkNotSentError` at once without being sent.
        (Unbounded, a call made while the client is reconnecting waits until it reconnects: forever, if ZooKeeper
        is gone.)  Any thread.
        """
        self._deadline = deadline

    def _wait(self, result: Any, path: str | None, timeout: float | None = None) -> Any:
        """The reply of a request sent, or its kazoo error, waiting at most until the :meth:`bound` deadline (and at
        most ``timeout`` seconds).  :raises ZkUnavailableError: no reply by then (the request may still be applied)."""
        own = None if timeout is None else Deadline.after(timeout)
        while not result.ready():
            if own is not None and own.expired():
                raise errors.ZkUnavailableError(f"ZooKeeper did not answer within {timeout:g} s", path)
            left = own.remaining() if own is not None else _WAIT_SLICE_S
            deadline = self._deadline
            if deadline is not None:
                if deadline.expired():
                    raise errors.ZkUnavailableError("ZooKeeper did not answer before the stop deadline", path)
                left = min(left, deadline.remaining())
            result.wait(min(_WAIT_SLICE_S, left))  # in slices, so a deadline set meanwhile is seen
        return result.get(block=False)

    def _send(self, path: str | None) -> KazooClient:
        """The client to send a request with.  :raises ZkNotSentError: the stop deadline has passed."""
        deadline = self._deadline
        if deadline is not None and deadline.expired():
            raise errors.ZkNotSentError("not sent: the stop deadline has passed", path)
        return self.kazoo

    def __enter__(self) -> ZkClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _new_kazoo(self, hosts: str) -> KazooClient:
        # connection_retry: keep reconnecting forever (the session timeout decides when the session is dead, not
        # the client).  No command_retry: callers choose what is safe to retry (see :meth:`retry`).
        client = KazooClient(
            hosts=hosts,
            timeout=self.config.session_timeout_s,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            logger=kazoo_logger(self.name),
            handler=PollThreadingHandler(),
            auth_data=auth_data(self.config.auth, self.config.consumer_id),
        )
        on_negotiated_timeout(client, self._granted)
        return client

    def _granted(self, seconds: float) -> None:
        self.session_timeout_s = seconds

    def _ensure_chroot(self) -> None:
        root = self._new_kazoo(self.config.address.servers)
        try:
            root.start(timeout=self.config.connect_timeout_s)
        except KazooTimeoutError as e:
            root.close()
            raise errors.ZkUnavailableError(self._unreachable_message()) from e
        try:
            with translate(self.config.address.chroot, self._report, "create"):
                root.ensure_path(self.config.address.chroot)
        finally:
            root.stop()
            root.close()

    def _unreachable_message(self) -> str:
        return (
            f"cannot reach ZooKeeper at {self.config.address.servers} within {self.config.connect_timeout_s:g} s"
            " (start one with: zkcoord zk start)"
        )

    @property
    def kazoo(self) -> KazooClient:
        """The underlying kazoo client, for tests (nothing in the product uses it: requests go through the methods
        below, bounded by :meth:`bound`).  Raises if not started."""
        if self._kazoo is None:
            raise errors.ZkError(f"{self.name}: ZooKeeper client is not started")
        return self._kazoo

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """``(session id, password)`` of the current session; None while there is none (reconnecting)."""
        cid: tuple[int, bytes] | None = self.kazoo.client_id
        return cid

    @property
    def session_id(self) -> int:
        """The current session id, or 0 while there is none."""
        cid = self.client_id
        return cid[0] if cid else 0

    @property
    def held_session(self) -> int:
        """The session held: the live one, or while disconnected the one being resumed; 0 once it expired, until a
        new one is made.  A request made now goes out on it or not at all (kazoo drops its queue on expiry).  Any
        thread."""
        return int(getattr(self.kazoo, "_session_id", None) or 0)  # kazoo's own, cleared on expiry

    @property
    def state(self) -> ConnState:
        return _STATE_MAP.get(self.kazoo.state, ConnState.LOST)

    # --- connection states ----------------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[ConnState], None]) -> None:
        """Call ``listener(state)`` on every connection-state change.

        .. warning:: runs on kazoo's connection thread: it must return at once and must not call ZooKeeper.
        """
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[ConnState], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _on_kazoo_state(self, state: str) -> None:
        mapped = _STATE_MAP.get(state, ConnState.LOST)
        log.info("%s: ZooKeeper connection %s", self.name, mapped.value)
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(mapped)
            except Exception:  # a user callback must not kill kazoo's connection thread
                log.exception("%s: connection-state listener %r failed", self.name, listener)

    # --- operations ---------------------------------------------------------------------------------------------

    def get(self, path: str, watch: Callable[[Any], None] | None = None) -> tuple[bytes, Stat]:
        """Data and stat of ``path``.  :raises NoNodeError: if absent."""
        with translate(path, self._report, "get"):
            data, stat = self._wait(self._send(path).get_async(path, watch=watch), path)
        return (data or b""), stat

    def get_children(self, path: str, watch: Callable[[Any], None] | None = None) -> list[str]:
        with translate(path, self._report, "get"):
            children: list[str] = self._wait(self._send(path).get_children_async(path, watch=watch), path)
        return children

    def exists(self, path: str, watch: Callable[[Any], None] | None = None) -> Stat | None:
        with translate(path, self._report, "get"):
            stat: Stat | None = self._wait(self._send(path).exists_async(path, watch=watch), path)
        return stat

    def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        """Create ``path``; return the path created (with its sequence suffix for sequential nodes).  With
        credentials, ``path`` (and each missing parent) gets its ACL (:mod:`zkcoord.layout.acl`)."""
        makepath = self._parents(path, makepath)
        with translate(path, self._report, "create"):
            pending = self._send(path).create_async(
                path, value, acl=self._acl_of(path), ephemeral=ephemeral, sequence=sequence, makepath=makepath
            )
            created: str = self._wait(pending, path)
        return created

    def create_stat(self, path: str, value: bytes = b"", *, ephemeral: bool = False, makepath: bool = False) -> Stat:
        """Create ``path`` and return its stat, in the same round trip (ZooKeeper's create2)."""
        makepath = self._parents(path, makepath)
        with translate(path, self._report, "create"):
            pending = self._send(path).create_async(
                path, value, acl=self._acl_of(path), ephemeral=ephemeral, makepath=makepath, include_data=True
            )
            _, stat = self._wait(pending, path)
        return cast(Stat, stat)

    def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        with translate(path, self._report, "set"):
            stat: Stat = self._wait(self._send(path).set_async(path, value, version), path)
        return stat

    def delete(self, path: str, version: int = -1, *, recursive: bool = False) -> None:
        with translate(path, self._report, "delete"):
            if recursive:  # kazoo walks the tree with calls of its own (admin tools only, never a stop path)
                self._send(path).delete(path, version=version, recursive=True)
            else:
                self._wait(self._send(path).delete_async(path, version), path)

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents as empty persistent nodes if missing (idempotent).  With credentials,
        each gets its own ACL (kazoo would give every parent the ACL of ``path``).

        :raises AccessRefusedError: refused, or (a member) a missing parent is the coordinator side's to create.
        """
        if self._acl is None:
            with translate(path, self._report, "create"):
                self._wait(self._send(path).ensure_path_async(path), path)
            return
        missing: list[str] = []
        node = path
        while node and node != "/" and self.exists(node) is None:
            missing.append(node)
            node = node.rpartition("/")[0]
        for node in reversed(missing):
            with translate(node, self._report, "create"):
                self._acl.check_create(node)
            with contextlib.suppress(errors.NodeExistsError):  # created meanwhile: fine
                self.create(node)

    def _parents(self, path: str, makepath: bool) -> bool:
        """With credentials, create ``path``'s missing parents (each with its ACL) now, and return False: kazoo's
        ``makepath`` would give them ``path``'s ACL.  Else return ``makepath`` unchanged."""
        if makepath and self._acl is not None:
            self.ensure_path(path.rpartition("/")[0] or "/")
            return False
        return makepath

    def ensure_paths(self, paths: Sequence[str]) -> None:
        for path in paths:
            self.ensure_path(path)

    def sync(self, path: str = "/") -> None:
        """Make this session's next reads at least as new as the leader's state when sync returns."""
        with translate(path, self._report, "sync"):
            self._wait(self._send(path).sync_async(path), path)

    # --- pipelined bursts (:mod:`zkcoord.zk.many`) ----------------------------------------------------------------

    def get_many(
        self,
        paths: Sequence[str],
        watch: Callable[[WatchEvent], None] | None = None,
        watched: Collection[str] | None = None,
    ) -> list[tuple[bytes, Stat] | None]:
        """Read many znodes in one pipelined burst (one round trip of latency, not one per node).

        Absent nodes give ``None`` (and no watch).  With ``watch``, each node read (or only those in ``watched``)
        gets a one-shot data watch, as :meth:`children_many` sets children watches (``CHANGED``, ``DELETED`` or
        ``RESET``).  :raises ZkError: for any other failure.
        """
        return many.get_many(
            self._send(paths[0] if paths else None), self._wait, paths, watch, watched, refused=self._report
        )

    def read_many(self, reads: Sequence[tuple[ReadKind, str]], timeout: float | None = None) -> list[Any]:
        """Run ``reads`` (``("get", path)`` or ``("children", path)``) in one pipelined burst; return their results in
        order: ``(data, stat)`` for ``get``, the child list for ``children``, ``None`` for an absent znode.  Each
        reply waited for at most ``timeout`` s (and never past the :meth:`bound` deadline).

        :raises ZkError: (typed) for any other failure, :class:`ZkUnavailableError` for a reply not in time.
        """
        return many.read_many(
            self._send(reads[0][1] if reads else None), self._wait, reads, timeout, refused=self._report
        )

    def children_many(
        self, paths: Sequence[str], watch: Callable[[WatchEvent], None] | None = None
    ) -> list[list[str] | None]:
        """List the children of many znodes in one pipelined burst; absent nodes give ``None``.

        With ``watch``, each listing that succeeds also sets a one-shot children watch on its path: ``watch`` is
        called once with a :class:`WatchEvent` when the children change (``CHILD``), the node is deleted
        (``DELETED``), or the connection is lost (``RESET``: the watch is gone, nothing is known to have changed).
        Listing a path again re-arms it; a path watched several times before it fires still fires once.  No watch
        is set on an absent node.  ``watch`` runs on kazoo's watch thread: enqueue, do not block, do not call
        ZooKeeper.
        """
        return [None if got is None else got[0] for got in self.children_stat_many(paths, watch)]

    def children_stat_many(
        self, paths: Sequence[str], watch: Callable[[WatchEvent], None] | None = None
    ) -> list[tuple[list[str], Stat] | None]:
        """As :meth:`children_many`, with each listed node's own stat (``cversion`` counts its children's creations
        and deletions: two listings whose difference accounts for every change between their ``cversion`` s saw
        no child deleted and created again in between)."""
        return many.children_stat_many(
            self._send(paths[0] if paths else None), self._wait, paths, watch, refused=self._report
        )

    def commit_many(self, transactions: Sequence[Transaction]) -> list[list[Any] | errors.ZkError]:
        """Commit several transactions pipelined; ZooKeeper applies one session's requests in order.

        Returns, per transaction, its results or the typed error it failed with (never raises for one of them).
        """
        return many.commit_many(transactions)

    # --- transactions and retries ---------------------------------------------------------------------------------

    def transaction(self) -> Transaction:
        return Transaction(self._send(None), self._wait, None if self._acl is None else self._acl_of, self._report)

    def retry(self, func: Callable[..., Any], *args: Any, deadline_s: float = 30.0, **kwargs: Any) -> Any:
        """Call ``func`` again while it raises :class:`ZkUnavailableError`, up to ``deadline_s``.

        Only for operations that are safe to repeat (reads, idempotent writes): a write retried after a connection
        loss may have landed the first time.
        """
        retry = KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0, deadline=deadline_s, ignore_expire=False)

        def attempt() -> Any:
            try:
                return func(*args, **kwargs)
            except errors.ZkUnavailableError as e:
                raise kz.ConnectionLoss(str(e)) from e

        with translate():
            return retry(attempt)

    # --- watches ------------------------------------------------------------------------------------------------

    def watch_children(self, path: str, func: Callable[[list[str]], None]) -> ChildrenWatch:
        """Call ``func(children)`` now and after every change of ``path``'s children; survives reconnects.

        ``path`` must exist (kazoo stops the watch for good if it does not).  ``func`` runs on kazoo's watch
        thread: enqueue, do not block, do not call ZooKeeper.
        """

        def _call(children: list[str]) -> None:
            try:
                func(children)
            except Exception:  # keep the watch alive: a raising callback would end it silently
                log.exception("%s: children watch on %s failed", self.name, path)

        with translate(path, self._report, "get"):
            return ChildrenWatch(self.kazoo, path, _call)

    @staticmethod
    def watching(watch: ChildrenWatch) -> bool:
        """Whether a children watch of :meth:`watch_children` still reports (it ends for good when its znode is gone
        at a re-read; it goes on by itself when the znode was created again before that read)."""
        return not watch._stopped  # kazoo keeps no public flag

    def watch_data(self, path: str, func: Callable[[bytes | None, Stat | None], None]) -> DataWatch:
        """Call ``func(data, stat)`` now and after every change of ``path`` (``None, None`` when absent).

        Works for nodes that do not exist yet; survives reconnects and session loss.  Same thread rules as
        :meth:`watch_children`.
        """

        def _call(data: bytes | None, stat: Stat | None) -> None:
            try:
                func(data, stat)
            except Exception:
                log.exception("%s: data watch on %s failed", self.name, path)

        with translate(path, self._report, "get"):
            return DataWatch(self.kazoo, path, _call)
