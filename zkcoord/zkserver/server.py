"""A local Apache ZooKeeper server for development, tests and the demo: find it, start it, wait for it, stop it.

The server is the real Java one (``QuorumPeerMain``), never an imitation, so what runs against it runs against
ZooKeeper.  :class:`ZkServer` drives one standalone server; :class:`zkcoord.zkserver.ensemble.ZkEnsemble` drives a
quorum of them on loopback.  Both listen on ``127.0.0.1`` only.

Where things come from:

- Java: ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set (as ZooKeeper's own ``zkEnv.sh`` does), else ``java`` on
  ``PATH``.
- ZooKeeper: ``$ZOOKEEPER_HOME`` (a release tarball: ``lib/*.jar`` plus ``conf/`` for its logging set-up), else
  Debian's ``/usr/share/java/zookeeper.jar``, whose manifest ``Class-Path`` pulls in its dependencies.

Every failure is a :class:`~zkcoord.errors.ZkServerError` whose message is one line that says what to do.  Nothing
here is thread-safe: one thread drives a server at a time.  Linux only (``/proc``, ``pidfd_open``).

The settings (:class:`~zkcoord.zkserver.config.ZkServerConfig`, :class:`~zkcoord.zkserver.config.QuorumPeer`) and
the ``zoo.cfg`` made of them live in :mod:`zkcoord.zkserver.config`; the helpers (:func:`four_letter_word`,
:func:`mntr`, :func:`find_java`...) in :mod:`zkcoord.zkserver.util`.  Both are re-exported here.  May import
:mod:`zkcoord.errors` and :mod:`zkcoord.zkserver.{config,util}`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Self

from zkcoord.errors import ConfigurationError, ZkServerError
from zkcoord.zkserver.config import QuorumPeer, ZkServerConfig, jvm_options, render_config
from zkcoord.zkserver.util import (
    CONFIG_FILE,
    JAVA_HINT,
    LOG_FILE,
    LOOPBACK,
    MAIN_CLASS,
    POLL_INTERVAL_S,
    check_port_free,
    failure_reason,
    find_java,
    find_zookeeper_classpath,
    free_port,
    is_stopped,
    server_mode,
)

__all__ = ["ZkServer", "close_all"]


#: Servers handed over by :meth:`ZkServer.detach`, referenced until this process exits (see there why).
_DETACHED: list[subprocess.Popen[bytes]] = []


# --- the server ---------------------------------------------------------------------------------------------------


class ZkServer:
    """One real ZooKeeper server process on 127.0.0.1.

    Nothing happens in ``__init__``: :meth:`start` finds Java and ZooKeeper, prepares the data dir, launches the JVM
    and waits until it serves.  As a context manager it starts on entry and closes on exit.  The port and
    data dir stay the same across :meth:`stop`/:meth:`start`, :meth:`kill` and :meth:`restart`, so data survives.

    States: not started → running (⇄ paused) → stopped → running ... → closed.

    :param config: how to run it; defaults to :class:`ZkServerConfig()`.
    :param quorum: the members of the ensemble this server belongs to (empty for a standalone server).
    :param myid: this server's id in ``quorum``.
    :param java: the ``java`` to use instead of :func:`find_java`'s.
    :param classpath: the class path to use instead of :func:`find_zookeeper_classpath`'s.
    """

    def __init__(
        self,
        config: ZkServerConfig | None = None,
        *,
        quorum: Sequence[QuorumPeer] = (),
        myid: int | None = None,
        java: Path | None = None,
        classpath: Sequence[Path] | None = None,
    ) -> None:
        self.config = config or ZkServerConfig()
        self.quorum = tuple(quorum)
        self.myid = myid
        self._me = next((peer for peer in self.quorum if peer.myid == myid), None)
        if self.quorum and (self._me is None or self._me.client_port != self.config.port):
            raise ConfigurationError(f"myid {myid} with client port {self.config.port} is not in the quorum")
        self._java = java
        self._classpath = tuple(classpath) if classpath is not None else None
        self._port = self.config.port or None
        # Absolute: the JVM runs in the data dir, so a relative path to its zoo.cfg would not resolve there.
        self._data_dir = self.config.data_dir.resolve() if self.config.data_dir is not None else None
        self._owns_data_dir = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self._paused = False
        self._closed = False

    # -- properties --

    @property
    def port(self) -> int:
        """The client port.  :raises ZkServerError: it is still to be picked by the first ``start()``."""
        if self._port is None:
            raise ZkServerError("the ZooKeeper server has not been started yet: its port is picked by start()")
        return self._port

    @property
    def connect_string(self) -> str:
        """``127.0.0.1:PORT``, for ``KazooClient(hosts=...)`` and ``--zk``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def data_dir(self) -> Path:
        """The data dir.  :raises ZkServerError: a temporary one is still to be made by the first ``start()``."""
        if self._data_dir is None:
            raise ZkServerError("the ZooKeeper server has not been started yet: its data dir is made by start()")
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The server's stdout and stderr, appended to across restarts."""
        return self.data_dir / LOG_FILE

    @property
    def config_path(self) -> Path:
        return self.data_dir / CONFIG_FILE

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs (paused included), else ``None``."""
        return self._proc.pid if self.is_running() and self._proc is not None else None

    @property
    def is_paused(self) -> bool:
        return self._paused and self.is_running()

    def is_running(self) -> bool:
        """Whether the JVM process is alive (a paused one is)."""
        return self._proc is not None and self._proc.poll() is None

    def mode(self, timeout: float = 1.0) -> str | None:
        """:func:`server_mode` of this server."""
        return server_mode(LOOPBACK, self.port, timeout) if self._port is not None else None

    # -- lifecycle --

    def start(self, *, wait: bool = True) -> None:
        """Launch the JVM and, with ``wait``, block until the server serves (``srvr`` reports a ``Mode``).

        Blocks at most ``config.start_timeout_s``.  Without ``wait`` it returns once the JVM is launched; call
        :meth:`wait_until_serving` (an ensemble launches all members before any of them can serve).

        :raises ZkServerError: already running; Java or ZooKeeper not found; the port is taken; the data dir cannot
            be created or written; the JVM died (the message quotes its log) or did not serve in time.  Nothing is
            left running when it raises.
        """
        if self._closed:
            raise ZkServerError("this ZooKeeper server has been closed; create a new ZkServer")
        if self.is_running():
            raise ZkServerError(f"ZooKeeper is already running on {self.connect_string} (pid {self.pid})")
        java = self._java or find_java()
        classpath = self._classpath if self._classpath is not None else find_zookeeper_classpath()
        data_dir = self._prepare_data_dir()
        if self._port is None:
            self._port = free_port()
        check_port_free(self._port, "client port")
        if self._me is not None:
            check_port_free(self._me.quorum_port, "quorum port")
            check_port_free(self._me.election_port, "election port")
        argv = [str(java), *jvm_options(self.config), "-cp", os.pathsep.join(map(str, classpath)), MAIN_CLASS]
        argv.append(str(self.config_path))
        try:
            self.config_path.write_text(render_config(self.config, self.quorum, data_dir, self._port))
            if self._me is not None:
                (data_dir / "myid").write_text(f"{self._me.myid}\n")
            log = open(self.log_path, "ab")  # noqa: SIM115 - closed below, once the child holds its own copy
        except OSError as err:
            raise ZkServerError(f"cannot write to ZooKeeper data dir {data_dir}: {err.strerror or err}") from err
        with log:
            log.write(f"--- zkcoord: starting ZooKeeper at {datetime.now(UTC).isoformat()} ---\n".encode())
            log.flush()
            self._log_offset = log.tell()
            try:
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=data_dir,
                    start_new_session=self.config.detached,
                )
            except OSError as err:
                raise ZkServerError(f"cannot run {java}: {err.strerror or err}; {JAVA_HINT}") from err
        self._paused = False
        if wait:
            try:
                self.wait_until_serving()
            except BaseException:
                # Including Ctrl-C: a detached JVM did not get the SIGINT and would run on, unrecorded.
                self.kill()
                raise

    def wait_until_serving(self, timeout: float | None = None) -> str:
        """Block until the server serves (a quorum member: as leader or follower); return its mode.

        Polls ``srvr`` every :data:`POLL_INTERVAL_S` until ``timeout`` (default ``config.start_timeout_s``).

        :raises ZkServerError: the JVM died (it is reaped), or the deadline passed (the JVM is killed).
        """
        deadline = time.monotonic() + (self.config.start_timeout_s if timeout is None else timeout)
        wanted = {"leader", "follower", "observer"} if len(self.quorum) > 1 else {"standalone"}
        while True:
            self.check()
            mode = self.mode(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
            if mode in wanted:
                return mode
            if time.monotonic() >= deadline:
                reason = failure_reason(self._log_since_start())
                self.kill()
                raise ZkServerError(
                    f"ZooKeeper did not serve on {self.connect_string} within {timeout or self.config.start_timeout_s}"
                    f" s (last log line: {reason}); see {self.log_path}"
                )
            self._wait_exit(POLL_INTERVAL_S)

    def check(self) -> None:
        """Raise if the JVM has died on its own since it was started, quoting the reason from its log; the dead process
        is reaped and this server counts as stopped.

        :raises ZkServerError: it died; the message names the port in use when that is why.
        """
        if self._proc is None or self._proc.poll() is None:
            return
        code = self._proc.returncode
        self._proc = None
        text = self._log_since_start()
        if "Address already in use" in text:
            raise ZkServerError(
                f"cannot start ZooKeeper: a port it needs on {LOOPBACK} ({self._ports_text()}) is already in use; "
                "stop what listens there or choose other ports"
            )
        raise ZkServerError(f"ZooKeeper exited with code {code}: {failure_reason(text)} (log: {self.log_path})")

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the server and wait up to ``timeout`` (default ``config.stop_timeout_s``), then SIGKILL it.

        Blocks until the process is gone.  Does nothing if it is not running.  Data and port are kept.
        """
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            # A paused JVM would keep SIGTERM pending forever: let it run so it can shut down.
            self._proc.send_signal(signal.SIGCONT)
            if not self._wait_exit(self.config.stop_timeout_s if timeout is None else timeout):
                self._proc.kill()
                self._wait_exit(self.config.stop_timeout_s)
        self._proc = None
        self._paused = False

    def kill(self) -> None:
        """SIGKILL the server (a crash: no clean shutdown) and reap it.  Does nothing if it is not running."""
        if self._proc is None:
            return
        self._proc.kill()
        self._wait_exit(self.config.stop_timeout_s)
        self._proc = None
        self._paused = False

    def restart(self) -> None:
        """:meth:`stop` then :meth:`start`, on the same port with the same data.  Blocks as both do."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """SIGSTOP the JVM: it keeps its sockets but answers nothing, as a long GC pause or a frozen VM would.

        Blocks until every thread of the JVM is stopped (the signal alone returns earlier), so whatever the caller
        does next really meets a frozen server.

        :raises ZkServerError: it is not running, or did not stop within ``config.stop_timeout_s``.
        """
        self._signal(signal.SIGSTOP)
        self._paused = True
        if not self._poll_until(is_stopped, self.config.stop_timeout_s):
            raise ZkServerError(f"ZooKeeper (pid {self.pid}) did not stop on SIGSTOP")

    def resume(self) -> None:
        """SIGCONT a paused JVM and block until it runs again.  :raises ZkServerError: it is not running."""
        self._signal(signal.SIGCONT)
        self._paused = False
        self._poll_until(lambda pid: not is_stopped(pid), self.config.stop_timeout_s)

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until the server exits (``None``: forever); return its exit code, or ``None`` if it still runs."""
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._proc = None
        return code

    def detach(self) -> int:
        """Stop managing the running server and return its pid; it keeps running after this process exits.

        Used by ``zkcoord zk start``, which records the pid and leaves.  Afterwards this object is as if stopped.

        :raises ZkServerError: it is not running.
        """
        if self._proc is None or self._proc.poll() is not None:
            raise ZkServerError("ZooKeeper is not running; nothing to detach")
        proc, self._proc = self._proc, None
        # Keep the Popen referenced for the life of this process: if it were garbage-collected while the JVM runs it
        # would warn (ResourceWarning) that the child was never waited for, which is exactly what detaching means.
        _DETACHED.append(proc)
        return proc.pid

    def close(self) -> None:
        """:meth:`stop` the server and remove its data dir if it is a temporary one.  Idempotent."""
        self.stop()
        if self._owns_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._owns_data_dir = False
        self._closed = True

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
        state = "paused" if self.is_paused else "running" if self.is_running() else "stopped"
        return f"<ZkServer {LOOPBACK}:{self._port or '?'} {state} data_dir={self._data_dir}>"

    # -- internals --

    def _prepare_data_dir(self) -> Path:
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="zkcoord-zk-"))
            self._owns_data_dir = True
        data_dir = self._data_dir
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ZkServerError(f"cannot create ZooKeeper data dir {data_dir}: {err.strerror or err}") from err
        # Permission bits do not stop root (tests run as root), and a read-only mount or a full disk only shows on
        # writing: so write something rather than inspect modes.
        probe = data_dir / ".zkcoord-write-probe"
        try:
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as err:
            raise ZkServerError(f"ZooKeeper data dir {data_dir} is not writable: {err.strerror or err}") from err
        return data_dir

    def _wait_exit(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for our JVM to exit (it doubles as the poll interval); return whether it did."""
        if self._proc is None:
            return True
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _ports_text(self) -> str:
        if self._me is None:
            return f"client port {self._port}"
        return f"client port {self._port}, quorum port {self._me.quorum_port}, election port {self._me.election_port}"

    def _poll_until(self, condition: Callable[[int], bool], timeout: float) -> bool:
        """Poll ``condition(pid)`` every few ms until it holds (True) or ``timeout`` passes or the JVM is gone."""
        deadline = time.monotonic() + timeout
        while (pid := self.pid) is not None:
            if condition(pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)  # a signal takes effect within microseconds to milliseconds
        return False

    def _signal(self, sig: signal.Signals) -> None:
        if not self.is_running() or self._proc is None:
            raise ZkServerError("ZooKeeper is not running")
        self._proc.send_signal(sig)

    def _log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_offset)
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""


def close_all(servers: Iterable[ZkServer]) -> None:
    """Close every server even if some fail; re-raise the first failure at the end."""
    first: BaseException | None = None
    for server in servers:
        try:
            server.close()
        except Exception as err:  # noqa: BLE001 - the remaining servers must still be closed
            first = first or err
    if first is not None:
        raise first
