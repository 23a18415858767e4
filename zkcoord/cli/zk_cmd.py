"""``zkcoord zk start|stop|status``: a local ZooKeeper that outlives the command that started it.

``start`` launches the server in its own session and records it in ``$ZKCOORD_HOME/zk/server.json``; ``stop`` and
``status`` read that record.  A record is only believed while its pid is a live ``QuorumPeerMain`` started with the
recorded ``zoo.cfg`` (``/proc/<pid>/cmdline``), so a recycled pid is never signalled and a stale record is cleaned.

Exit codes: 0 success; 1 error (one line, ``Error: ...``); ``status`` exits 3 when no server runs, as LSB init scripts
and ``systemctl status`` do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import click

from zkcoord.errors import ZkCoordError
from zkcoord.runtime.settings import DEFAULT_ZK_PORT, zkcoord_home
from zkcoord.zkserver import (
    ZkServer,
    ZkServerConfig,
    is_zookeeper_process,
    srvr,
    terminate_process,
)

STATE_FILE = "server.json"
LOCK_FILE = "server.lock"
#: ``status`` exit code when no server runs (LSB: "program is not running").
EXIT_NOT_RUNNING = 3
#: How long ``stop`` waits after SIGTERM before SIGKILL.
STOP_TIMEOUT_S = 15.0
#: Exit codes of a JVM that was asked to stop (143 = 128 + SIGTERM; a negative code is a signal seen by Popen).
_CLEAN_EXITS = frozenset({0, 128 + signal.SIGTERM, 128 + signal.SIGINT, -signal.SIGTERM, -signal.SIGINT})


def zk_state_dir() -> Path:
    """``$ZKCOORD_HOME/zk``: the state file, the lock and (by default) the data dir live there."""
    return zkcoord_home() / "zk"


@dataclasses.dataclass(frozen=True)
class ServerRecord:
    """What ``start`` records about the server it started, in ``server.json``."""

    pid: int
    port: int
    data_dir: Path
    log_path: Path
    config_path: Path
    started_at: str
    foreground: bool = False

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def is_alive(self) -> bool:
        """Whether the recorded pid is still the recorded server (not merely some live process)."""
        return is_zookeeper_process(self.pid, self.config_path)

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "port": self.port,
            "connect_string": self.connect_string,
            "data_dir": str(self.data_dir),
            "log_path": str(self.log_path),
            "config_path": str(self.config_path),
            "started_at": self.started_at,
            "foreground": self.foreground,
        }

    @classmethod
    def from_json(cls, raw: object) -> ServerRecord:
        """:raises TypeError, ValueError: ``raw`` is not a record written by ``start``."""
        if not isinstance(raw, dict):
            raise TypeError("not a JSON object")
        try:
            return cls(
                pid=int(raw["pid"]),
                port=int(raw["port"]),
                data_dir=Path(raw["data_dir"]),
                log_path=Path(raw["log_path"]),
                config_path=Path(raw["config_path"]),
                started_at=str(raw["started_at"]),
                foreground=bool(raw.get("foreground", False)),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"bad or missing field: {err}") from err


def read_record(state_dir: Path) -> ServerRecord | None:
    """The recorded server, or ``None`` when there is no record or it cannot be read (treated as stale)."""
    try:
        return ServerRecord.from_json(json.loads((state_dir / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        # Missing, unreadable or garbled: either way there is no server we can vouch for.
        return None


def _write_record(state_dir: Path, record: ServerRecord) -> None:
    # Write then rename, so a reader never sees half a record.
    tmp = state_dir / f".{STATE_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps(record.to_json(), indent=2) + "\n")
    tmp.replace(state_dir / STATE_FILE)


def _remove_record(state_dir: Path, pid: int | None = None) -> None:
    """Remove the record; with ``pid``, only if it is still the record of that pid (another start may have won)."""
    if pid is not None:
        current = read_record(state_dir)
        if current is not None and current.pid != pid:
            return
    (state_dir / STATE_FILE).unlink(missing_ok=True)


@contextlib.contextmanager
def _state_lock(state_dir: Path) -> Iterator[None]:
    """Serialise ``start`` and ``stop`` against each other, so two starts cannot both find "nothing running"."""
    with open(state_dir / LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _fail(err: ZkCoordError) -> NoReturn:
    """Turn a library error into click's one-line ``Error: ...`` and exit code 1, never a traceback."""
    raise click.ClickException(str(err)) from err


def _fail_os(action: str, err: OSError) -> NoReturn:
    raise click.ClickException(f"cannot {action} {err.filename or ''}: {err.strerror or err}") from err


def _ensure_state_dir() -> Path:
    state_dir = zk_state_dir()
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        _fail_os("create the zkcoord state directory", err)
    return state_dir


@click.group()
def zk() -> None:
    """Run a local ZooKeeper (127.0.0.1) for zkcoord to use."""


