"""A ZooKeeper ensemble whose servers each run on their own :class:`~zkcoord.testbed.multihost.net.Host`.

Every server listens on its host's address on the usual ports (2181, 2888, 3888), as on separate machines, with the
same fast settings as :class:`~zkcoord.zkserver.ZkServer` in tests (200 ms ticks, 1 s connection timeout).  Used
from one thread; every wait has a deadline and raises :class:`~zkcoord.errors.ZkServerError`.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from zkcoord.errors import ZkServerError
from zkcoord.testbed.multihost.net import Host
from zkcoord.testbed.procs import ProcessError, wait_until
from zkcoord.zkserver import ZkServerConfig
from zkcoord.zkserver.config import jvm_options
from zkcoord.zkserver.util import find_java, find_zookeeper_classpath, server_mode

CLIENT_PORT = 2181
_MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
_SERVING = frozenset({"leader", "follower"})


class HostEnsemble:
    """Servers ``1..len(hosts)`` on ``hosts``, data under ``data_dir/server<myid>``.  Nothing starts in ``__init__``."""

    def __init__(self, hosts: Sequence[Host], data_dir: Path, config: ZkServerConfig | None = None) -> None:
        self.hosts = tuple(hosts)
        self.data_dir = data_dir
        self.config = config or ZkServerConfig()
        self._procs: list[subprocess.Popen[bytes] | None] = [None] * len(self.hosts)
        self._logs: list[IO[bytes] | None] = [None] * len(self.hosts)

    @property
    def connect_string(self) -> str:
        return ",".join(f"{h.ip}:{CLIENT_PORT}" for h in self.hosts)

    def start(self, index: int | None = None, timeout: float = 60.0) -> None:
        """Start server ``index`` (``None``: every one not running) and wait until the quorum serves."""
        for i in range(len(self.hosts)) if index is None else (index,):
            if not self.running(i):
                self._launch(i)
        self.wait_for_quorum(timeout)

    def _launch(self, i: int) -> None:
        c = self.config
        directory = self.data_dir / f"server{i + 1}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "myid").write_text(f"{i + 1}\n")
        lines = [
            f"tickTime={c.tick_time_ms}", f"initLimit={c.init_limit}", f"syncLimit={c.sync_limit}",
            f"dataDir={directory}", f"clientPort={CLIENT_PORT}", f"minSessionTimeout={c.min_timeout_ms}",
            f"maxSessionTimeout={c.max_session_timeout_ms}", "maxClientCnxns=0", "4lw.commands.whitelist=*",
            "admin.enableServer=false", "cnxTimeout=1000",
            *(f"server.{n + 1}={h.ip}:2888:3888" for n, h in enumerate(self.hosts)),
        ]  # fmt: skip
        (directory / "zoo.cfg").write_text("\n".join(lines) + "\n")
        classpath = os.pathsep.join(map(str, find_zookeeper_classpath()))
        argv = [*self.hosts[i].enter, str(find_java()), *jvm_options(c), "-cp", classpath, _MAIN, "zoo.cfg"]
        log = self._logs[i] = self._logs[i] or (directory / "zookeeper.log").open("ab")
        self._procs[i] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=directory)

    def running(self, i: int) -> bool:
        proc = self._procs[i]
        return proc is not None and proc.poll() is None

    def kill(self, i: int) -> None:
        """SIGKILL server ``i``, as a crash would; its data stays for :meth:`start`."""
        proc = self._procs[i]
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def mode(self, i: int) -> str | None:
        """Server ``i``'s mode (``leader``, ``follower``), ``None`` when down or not serving (asked from here)."""
        return server_mode(self.hosts[i].ip, CLIENT_PORT, 1.0) if self.running(i) else None

    def leader(self) -> int | None:
        leaders = [i for i in range(len(self.hosts)) if self.mode(i) == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def serving(self, i: int) -> bool:
        return self.mode(i) in _SERVING

    def wait_for_quorum(self, timeout: float, among: Sequence[int] | None = None) -> int:
        """Block until every running server of ``among`` (default: all) serves under one leader; its index."""
        members = [i for i in (range(len(self.hosts)) if among is None else among) if self.running(i)]
        modes: dict[int, str | None] = {}
        leaders: list[int] = []

        def serving() -> bool:
            modes.update({i: self.mode(i) for i in members})
            leaders[:] = [i for i, m in modes.items() if m == "leader"]
            return len(leaders) == 1 and all(m in _SERVING for m in modes.values())

        try:
            wait_until(serving, timeout, "a quorum", interval=0.1)  # each probe asks every server `srvr`
        except ProcessError:
            raise ZkServerError(f"no ZooKeeper quorum on the hosts within {timeout:g} s: {modes}") from None
        return leaders[0]

    def close(self) -> None:
        """Kill every server and close the logs.  Idempotent."""
        for i in range(len(self.hosts)):
            self.kill(i)
        for log in self._logs:
            if log is not None:
                log.close()
        self._logs = [None] * len(self.hosts)
