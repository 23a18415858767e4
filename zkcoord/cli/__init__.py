"""The ``zkcoord`` command line: a thin layer over the library (one module per command family)."""

from __future__ import annotations

import logging

import click

from zkcoord import __version__
from zkcoord.cli.analyze_cmd import analyze
from zkcoord.cli.bench_cmd import bench
from zkcoord.cli.broker_cmd import broker
from zkcoord.cli.common import ZkCoordGroup
from zkcoord.cli.consume_cmd import consume
from zkcoord.cli.demo_cmd import demo
from zkcoord.cli.group_cmd import group
from zkcoord.cli.produce_cmd import fetch, produce
from zkcoord.cli.region_cmd import region
from zkcoord.cli.secure_cmd import secure
from zkcoord.cli.topic_cmd import topic
from zkcoord.cli.zk_cmd import zk


@click.group(cls=ZkCoordGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="zkcoord")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def cli(verbose: int) -> None:
    """zkcoord: a ZooKeeper-based consumer-group coordinator and its testbed.

    \b
    Start here:
      zkcoord zk start                          run a local ZooKeeper (port 2181)
      zkcoord broker --id 0 &                   run a broker
      zkcoord topic create orders -p 8          create a topic
      zkcoord produce orders --count 10000      write records
      zkcoord fetch orders --summary            read them back
      zkcoord group describe GROUP              members, owners, offsets and lag of a group
      zkcoord demo                              real faults, and the verdict: no split brain
      zkcoord analyze runs/RUN                  the Spark pipeline: tables, verdict, report

    Every command that talks to ZooKeeper takes --zk HOST:PORT[/chroot].
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    if verbose == 0:
        # kazoo warns once per failed connection attempt (a dozen lines while a server is unreachable); zkcoord.zk
        # reports the states that matter and the command its one-line error, so its chatter is shown with -v only.
        logging.getLogger("kazoo").setLevel(logging.ERROR)


zk.add_command(secure)
cli.add_command(zk)
cli.add_command(broker)
cli.add_command(topic)
cli.add_command(produce)
cli.add_command(fetch)
cli.add_command(consume)
cli.add_command(group)
cli.add_command(region)
cli.add_command(demo)
cli.add_command(analyze)
cli.add_command(bench)


def main() -> None:
    """Console entry point."""
    cli(prog_name="zkcoord")
