"""How to run a ZooKeeper server: its validated settings, its quorum peers, and the ``zoo.cfg`` and JVM options
made of them.

Pure: no processes, no files (:class:`~zkcoord.zkserver.server.ZkServer` writes what :func:`render_config` returns).
May import :mod:`zkcoord.errors` and :mod:`zkcoord.zkserver.util`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from zkcoord.errors import ConfigurationError
from zkcoord.zkserver.util import LOOPBACK


@dataclasses.dataclass(frozen=True)
class ZkServerConfig:
    """How to run one ZooKeeper server.  Validated on construction.

    :param port: client port on 127.0.0.1; ``0`` picks a free one at the first ``start()`` and keeps it.
    :param data_dir: where snapshots, transaction logs, ``zoo.cfg`` and the server log go; ``None`` makes a temporary
        directory that ``close()`` removes.  An explicit directory is created if needed and never removed.
    :param tick_time_ms: ZooKeeper's tick; session timeouts are bounded by multiples of it.  200 ms (not the usual
        2000) so session expiry happens in tests within a second.
    :param min_session_timeout_ms: ``None`` means 2 ticks, as in ZooKeeper (derived, so ``dataclasses.replace()`` of
        the tick moves it along); :attr:`min_timeout_ms` is the value in force.
    :param max_session_timeout_ms: upper bound the server grants to any client's requested session timeout.
    :param init_limit: ticks a follower may take to connect and sync to a leader (quorum only).
    :param sync_limit: ticks a follower may lag behind the leader (quorum only).
    :param fsync: ``False`` sets ``forceSync=no``: faster writes, but a machine crash (not a process kill) may lose
        the latest ones.  Fine for tests.
    :param max_client_connections: per client IP; ``0`` means unlimited (ZooKeeper's default of 60 is easily hit by a
        test suite, whose clients all come from 127.0.0.1).
    :param heap_mb: the JVM's maximum heap.
    :param start_timeout_s: how long ``start()`` waits for the server to serve.
    :param stop_timeout_s: how long ``stop()`` waits after SIGTERM before it sends SIGKILL.
    :param detached: start the JVM in its own session, so a Ctrl-C in the starting terminal does not reach it.
    :param extra_config: further ``zoo.cfg`` lines as ``(key, value)`` pairs, written last (so they win).
    """

    port: int = 0
    data_dir: Path | None = None
    tick_time_ms: int = 200
    min_session_timeout_ms: int | None = None
    max_session_timeout_ms: int = 60_000
    init_limit: int = 10
    sync_limit: int = 5
    fsync: bool = True
    max_client_connections: int = 0
    heap_mb: int = 256
    start_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0
    detached: bool = False
    extra_config: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigurationError(f"ZooKeeper port must be in 0..65535 (0 picks a free one), not {self.port}")
        for name in ("tick_time_ms", "init_limit", "sync_limit", "heap_mb"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"ZooKeeper {name} must be at least 1, not {getattr(self, name)}")
        if not 0 < self.min_timeout_ms <= self.max_session_timeout_ms:
            raise ConfigurationError(
                f"ZooKeeper session timeouts need 0 < min ({self.min_timeout_ms} ms) <= "
                f"max ({self.max_session_timeout_ms} ms)"
            )
        if self.max_client_connections < 0:
            raise ConfigurationError(f"max_client_connections must be >= 0, not {self.max_client_connections}")
        if not (self.start_timeout_s > 0 and self.stop_timeout_s > 0):
            raise ConfigurationError("ZooKeeper start and stop timeouts must be positive")
        for key, value in self.extra_config:
            if not re.fullmatch(r"[A-Za-z][\w.\-]*", key) or "\n" in value or "\r" in value:
                raise ConfigurationError(f"invalid zoo.cfg entry {key!r}={value!r}")

    @property
    def min_timeout_ms(self) -> int:
        """``min_session_timeout_ms`` with its default applied."""
        return 2 * self.tick_time_ms if self.min_session_timeout_ms is None else self.min_session_timeout_ms


@dataclasses.dataclass(frozen=True)
class QuorumPeer:
    """One member of a quorum, as every member's ``zoo.cfg`` lists it (``server.<myid>=127.0.0.1:quorum:election``)."""

    myid: int
    client_port: int
    quorum_port: int
    election_port: int

    @property
    def server_line(self) -> str:
        return f"server.{self.myid}={LOOPBACK}:{self.quorum_port}:{self.election_port}"


def render_config(c: ZkServerConfig, quorum: Sequence[QuorumPeer], data_dir: Path, port: int) -> str:
    """The ``zoo.cfg`` of a server run with ``c`` on client ``port``, in ``quorum`` (empty: standalone)."""
    lines = [
        "# Written by zkcoord at every start; edits are overwritten.",
        f"tickTime={c.tick_time_ms}",
        f"initLimit={c.init_limit}",
        f"syncLimit={c.sync_limit}",
        f"dataDir={data_dir}",
        f"clientPort={port}",
        f"clientPortAddress={LOOPBACK}",
        f"minSessionTimeout={c.min_timeout_ms}",
        f"maxSessionTimeout={c.max_session_timeout_ms}",
        f"maxClientCnxns={c.max_client_connections}",
        f"forceSync={'yes' if c.fsync else 'no'}",
        "4lw.commands.whitelist=*",
        "admin.enableServer=false",
    ]
    if quorum:
        # A peer connecting to a dead peer's election port gives up after cnxTimeout (5 s by default), which
        # would slow every re-election in fault-injection runs.
        lines.append("cnxTimeout=1000")
        lines += [peer.server_line for peer in quorum]
    lines += [f"{key}={value}" for key, value in c.extra_config]
    return "\n".join(lines) + "\n"


def jvm_options(config: ZkServerConfig) -> list[str]:
    """The JVM options of a server run with ``config``."""
    return [
        f"-Xmx{config.heap_mb}m",
        "-XX:+UseSerialGC",  # small heaps, fewer threads: several servers share a laptop's cores
        "-XX:-UsePerfData",  # no /tmp/hsperfdata_* files left behind by killed servers
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSSZ",
    ]
