"""Thousands of control-plane consumers in one process: one TCP connection and one real ZooKeeper session each.

    python -m zkcoord.bench.scale.swarm --zk HOST:PORT[/chroot] --groups 0..249 --per-group 10 --topic T \\
        --ready-file F [--stats-file S] [--session-timeout 10] [--group-prefix swarm-] [--threads 1]

``--groups A..B`` names the groups ``<prefix>A`` .. ``<prefix>B`` (inclusive, the number zero-padded to 4 digits);
``--groups a,b`` names them literally.  Every group gets ``--per-group`` consumers.

Each consumer behaves as ``tests/scripted.py``'s :class:`ScriptedConsumer` (the reference control-plane consumer);
what that means is :mod:`zkcoord.bench.scale.member`'s contract.  Each has its own connection and session through the
minimal asyncio ZooKeeper client of :mod:`zkcoord.bench.scale.wire` (kazoo's serialization, pipelined requests).  This
module is the process: the members on one event loop, the command line, and the ready and stats files.

Once every consumer is registered and watching, ``--ready-file`` is written (atomically; JSON with the consumer ids
per group).  On SIGTERM or SIGINT every session is closed (ephemerals vanish at once), ``--stats-file`` is written
(counters, command latencies, and every command each consumer saw) and the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import resource
import signal
import socket
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zkcoord.bench.scale.member import Member
from zkcoord.errors import ZkCoordError
from zkcoord.layout.names import validate_group, validate_topic
from zkcoord.zk import ZkAddress

log = logging.getLogger("swarm")


@dataclass(frozen=True, slots=True)
class SwarmConfig:
    host_ports: tuple[tuple[str, int], ...]
    chroot: str
    groups: tuple[str, ...]
    per_group: int
    topic: str
    threads: int = 1
    session_timeout_s: float = 10.0
    connect_concurrency: int = 64
    host: str = ""


def consumer_id(group: str, host: str) -> str:
    """A Kafka consumer id: ``<group>_<host>-<ms>-<8 hex>``."""
    return f"{group}_{host}-{time.time_ns() // 1_000_000}-{uuid.uuid4().hex[:8]}"


class Swarm:
    """Every member of one process, on one event loop."""

    def __init__(self, config: SwarmConfig) -> None:
        self.config = config
        self.chroot = config.chroot
        self.stopping = False
        self.slots = asyncio.Semaphore(config.connect_concurrency)
        self.stats: Counter[str] = Counter()
        self.latencies_ms: list[float] = []
        host = config.host or re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname()) or "swarm"
        self.members = [
            Member(self, group, consumer_id(group, host)) for group in config.groups for _ in range(config.per_group)
        ]
        self.ready = asyncio.Event()
        self._ready = 0
        self._tasks: list[asyncio.Task[None]] = []

    def is_stopping(self) -> bool:
        return self.stopping

    def pick_host(self) -> tuple[str, int]:
        return random.choice(self.config.host_ports)

    def member_ready(self) -> None:
        self._ready += 1
        if self._ready == len(self.members):
            self.ready.set()

    @property
    def registered(self) -> int:
        return self._ready

    def start(self) -> None:
        self._tasks = [asyncio.create_task(m.run(), name=m.consumer_id) for m in self.members]

    async def close(self) -> None:
        """Close every session (bounded concurrency); their member znodes vanish at once."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        gate = asyncio.Semaphore(256)

        async def close_one(member: Member) -> None:
            async with gate:
                await member.close()

        await asyncio.gather(*(close_one(m) for m in self.members), return_exceptions=True)

    def ready_document(self, seconds: float) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for m in self.members:
            groups.setdefault(m.group, []).append(m.consumer_id)
        return {"pid": os.getpid(), "sessions": len(self.members), "seconds": round(seconds, 3), "groups": groups}

    def stats_document(self) -> dict[str, Any]:
        lat = sorted(self.latencies_ms)

        def pct(q: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(q * len(lat)))], 1) if lat else None

        return {
            "pid": os.getpid(),
            "sessions": len(self.members),
            "registered": self.registered,
            "counters": dict(sorted(self.stats.items())),
            "command_latency_ms": {"count": len(lat), "p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)},
            "members": {
                m.consumer_id: {
                    "group": m.group,
                    "session": f"{m.session_id:#x}",
                    "epoch": m.epoch,
                    "generation": m.generation,
                    "partitions": m.partitions,
                    "seen": [list(s) for s in m.seen],
                }
                for m in self.members
            },
        }


def write_atomically(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(document, indent=1) + "\n")
    tmp.replace(path)


async def run_swarm(config: SwarmConfig, ready_file: Path | None, stats_file: Path | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    swarm = Swarm(config)
    started = loop.time()
    swarm.start()
    log.info("starting %d sessions in %d groups", len(swarm.members), len(config.groups))
    next_report = started + 5.0
    while not stop.is_set() and not swarm.ready.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(swarm.ready.wait(), 0.1)
        if loop.time() >= next_report:
            next_report += 5.0
            log.info("%d/%d sessions registered (%s)", swarm.registered, len(swarm.members), dict(swarm.stats))
    if swarm.ready.is_set():
        elapsed = loop.time() - started
        log.info("all %d sessions registered in %.2f s", len(swarm.members), elapsed)
        if ready_file is not None:
            write_atomically(ready_file, swarm.ready_document(elapsed))
    await stop.wait()
    log.info("closing %d sessions", len(swarm.members))
    await swarm.close()
    if stats_file is not None:
        write_atomically(stats_file, swarm.stats_document())
    log.info("closed; counters %s", dict(sorted(swarm.stats.items())))
    return 0


# --- command line ---------------------------------------------------------------------------------------------------


def parse_groups(spec: str, prefix: str) -> tuple[str, ...]:
    """``A..B`` (inclusive, ``<prefix>`` + 4-digit number) or a comma-separated list of group names."""
    if ".." in spec:
        first, _, last = spec.partition("..")
        lo, hi = int(first), int(last)
        if not 0 <= lo <= hi:
            raise ValueError(f"bad group range {spec!r}")
        names = tuple(f"{prefix}{i:04d}" for i in range(lo, hi + 1))
    else:
        names = tuple(n.strip() for n in spec.split(",") if n.strip())
    if not names:
        raise ValueError("no groups")
    for name in names:
        validate_group(name)
    return names


def raise_open_files_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        new = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < needed:
            log.warning("open files limited to %d; %d sessions need about %d", new, needed - 64, needed)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--zk", required=True, metavar="HOST:PORT[/chroot]")
    parser.add_argument("--groups", required=True, help="A..B (numbered, see --group-prefix) or a,b,c")
    parser.add_argument("--group-prefix", default="swarm-")
    parser.add_argument("--per-group", type=int, required=True, help="consumers per group")
    parser.add_argument("--topic", required=True, help="the static subscription")
    parser.add_argument("--threads", type=int, default=1, help="threads per consumer in the subscription")
    parser.add_argument("--session-timeout", type=float, default=10.0, help="requested session timeout, seconds")
    parser.add_argument("--connect-concurrency", type=int, default=64, help="sessions being opened at once")
    parser.add_argument("--host", default="", help="host part of the consumer ids (default: this host)")
    parser.add_argument("--ready-file", type=Path, default=None)
    parser.add_argument("--stats-file", type=Path, default=None)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format=f"%(asctime)s swarm[{os.getpid()}] %(levelname)s %(message)s"
    )
    try:
        address = ZkAddress.parse(args.zk)
        groups = parse_groups(args.groups, args.group_prefix)
        validate_topic(args.topic)
    except (ZkCoordError, ValueError) as e:  # a usage error, reported as one
        parser.error(str(e))
    if args.per_group < 1 or not 1 <= args.threads <= 1024 or not 0.5 <= args.session_timeout <= 600:
        parser.error("--per-group >= 1, --threads in 1..1024, --session-timeout in 0.5..600")
    config = SwarmConfig(
        host_ports=address.hosts,
        chroot=address.chroot or "",
        groups=groups,
        per_group=args.per_group,
        topic=args.topic,
        threads=args.threads,
        session_timeout_s=args.session_timeout,
        connect_concurrency=max(1, args.connect_concurrency),
        host=args.host,
    )
    raise_open_files_limit(len(groups) * args.per_group + 64)
    return asyncio.run(run_swarm(config, args.ready_file, args.stats_file))


if __name__ == "__main__":
    sys.exit(main())
