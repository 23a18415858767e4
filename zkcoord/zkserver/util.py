"""Helpers around a ZooKeeper server process: finding Java and ZooKeeper, ports, four-letter words, pids.

Split from :mod:`zkcoord.zkserver` (which re-exports the public names) to keep modules small; nothing here starts a
server.  Linux only (``/proc``, ``pidfd_open``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import select
import shutil
import signal
import socket
from collections.abc import Mapping
from pathlib import Path

from zkcoord.errors import ConfigurationError, ZkServerError

LOOPBACK = "127.0.0.1"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
DEBIAN_ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
DEBIAN_SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
CONFIG_FILE = "zoo.cfg"
LOG_FILE = "zookeeper.log"

JAVA_HINT = "install a JDK (apt-get install default-jdk-headless) or set JAVA_HOME"
ZOOKEEPER_HINT = "install it (apt-get install zookeeper) or set ZOOKEEPER_HOME"

#: How often start-up and shutdown re-check their condition.  Short, because a JVM is ready in a few hundred ms.
POLL_INTERVAL_S = 0.05

_ZOOKEEPER_JAR = re.compile(r"zookeeper(-\d[\w.\-]*)?\.jar")
_EXCEPTION_LINE = re.compile(r"^(?:[\w$]+\.)+[\w$]*(?:Exception|Error)\b")


# --- locating Java and ZooKeeper --------------------------------------------------------------------------------


def find_java(env: Mapping[str, str] | None = None) -> Path:
    """The ``java`` executable to run ZooKeeper with.

    :param env: the environment to read ``JAVA_HOME`` and ``PATH`` from; :data:`os.environ` when ``None``.
    :raises ZkServerError: no usable Java; the message says how to install one.
    """
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME")
    if java_home:
        # Like zkEnv.sh, an explicit JAVA_HOME wins and is not second-guessed: a stale one should be fixed, not hidden.
        java = Path(java_home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return java
        raise ZkServerError(f"Java not found: JAVA_HOME={java_home} has no bin/java; {JAVA_HINT} correctly")
    found = shutil.which("java", path=env.get("PATH", os.defpath))
    if found is None:
        raise ZkServerError(f"Java not found: {JAVA_HINT}")
    return Path(found)


def find_zookeeper_classpath(env: Mapping[str, str] | None = None) -> tuple[Path, ...]:
    """The class path that runs ZooKeeper's ``QuorumPeerMain``.

    :param env: the environment to read ``ZOOKEEPER_HOME`` from; :data:`os.environ` when ``None``.
    :raises ZkServerError: no ZooKeeper installation; the message says how to install one.
    """
    env = os.environ if env is None else env
    home = env.get("ZOOKEEPER_HOME")
    if home:
        root = Path(home)
        lib_jars = sorted((root / "lib").glob("*.jar")) if (root / "lib").is_dir() else []
        top_jars = sorted(p for p in root.glob("*.jar") if _ZOOKEEPER_JAR.fullmatch(p.name)) if root.is_dir() else []
        if not any(_ZOOKEEPER_JAR.fullmatch(p.name) for p in (*top_jars, *lib_jars)):
            raise ZkServerError(
                f"Apache ZooKeeper not found: ZOOKEEPER_HOME={home} has no zookeeper jar in it or in lib/; "
                f"{ZOOKEEPER_HINT} correctly"
            )
        # conf/ first, as zkEnv.sh does: it holds the logging configuration the release's jars expect.
        conf = [root / "conf"] if (root / "conf").is_dir() else []
        return (*conf, *top_jars, *lib_jars)
    if DEBIAN_ZOOKEEPER_JAR.is_file():
        # slf4j-simple gives the server a logger; without one slf4j prints a warning and the log stays empty.
        logger = [DEBIAN_SLF4J_SIMPLE_JAR] if DEBIAN_SLF4J_SIMPLE_JAR.is_file() else []
        return (DEBIAN_ZOOKEEPER_JAR, *logger)
    raise ZkServerError(f"Apache ZooKeeper not found: {ZOOKEEPER_HINT}")


# --- ports --------------------------------------------------------------------------------------------------------


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct TCP ports on ``host`` that nobody listens on right now.

    The sockets are held open together so the kernel hands out distinct ports; they are closed before returning, so
    another process can still take one before ZooKeeper binds it (``start()`` reports that clearly).
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port(host: str = LOOPBACK) -> int:
    """One TCP port on ``host`` that nobody listens on right now (see :func:`free_ports`)."""
    return free_ports(1, host)[0]


def check_port_free(port: int, what: str = "port", host: str = LOOPBACK) -> None:
    """Raise :class:`ZkServerError` unless ``port`` on ``host`` can be bound now.

    SO_REUSEADDR is set, as the JVM sets it, so connections of a just-stopped server lingering in TIME_WAIT do not
    count as "in use": only a listener does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                raise ZkServerError(
                    f"cannot start ZooKeeper: {what} {port} on {host} is already in use "
                    "(another ZooKeeper?); stop what listens there or choose another port"
                ) from err
            raise ZkServerError(f"cannot start ZooKeeper: cannot bind {what} {port} on {host}: {err.strerror}") from err


# --- four-letter words --------------------------------------------------------------------------------------------


