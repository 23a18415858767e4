"""``zkcoord broker``: run one broker until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import click

from zkcoord.broker import Broker, BrokerConfig
from zkcoord.cli.common import journal_option, open_journal, stop_on_signals, zk_config, zk_options


@click.command()
@click.option("--id", "broker_id", type=click.IntRange(0, 2**31 - 1), required=True, help="Broker id (unique).")
@click.option("--host", default=socket.gethostname, show_default="this host", help="Host to advertise.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port to advertise [default: 9092+id].")
@zk_options
@journal_option
def broker(
    broker_id: int, host: str, port: int | None, zk: str, session_timeout: float, journal_dir: Path | None
) -> None:
    """Run broker ID: register /brokers/ids/ID and stay registered until stopped.

    Re-registers after a session expiry; refuses an id held by a live broker; on SIGTERM or SIGINT removes its
    registration and exits 0.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s broker-%(threadName)s %(levelname)s %(message)s")
    config = BrokerConfig(
        broker_id=broker_id,
        zk=zk_config(zk, session_timeout),
        host=host,
        port=port if port is not None else min(9092 + broker_id, 65535),
    )
    stop = stop_on_signals()
    journal = open_journal(journal_dir, f"broker-{broker_id}")
    node = Broker(config, journal)
    node.start()
    click.echo(f"broker {broker_id} registered at {config.zk.address} (session {node.zk.session_id:#x})", err=True)
    try:
        stop.wait()
    finally:
        node.stop()
        journal.emit("process.stopped", reason="signal")
        journal.close()
    click.echo(f"broker {broker_id} stopped", err=True)
