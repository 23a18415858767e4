"""Fault injection and throwaway servers for tests that need a real ZooKeeper.

- :func:`expire_session`: a real, server-side session expiry (not a simulated socket error).
- :class:`ZkFactory`: the servers and ensembles a test makes for itself, closed at teardown even when it fails (the
  ``zk_factory`` fixture), with their logs shown in the failure report.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient, KazooState

from zkcoord.errors import ZkServerError
from zkcoord.zkserver import ZkServer, ZkServerConfig, close_all
from zkcoord.zkserver.ensemble import ZkEnsemble

#: Test servers use a short tick (sessions expire in well under a second) and skip fsync (tests never survive a
#: machine crash anyway, and fsync makes every write cost milliseconds).
TEST_CONFIG = ZkServerConfig(tick_time_ms=200, fsync=False)

#: How long one intrusion waits for the victim to see LOST before :func:`expire_session` tries again.
_ATTEMPT_S = 3.0


def _hosts_of(client: KazooClient) -> str:
    """The ``host:port,...`` list a started client connects to, without its chroot (a session is server-wide)."""
    return ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}" for host, port in client.hosts)


def expire_session(client: KazooClient, timeout: float = 20.0, *, wait_reconnect: bool = True) -> None:
    """Make ZooKeeper expire ``client``'s session for real; block until ``client`` has seen ``LOST`` and (with
    ``wait_reconnect``, the default) has connected again with a new session, so it is usable when this returns.

    The ZooKeeper FAQ's method: a second client attaches to the same session (same id and password), which makes the
    server drop the first client's connection, then closes the session.  When the victim reconnects, the server
    answers "session expired": every ephemeral node of the session is gone and every watch with it, exactly as after
    a partition longer than the session timeout.  kazoo reports ``LOST`` and then opens a new session by itself.

    If the victim reconnects fast enough to take its session back before the intruder closes it, the close is lost
    with the intruder's connection: so the intrusion is repeated until ``LOST`` is seen or ``timeout`` passes.

    :param wait_reconnect: ``False`` returns as soon as ``LOST`` is seen (the client may still be reconnecting).
    :raises RuntimeError: ``client`` has no session (not connected).
    :raises TimeoutError: ``client`` did not observe ``LOST`` (or did not reconnect) within ``timeout`` seconds.
    """
    client_id = client.client_id
    if client_id is None:
        raise RuntimeError("expire_session() needs a connected client")
    lost = threading.Event()
    renewed = threading.Event()

    # Runs on kazoo's event thread: must not block; returning True removes it.
    def on_state(state: str) -> bool:
        if state == KazooState.LOST:
            lost.set()
        elif state == KazooState.CONNECTED and lost.is_set():
            renewed.set()
            return True
        return False

    client.add_listener(on_state)
    deadline = time.monotonic() + timeout
    try:
        while not lost.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"session 0x{client_id[0]:x} was not seen expiring within {timeout} s")
            intruder = KazooClient(hosts=_hosts_of(client), client_id=client_id)
            try:
                intruder.start(timeout=max(1.0, remaining))
            finally:
                intruder.stop()
                intruder.close()
            lost.wait(min(_ATTEMPT_S, max(0.0, deadline - time.monotonic())))
        if wait_reconnect and not renewed.wait(max(0.0, deadline - time.monotonic())):
            raise TimeoutError(f"the client did not reconnect within {timeout} s after its session expired")
    finally:
        client.remove_listener(on_state)


@dataclasses.dataclass
class ZkFactory:
    """Makes ZooKeeper servers and ensembles for one test and closes every one of them in :meth:`close`.

    Defaults to :data:`TEST_CONFIG` and temporary data dirs (removed by ``close()``).
    """

    servers: list[ZkServer] = dataclasses.field(default_factory=list)
    ensembles: list[ZkEnsemble] = dataclasses.field(default_factory=list)

    def server(self, config: ZkServerConfig | None = None, *, start: bool = True) -> ZkServer:
        """A new :class:`ZkServer`, started (blocking until it serves) unless ``start`` is false."""
        server = ZkServer(config or TEST_CONFIG)
        self.servers.append(server)
        if start:
            server.start()
        return server

    def ensemble(self, size: int = 3, config: ZkServerConfig | None = None, *, start: bool = True) -> ZkEnsemble:
        """A new :class:`ZkEnsemble`, started (blocking until its quorum forms) unless ``start`` is false."""
        ensemble = ZkEnsemble(size, config or TEST_CONFIG)
        self.ensembles.append(ensemble)
        if start:
            ensemble.start()
        return ensemble

    def log_paths(self) -> list[tuple[str, Path]]:
        """``(label, path)`` of every server log that exists, for failure reports."""
        labelled = [(f"server {n}", server) for n, server in enumerate(self.servers)]
        for n, ensemble in enumerate(self.ensembles):
            with contextlib.suppress(ZkServerError):  # not started: no members, no logs
                labelled += [(f"ensemble {n} member {i}", server) for i, server in enumerate(ensemble.servers)]
        paths = []
        for label, server in labelled:
            with contextlib.suppress(ZkServerError):  # never started: no data dir, no log
                if server.log_path.is_file():
                    paths.append((label, server.log_path))
        return paths

    def close(self) -> None:
        """Stop every server and ensemble made here and remove their temporary data."""
        try:
            close_all(self.servers)
        finally:
            for ensemble in self.ensembles:
                ensemble.close()
