"""Shared pieces of the command line: options every command takes, error handling, signals.

Errors: any :class:`~zkcoord.errors.ZkCoordError` escaping a command becomes one line ``Error: <message>`` on stderr
and exit status 1 (:class:`ZkCoordGroup`); click's own usage errors exit 2.  No traceback reaches a user.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click
from prometheus_client import CollectorRegistry
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from zkcoord.errors import ZkCoordError
from zkcoord.layout.acl import Credential
from zkcoord.runtime import settings
from zkcoord.runtime.exposition import DEFAULT_ADDRESS, MetricsServer, serve_metrics
from zkcoord.runtime.journal import Journal, process_started
from zkcoord.zk import ZkConfig, load_credential

F = TypeVar("F", bound=Callable[..., Any])


class ZkCoordGroup(click.Group):
    """A click group that turns the project's errors into one clear line and a non-zero exit."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ZkCoordError as e:
            raise click.ClickException(str(e)) from e


_ZK_AUTH = "zkcoord.zk_auth"


def _keep_zk_auth(ctx: click.Context, _param: click.Parameter, source: str | None) -> None:
    """Load ``--zk-auth`` as soon as it is parsed (its errors are one ``Error:`` line) and keep the credential in the
    context, where :func:`zk_config` finds it: so every command takes it without a parameter of its own."""
    if source is not None:
        try:
            ctx.meta[_ZK_AUTH] = load_credential(source)
        except ZkCoordError as e:
            raise click.ClickException(str(e)) from e


def zk_auth() -> Credential | None:
    """The credential ``--zk-auth`` gave the running command, or None."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(_ZK_AUTH)


def zk_auth_option(func: F) -> F:
    """``--zk-auth FILE|env:VAR``: kept in the context (:func:`zk_auth`), not passed to the command."""
    return click.option(
        "--zk-auth",
        metavar="FILE|env:VAR",
        expose_value=False,
        callback=_keep_zk_auth,
        help="ZooKeeper digest credentials user:password, read from FILE or the environment variable VAR (never "
        "given in clear here). With them, znodes are created with least-privilege ACLs (docs/security.md).",
    )(func)


def zk_options(func: F) -> F:
    """``--zk HOST:PORT[/chroot]``, ``--session-timeout`` and ``--zk-auth``, as a :class:`ZkConfig` in ``zk``."""

    func = zk_auth_option(func)
    func = click.option(
        "--session-timeout",
        type=click.FloatRange(0.5, 600),
        default=6.0,
        show_default=True,
        help="ZooKeeper session timeout in seconds.",
    )(func)
    return click.option(
        "--zk",
        "zk",
        metavar="HOST:PORT[/chroot]",
        default=settings.default_zk,
        show_default=settings.DEFAULT_ZK,
        help="ZooKeeper to use ($ZKCOORD_ZK; default: the embedded server).",
    )(func)


def zk_config(zk: str, session_timeout: float) -> ZkConfig:
    """Build a :class:`ZkConfig`; raises :class:`~zkcoord.errors.ConfigurationError` on a malformed address."""
    return ZkConfig.from_string(zk, session_timeout_s=session_timeout, auth=zk_auth())


def journal_option(func: F) -> F:
    return click.option(
        "--journal",
        "journal_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Directory of the run's journal (default: $ZKCOORD_HOME/journal).",
    )(func)


def open_journal(journal_dir: Path | None, role: str) -> Journal:
    journal = Journal(journal_dir or settings.default_journal_dir(), role)
    process_started(journal, sys.argv)
    return journal


def metrics_options(func: F) -> F:
    """``--metrics-port`` (0: off) and ``--metrics-addr``: where ``/metrics`` is served (docs/metrics.md)."""
    func = click.option(
        "--metrics-addr",
        "metrics_addr",
        default=DEFAULT_ADDRESS,
        show_default=True,
        metavar="HOST",
        help="Address the metrics endpoint listens on (0.0.0.0: every interface, as a container needs).",
    )(func)
    return click.option(
        "--metrics-port",
        "metrics_port",
        type=click.IntRange(0, 65535),
        default=0,
        show_default=True,
        metavar="PORT",
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (0: no endpoint; docs/metrics.md).",
    )(func)


def open_metrics(address: str, port: int) -> tuple[CollectorRegistry, MetricsServer | None]:
    """The process's own registry (with prometheus_client's process, platform and GC collectors), served at
    ``address:port`` unless the port is 0.  Called before anything registers in ZooKeeper, so that a port in use
    is one ``Error:`` line and nothing else happened; the caller says where it serves once it started (a refused
    start prints its ``Error:`` line alone).  :raises MetricsServerError:"""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry, serve_metrics(registry, address, port)


def data_dir_option(func: F) -> F:
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Directory of the partition logs (default: $ZKCOORD_HOME/data).",
    )(func)


def resolve_data_dir(data_dir: Path | None) -> Path:
    return data_dir or settings.default_data_dir()


def stop_on_signals() -> threading.Event:
    """Return an event set by the first SIGTERM or SIGINT, so a command can shut down cleanly and exit 0."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def echo_table(headers: Sequence[str], rows: Sequence[Sequence[str]], red: Sequence[bool] = ()) -> None:
    """Print left-aligned columns separated by two spaces, Kafka's tool style; the rows flagged in ``red`` in red
    (on a terminal: click drops the colour elsewhere)."""
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for n, row in enumerate([headers, *rows]):
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        click.echo(click.style(line, fg="red") if n and n - 1 < len(red) and red[n - 1] else line)


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True))