@zk.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_ZK_PORT,
    show_default=True,
    help="Client port on 127.0.0.1 (0 picks a free one).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where ZooKeeper keeps its data and log.  [default: $ZKCOORD_HOME/zk/data]",
)
@click.option("--foreground", is_flag=True, help="Run in this terminal until Ctrl-C instead of in the background.")
def start(port: int, data_dir: Path | None, foreground: bool) -> None:
    """Start a local ZooKeeper and wait until it serves."""
    state_dir = _ensure_state_dir()
    config = ZkServerConfig(
        port=port,
        data_dir=(data_dir or state_dir / "data").absolute(),
        # In the background the JVM must not share our session: a Ctrl-C or hang-up of this terminal would kill it.
        detached=not foreground,
    )
    server = ZkServer(config)
    with _state_lock(state_dir):
        record = read_record(state_dir)
        if record is not None and record.is_alive():
            raise click.ClickException(
                f"ZooKeeper is already running on {record.connect_string} (pid {record.pid}); "
                "stop it first with: zkcoord zk stop"
            )
        if record is not None or (state_dir / STATE_FILE).exists():
            _remove_record(state_dir)
            click.echo("Removed the record of a ZooKeeper that is no longer running.", err=True)
        try:
            server.start()
        except ZkCoordError as err:
            _fail(err)
        pid = server.pid
        if pid is None:
            raise click.ClickException(f"ZooKeeper exited right after it started; see {server.log_path}")
        record = ServerRecord(
            pid=pid,
            port=server.port,
            data_dir=server.data_dir,
            log_path=server.log_path,
            config_path=server.config_path,
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
            foreground=foreground,
        )
        try:
            _write_record(state_dir, record)
        except OSError as err:
            server.stop()
            _fail_os("record the running server in", err)
    click.echo(f"ZooKeeper is running on {record.connect_string} (pid {pid})")
    click.echo(f"  data dir: {record.data_dir}")
    click.echo(f"  log:      {record.log_path}")
    if not foreground:
        server.detach()
        return
    _run_in_foreground(server, state_dir, record)


def _run_in_foreground(server: ZkServer, state_dir: Path, record: ServerRecord) -> None:
    """Block until Ctrl-C, SIGTERM or the server's own exit (``zkcoord zk stop`` from elsewhere); then clean up."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    code: int | None = None
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        # Inside the try: a SIGTERM may arrive as soon as the banner is out, and must still clean up.
        click.echo("Press Ctrl-C to stop it.")
        code = server.wait()
    except KeyboardInterrupt:
        click.echo("Stopping ZooKeeper...")
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.stop()
        _remove_record(state_dir, record.pid)
    if code is not None and code not in _CLEAN_EXITS:
        raise click.ClickException(f"ZooKeeper exited with code {code}; see {record.log_path}")
    click.echo("ZooKeeper stopped.")


@zk.command()
def stop() -> None:
    """Stop the local ZooKeeper started by ``zkcoord zk start``."""
    state_dir = zk_state_dir()
    if not state_dir.is_dir():
        click.echo("ZooKeeper is not running.")
        return
    with _state_lock(state_dir):
        record = read_record(state_dir)
        if record is None or not record.is_alive():
            _remove_record(state_dir)
            click.echo("ZooKeeper is not running.")
            return
        try:
            terminate_process(record.pid, STOP_TIMEOUT_S)
        except ZkCoordError as err:
            _fail(err)
        _remove_record(state_dir, record.pid)
    click.echo(f"ZooKeeper stopped (pid {record.pid}, port {record.port}).")


@zk.command()
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Show whether the local ZooKeeper runs; exit 0 if it does, 3 if not."""
    record = read_record(zk_state_dir())
    if record is None or not record.is_alive():
        if as_json:
            click.echo(json.dumps({"running": False}))
        else:
            click.echo("ZooKeeper is not running.")
        ctx.exit(EXIT_NOT_RUNNING)
    try:
        fields = srvr("127.0.0.1", record.port, timeout=2.0)
    except ZkCoordError:
        # Running but not answering: paused, overloaded or still starting.  Still "running" for the exit code.
        fields = {}
    mode = fields.get("Mode", "not answering")
    znodes = int(fields["Node count"]) if fields.get("Node count", "").isdigit() else None
    if as_json:
        click.echo(json.dumps({"running": True, **record.to_json(), "mode": mode, "znode_count": znodes}))
        return
    click.echo("ZooKeeper is running.")
    rows = [
        ("pid", record.pid),
        ("port", record.port),
        ("connect", record.connect_string),
        ("mode", mode),
        ("znodes", "?" if znodes is None else znodes),
        ("data dir", record.data_dir),
        ("log", record.log_path),
        ("started", record.started_at),
    ]
    for name, value in rows:
        click.echo(f"  {name + ':':<10}{value}")
