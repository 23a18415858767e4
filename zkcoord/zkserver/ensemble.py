"""A ZooKeeper quorum of real servers on loopback, for failover tests and the split-brain demonstration.

Each member is a :class:`~zkcoord.zkserver.ZkServer` with its own data dir (``server<myid>/``) and three ports
(client, quorum, election), all picked free at the first :meth:`ZkEnsemble.start` and kept for the ensemble's life,
so a stopped or killed member comes back as the same member with the same data.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from zkcoord.errors import ConfigurationError, ZkServerError
from zkcoord.zkserver import LOOPBACK, POLL_INTERVAL_S, QuorumPeer, ZkServer, ZkServerConfig, close_all, free_ports

MAX_SIZE = 9
_SERVING_MODES = frozenset({"leader", "follower"})


class ZkEnsemble:
    """``size`` ZooKeeper servers forming one quorum on 127.0.0.1.  Nothing is started in ``__init__``.

    Members are addressed by index ``0 .. size-1`` (``myid`` is index + 1).  Methods that take ``index=None`` act on
    every member.  As a context manager it starts on entry (waiting for the quorum) and closes on exit.

    :param size: number of servers, 1 to 9 (odd sizes make sense: 3 tolerates one failure, 5 two).
    :param config: settings shared by every member; its ``port`` must be 0 (each member gets its own) and its
        ``data_dir``, if any, is the parent of the members' dirs (``None``: a temporary dir removed by ``close()``).
    """

    def __init__(self, size: int = 3, config: ZkServerConfig | None = None) -> None:
        if not 1 <= size <= MAX_SIZE:
            raise ConfigurationError(f"a ZooKeeper ensemble has 1 to {MAX_SIZE} servers, not {size}")
        config = config or ZkServerConfig()
        if config.port != 0:
            raise ConfigurationError("a ZooKeeper ensemble picks its members' ports itself: leave config.port at 0")
        self.size = size
        self.config = config
        self._base_dir = config.data_dir
        self._owns_base_dir = False
        self._servers: tuple[ZkServer, ...] = ()

    # -- properties --

    @property
    def servers(self) -> tuple[ZkServer, ...]:
        """The members, in index order.  :raises ZkServerError: before the first :meth:`start`."""
        if not self._servers:
            raise ZkServerError("the ZooKeeper ensemble has not been started yet: its members are made by start()")
        return self._servers

    @property
    def connect_string(self) -> str:
        """Every member's ``127.0.0.1:PORT``, comma-separated, for ``KazooClient(hosts=...)`` and ``--zk``."""
        return ",".join(server.connect_string for server in self.servers)

    @property
    def quorum_size(self) -> int:
        """How many members must serve for the ensemble to accept writes: a strict majority."""
        return self.size // 2 + 1

    def server(self, index: int) -> ZkServer:
        """Member ``index``.  :raises ConfigurationError: no such member."""
        if not 0 <= index < self.size:
            raise ConfigurationError(f"no server {index} in an ensemble of {self.size}")
        return self.servers[index]

    # -- lifecycle --

    def start(self, index: int | None = None, *, timeout: float | None = None) -> None:
        """Start member ``index`` (``None``: every member not running) and block until it serves.

        For the whole ensemble every JVM is launched first, since no member can serve before a majority runs; then it
        waits as :meth:`wait_for_quorum`.  A single member waits until it serves as leader or follower, which needs a
        majority running.

        :raises ZkServerError: as :meth:`ZkServer.start`, or no quorum formed within ``timeout`` (default
            ``config.start_timeout_s``).
        """
        if not self._servers:
            self._create_members()
        timeout = self.config.start_timeout_s if timeout is None else timeout
        if index is not None:
            self.server(index).start(wait=False)
            self.server(index).wait_until_serving(timeout)
            return
        try:
            for server in self.servers:
                if not server.is_running():
                    server.start(wait=False)
            self.wait_for_quorum(timeout)
        except BaseException:
            # Half an ensemble is of no use to anyone, and its JVMs would outlive a failed test.
            self.stop()
            raise

    def stop(self, index: int | None = None) -> None:
        """Stop member ``index`` cleanly (``None``: every member), as :meth:`ZkServer.stop`.  Data is kept."""
        for server in self._targets(index):
            server.stop()

    def kill(self, index: int | None = None) -> None:
        """SIGKILL member ``index`` (``None``: every member), as a crash would."""
        for server in self._targets(index):
            server.kill()

    def restart(self, index: int | None = None, *, timeout: float | None = None) -> None:
        """Stop then start member ``index`` (``None``: the whole ensemble); block until it serves again."""
        self.stop(index)
        self.start(index, timeout=timeout)

    def pause(self, index: int) -> None:
        """SIGSTOP member ``index``: it keeps its sockets but stops answering, peers and clients alike."""
        self.server(index).pause()

    def resume(self, index: int) -> None:
        """SIGCONT member ``index``."""
        self.server(index).resume()

    def close(self) -> None:
        """Stop every member and remove the data if it is temporary.  Idempotent."""
        close_all(self._servers)
        if self._owns_base_dir and self._base_dir is not None:
            shutil.rmtree(self._base_dir, ignore_errors=True)
            self._owns_base_dir = False

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        members = ", ".join(repr(server) for server in self._servers)
        return f"<ZkEnsemble size={self.size} [{members}]>"

    # -- observing --

    def modes(self, timeout: float = 1.0) -> list[str | None]:
        """Each member's ``srvr`` mode (``leader``, ``follower``; ``None`` when down, paused or not serving)."""
        return [server.mode(timeout) if server.is_running() else None for server in self.servers]

    def leader_index(self, timeout: float = 1.0) -> int | None:
        """The index of the member that reports itself leader, or ``None``.  Asks each running member (``srvr``)."""
        leaders = [i for i, mode in enumerate(self.modes(timeout)) if mode == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def wait_for_quorum(self, timeout: float = 30.0) -> int:
        """Block until every running, unpaused member serves as leader or follower under one leader; return the
        leader's index.

        Polls ``srvr`` every :data:`~zkcoord.zkserver.POLL_INTERVAL_S` up to ``timeout`` seconds.

        :raises ZkServerError: fewer than a majority of members run (no quorum can form: fails at once), a member
            died, or the deadline passed.
        """
        deadline = time.monotonic() + timeout
        while True:
            for server in self.servers:
                server.check()
            live = [i for i, server in enumerate(self.servers) if server.is_running() and not server.is_paused]
            if len(live) < self.quorum_size:
                raise ZkServerError(
                    f"no ZooKeeper quorum possible: only {len(live)} of {self.size} servers run, "
                    f"{self.quorum_size} are needed"
                )
            modes = self.modes(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            live_modes = [modes[i] for i in live]
            leaders = [i for i in live if modes[i] == "leader"]
            if self.size == 1 and live_modes == ["standalone"]:
                return 0  # ZooKeeper runs a one-server "quorum" standalone
            if len(leaders) == 1 and all(mode in _SERVING_MODES for mode in live_modes):
                return leaders[0]
            if time.monotonic() >= deadline:
                shown = ", ".join(f"server {i}: {mode or 'not serving'}" for i, mode in enumerate(modes))
                raise ZkServerError(f"ZooKeeper quorum did not form within {timeout} s ({shown})")
            time.sleep(POLL_INTERVAL_S)

    # -- internals --

    def _targets(self, index: int | None) -> tuple[ZkServer, ...]:
        return self._servers if index is None else (self.server(index),)

    def _create_members(self) -> None:
        if self._base_dir is None:
            self._base_dir = Path(tempfile.mkdtemp(prefix="zkcoord-zk-ensemble-"))
            self._owns_base_dir = True
        ports = free_ports(3 * self.size, LOOPBACK)
        peers = tuple(
            QuorumPeer(
                myid=i + 1, client_port=ports[3 * i], quorum_port=ports[3 * i + 1], election_port=ports[3 * i + 2]
            )
            for i in range(self.size)
        )
        self._servers = tuple(
            ZkServer(
                dataclasses.replace(self.config, port=peer.client_port, data_dir=self._base_dir / f"server{peer.myid}"),
                quorum=peers,
                myid=peer.myid,
            )
            for peer in peers
        )