def four_letter_word(host: str, port: int, cmd: str, timeout: float = 2.0) -> str:
    """Send a four-letter-word command (``ruok``, ``srvr``, ``mntr``...) and return the whole reply.

    Blocks for at most about ``timeout`` seconds (connect, then each read).  A paused server accepts the connection
    (the kernel does) but never answers, so this is also how a frozen server is told from a live one.

    :raises ConfigurationError: ``cmd`` is not four lowercase letters.
    :raises ZkServerError: the server cannot be reached or does not answer in time.
    """
    if not re.fullmatch(r"[a-z]{4}", cmd):
        raise ConfigurationError(f"not a four-letter word: {cmd!r}")
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(cmd.encode("ascii"))
            # Half-close: the server answers and closes, so reading to EOF gets the whole reply.
            sock.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as err:
        reason = "no answer in time" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise ZkServerError(f"ZooKeeper at {host}:{port} did not answer {cmd!r}: {reason}") from err
    return b"".join(chunks).decode("utf-8", errors="replace")


def srvr(host: str, port: int, timeout: float = 2.0) -> dict[str, str]:
    """The server's ``srvr`` reply as ``{"Mode": "standalone", "Node count": "5", ...}``.

    A server that is up but not serving (no quorum yet) answers without a ``Mode`` key.

    :raises ZkServerError: as :func:`four_letter_word`.
    """
    reply = four_letter_word(host, port, "srvr", timeout)
    fields = {}
    for line in reply.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def mntr(host: str, port: int, timeout: float = 2.0) -> dict[str, str]:
    """The server's ``mntr`` reply (``zk_znode_count``, ``zk_packets_received``...) as a dict of strings.

    Values stay strings because some are not numbers (``zk_version``, ``zk_server_state``); convert what you read.

    :raises ZkServerError: as :func:`four_letter_word`.
    """
    reply = four_letter_word(host, port, "mntr", timeout)
    metrics = {}
    for line in reply.splitlines():
        key, sep, value = line.partition("\t")
        if sep and key:
            metrics[key.strip()] = value.strip()
    return metrics


def server_mode(host: str, port: int, timeout: float = 1.0) -> str | None:
    """``standalone``, ``leader``, ``follower`` or ``observer``; ``None`` when the server is unreachable or not
    serving.  Never raises for an unreachable server: it is the probe start-up polls with."""
    try:
        return srvr(host, port, timeout).get("Mode")
    except ZkServerError:
        return None


# --- processes ----------------------------------------------------------------------------------------------------


def is_zookeeper_process(pid: int, config_path: Path | None = None) -> bool:
    """Whether ``pid`` is a live ZooKeeper server (and, when ``config_path`` is given, one started with that config).

    Reads ``/proc/<pid>/cmdline``, so a recycled pid or a zombie (whose cmdline is empty) is never mistaken for the
    server that was recorded.
    """
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if MAIN_CLASS.encode() not in argv:
        return False
    return config_path is None or os.fsencode(config_path) in argv


def is_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped by a signal (``/proc`` state ``T``).

    ``kill(SIGSTOP)`` returns before the stop has reached every thread of a busy multi-threaded JVM: only this tells
    that a pause has fully taken effect.  ``False`` for a process that is gone.
    """
    try:
        states = [
            (task / "stat").read_text().rpartition(")")[2].split()[0] for task in Path(f"/proc/{pid}/task").iterdir()
        ]
    except (OSError, IndexError):
        return False  # gone, or a thread exited while we looked: the caller polls again
    return bool(states) and all(state in ("T", "t") for state in states)


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Block until process ``pid`` has exited (or is a zombie) or ``timeout`` seconds pass; return whether it exited.

    Works for processes that are not our children (a server started by an earlier ``zkcoord zk start``): it waits on
    a pidfd, which becomes readable when the process exits, instead of sleeping in a loop.
    """
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        with select.epoll() as poller:
            poller.register(pidfd, select.EPOLLIN)
            return bool(poller.poll(max(timeout, 0.0)))
    finally:
        os.close(pidfd)


def terminate_process(pid: int, timeout: float) -> None:
    """SIGTERM ``pid``, wait up to ``timeout`` seconds, then SIGKILL it and wait again.  Blocks until it is gone.

    :raises ZkServerError: the process survived SIGKILL (stuck in the kernel).
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            # A paused (SIGSTOPped) JVM would hold SIGTERM pending forever: let it run so it can act on it.
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return
        if wait_for_exit(pid, timeout):
            return
    raise ZkServerError(f"ZooKeeper process {pid} did not exit after SIGKILL")


def failure_reason(log_text: str) -> str:
    """The most telling line of a dead server's log: its root cause rather than its last words."""
    lines = [line.strip() for line in log_text.splitlines() if line.strip() and not line[:1].isspace()]
    lines = [line for line in lines if not line.startswith("---")]
    for pick in (
        lambda s: s.startswith("Caused by:"),
        lambda s: bool(_EXCEPTION_LINE.match(s)),
        lambda s: s.startswith("Error:"),  # the java launcher's own complaints
        lambda s: " ERROR " in s and "Exiting JVM" not in s,
    ):
        found = [line for line in lines if pick(line)]
        if found:
            return found[-1].removeprefix("Caused by:").strip()[:300]
    return lines[-1][:300] if lines else "(its log is empty)"


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a server log; empty if it cannot be read.  For failure reports."""
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 200 * lines))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
