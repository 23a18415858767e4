"""Thousands of control-plane consumers in one process: one TCP connection and one real ZooKeeper session each.

    python -m benchmarks.scale.swarm --zk HOST:PORT[/chroot] --groups 0..249 --per-group 10 --topic T \\
        --ready-file F [--stats-file S] [--session-timeout 10] [--group-prefix swarm-] [--threads 1]

``--groups A..B`` names the groups ``<prefix>A`` .. ``<prefix>B`` (inclusive, the number zero-padded to 4 digits);
``--groups a,b`` names them literally.  Every group gets ``--per-group`` consumers.

Each consumer behaves as ``tests/scripted.py``'s :class:`ScriptedConsumer` (the reference control-plane consumer):

1. opens its own session (requested timeout ``--session-timeout``; a ping whenever the connection has been idle for a
   third of the negotiated timeout, as kazoo and the Java client do);
2. creates its channel ``/consumers/groups/<g>/channel/<consumerId>`` (persistent, parents as needed), then its member
   znode ``/consumers/groups/<g>/ids/<consumerId>`` (ephemeral, a static :class:`MemberRegistration`), with a Kafka
   consumer id ``<group>_<host>-<ms>-<8 hex>``;
3. lists its channel with a child watch, and on every watch event lists it again: new commands are read in sequence
   order (the 10-digit suffix), a command older than the newest ``(epoch, generation)`` seen is refused as stale, a
   malformed one is recorded, and each is deleted (the acknowledgement).  No fetching: control plane only.

A dropped connection is resumed in the same session (and the channel listed again, which re-arms the watch); a session
the server declares expired is replaced by a new one that registers again under the same consumer id.

The client is a minimal asyncio ZooKeeper client built on kazoo's serialization classes
(:mod:`kazoo.protocol.serialization`): frames are a 4-byte big-endian length, then a request header ``(xid, type)``
or a reply header ``(xid, zxid, err)``; xid ``-2`` answers a ping, ``-1`` carries a watch event; the session handshake
(``Connect``) has no header at all.  Requests on one connection are pipelined and answered in order.

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
import struct
import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo import exceptions as kz
from kazoo.protocol.serialization import (
    Close,
    Connect,
    Create,
    Delete,
    Exists,
    GetChildren,
    GetData,
    Ping,
    ReplyHeader,
    Watch,
    int_struct,
)
from kazoo.security import OPEN_ACL_UNSAFE

from zkcoord import paths
from zkcoord.errors import CodecError
from zkcoord.names import validate_group, validate_topic
from zkcoord.zk import ZkAddress
from zkcoord.znodes import Command, CommandOption, MemberRegistration, Pattern

log = logging.getLogger("swarm")

PING_XID = -2
WATCH_XID = -1
EPHEMERAL = 1
#: watch event types (ZooKeeper's ``Watcher.Event.EventType``)
DELETED_EVENT = 2
CHILD_EVENT = 4
#: a new session's password, as kazoo sends it
NO_PASSWORD = b"\x00" * 16
_REQUEST_HEADER = struct.Struct("!iii")  # length, xid, type
_CLOSE = Close()
_PING = Ping()


class ConnectionLost(Exception):
    """The TCP connection of a session is gone (the session itself may still be alive on the server)."""


class SessionExpired(Exception):
    """ZooKeeper refused to resume a session: it expired, and its ephemerals and watches went with it."""


def _error(code: int) -> Exception:
    try:
        exc: Exception = kz.EXCEPTIONS[code]()
    except RuntimeError:  # kazoo's table raises for codes it does not know
        exc = kz.ZookeeperError(f"ZooKeeper error code {code}")
    return exc


def _retrieve(fut: asyncio.Future[Any]) -> None:
    # A pipelined request whose caller stopped waiting (an earlier one failed) must not log "exception never retrieved".
    if not fut.cancelled():
        fut.exception()


# --- the wire ---------------------------------------------------------------------------------------------------


class Connection(asyncio.Protocol):
    """One TCP connection to ZooKeeper, carrying one session.  Requests are pipelined; replies come in order."""

    def __init__(self, chroot: str, on_watch: Callable[[int, str], None], on_lost: Callable[[], None]) -> None:
        self.chroot = chroot
        self._on_watch = on_watch
        self._on_lost = on_lost
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._handshake: asyncio.Future[Any] = self._loop.create_future()
        self._handshake.add_done_callback(_retrieve)
        self._pending: deque[tuple[int, Any, asyncio.Future[Any]]] = deque()
        self._xid = 0
        self.last_zxid = 0
        self.last_send = 0.0
        self.lost = False

    # --- asyncio.Protocol ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, size = 0, len(buf)
        while size - pos >= 4:
            (length,) = int_struct.unpack_from(buf, pos)
            end = pos + 4 + length
            if end > size:
                break
            frame = bytes(buf[pos + 4 : end])
            pos = end
            try:
                self._frame(frame)
            except Exception:  # a protocol violation: give the connection up, the session is resumed on a new one
                log.exception("bad frame from ZooKeeper; dropping the connection")
                self.abort()
                return
        if pos:
            del buf[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._transport = None
        error = ConnectionLost(f"connection lost ({exc})" if exc else "connection closed")
        if not self._handshake.done():
            self._handshake.set_exception(error)
        while self._pending:
            _, _, fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(error)
        self._on_lost()

    # --- frames ---

    def _frame(self, frame: bytes) -> None:
        if not self._handshake.done():
            result, _ = Connect.deserialize(frame, 0)
            self._handshake.set_result(result)
            return
        header, offset = ReplyHeader.deserialize(frame, 0)
        self.last_zxid = max(self.last_zxid, header.zxid)
        if header.xid == PING_XID:
            return
        if header.xid == WATCH_XID:
            watch, _ = Watch.deserialize(frame, offset)
            self._on_watch(watch.type, self.unchroot(watch.path))
            return
        if not self._pending:
            raise RuntimeError(f"reply xid {header.xid} to no request")
        xid, op, fut = self._pending.popleft()
        if header.xid != xid:
            raise RuntimeError(f"reply xid {header.xid}, expected {xid}")
        if fut.done():  # the caller gave up (cancelled)
            return
        if header.err:
            fut.set_exception(_error(header.err))
            return
        deserialize = getattr(op, "deserialize", None)
        result = deserialize(frame, offset) if deserialize is not None else None
        if isinstance(op, Create) and isinstance(result, str):
            result = self.unchroot(result)
        fut.set_result(result)

    def unchroot(self, path: str) -> str:
        if self.chroot and path.startswith(self.chroot):
            return path[len(self.chroot) :] or "/"
        return path

    # --- requests ---

    async def handshake(self, timeout_ms: int, session_id: int, passwd: bytes, deadline_s: float) -> Any:
        """Open (``session_id`` 0) or resume a session; return kazoo's ``Connect`` reply (negotiated timeout, id...).

        :raises SessionExpired: the server says the session to resume is gone.
        """
        body = bytes(Connect(0, self.last_zxid, timeout_ms, session_id, passwd, False).serialize())
        self._write(int_struct.pack(len(body)) + body)
        reply = await asyncio.wait_for(self._handshake, deadline_s)
        if reply.time_out <= 0:
            raise SessionExpired(f"session {session_id:#x} expired")
        return reply

    def request(self, op: Any) -> asyncio.Future[Any]:
        """Send ``op`` (a kazoo serialization request); the future gets its reply or a kazoo exception."""
        if self.lost or self._transport is None:
            raise ConnectionLost("not connected")
        self._xid = self._xid % 2147483647 + 1
        fut: asyncio.Future[Any] = self._loop.create_future()
        fut.add_done_callback(_retrieve)
        self._pending.append((self._xid, op, fut))
        self._send(self._xid, op)
        return fut

    def ping(self) -> None:
        if not self.lost and self._transport is not None:
            self._send(PING_XID, _PING)

    def _send(self, xid: int, op: Any) -> None:
        body = bytes(op.serialize())
        self._write(_REQUEST_HEADER.pack(len(body) + 8, xid, op.type) + body)

    def _write(self, data: bytes) -> None:
        if self._transport is None:
            raise ConnectionLost("not connected")
        self._transport.write(data)
        self.last_send = self._loop.time()

    async def close(self, deadline_s: float) -> None:
        """Close the session (ZooKeeper deletes its ephemerals at once), then the connection."""
        try:
            if not self.lost:
                await asyncio.wait_for(self.request(_CLOSE), deadline_s)
        except (ConnectionLost, TimeoutError, kz.ZookeeperError):
            pass
        finally:
            self.abort()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


# --- the consumer ---------------------------------------------------------------------------------------------------


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


class Member:
    """One consumer: its session, registration and channel.  Runs as one asyncio task (:meth:`run`)."""

    def __init__(self, swarm: Swarm, group: str, consumer_id: str) -> None:
        self.swarm = swarm
        self.group = group
        self.consumer_id = consumer_id
        self.channel = paths.channel(group, consumer_id)
        self.member_path = paths.member(group, consumer_id)
        self.conn: Connection | None = None
        self.session_id = 0
        self.passwd = NO_PASSWORD
        self.last_zxid = 0
        self.negotiated_ms = 0
        self.registered_in = 0  # the session our member znode belongs to
        self.ready = False
        self.epoch = -1
        self.generation = -1
        self.partitions = 0
        self.seen: list[tuple[str, str, int, int, str]] = []  # (name, option, epoch, generation, refusal)
        self._done: set[str] = set()
        self._wake = asyncio.Event()
        self._ping_interval = 0.0
        self._ping_handle: asyncio.TimerHandle | None = None

    def full(self, path: str) -> str:
        return self.swarm.chroot + path

    # --- lifecycle ---

    async def run(self) -> None:
        delay = 0.05
        while not self.swarm.stopping:
            try:
                async with self.swarm.slots:  # bounded: a burst of thousands of connects overflows accept queues
                    await self._connect()
                    if self.registered_in != self.session_id:
                        await self._register()
                    await self._relist()
                if not self.ready:
                    self.ready = True
                    self.swarm.member_ready()
                delay = 0.05
                await self._serve()
            except SessionExpired:
                self.swarm.stats["sessions_expired"] += 1
                log.warning("%s: session expired; registering again in a new session", self.consumer_id)
                self.session_id, self.passwd = 0, NO_PASSWORD
                self._drop()
            except (ConnectionLost, OSError, TimeoutError, kz.ZookeeperError) as e:
                self._drop()
                if self.swarm.is_stopping():  # (a method: the loop condition does not narrow it)
                    return
                self.swarm.stats["reconnects"] += 1
                log.warning("%s: %s: %s; reconnecting", self.consumer_id, type(e).__name__, e)
                await asyncio.sleep(delay * random.uniform(0.5, 1.5))
                delay = min(delay * 2, 2.0)

    async def close(self) -> None:
        if self._ping_handle is not None:
            self._ping_handle.cancel()
        conn, self.conn = self.conn, None
        if conn is not None:
            await conn.close(deadline_s=5.0)

    def _drop(self) -> None:
        if self._ping_handle is not None:
            self._ping_handle.cancel()
            self._ping_handle = None
        if self.conn is not None:
            self.last_zxid = max(self.last_zxid, self.conn.last_zxid)
            self.conn.abort()
            self.conn = None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.swarm.pick_host()
        deadline = max(2.0, self.swarm.config.session_timeout_s)
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: Connection(self.swarm.chroot, self._on_watch, self._wake.set), host, port),
            deadline,
        )
        conn.last_zxid = self.last_zxid
        self.conn = conn
        timeout_ms = int(self.swarm.config.session_timeout_s * 1000)
        reply = await conn.handshake(timeout_ms, self.session_id, self.passwd, deadline)
        if self.session_id and reply.session_id != self.session_id:
            raise RuntimeError("ZooKeeper resumed a different session")
        self.session_id, self.passwd, self.negotiated_ms = reply.session_id, reply.passwd, reply.time_out
        self.swarm.stats["connects"] += 1
        self._ping_interval = self.negotiated_ms / 3000.0
        # Spread the first pings so thousands of sessions opened together do not ping in lockstep.
        self._ping_handle = loop.call_later(random.uniform(0.3, 1.0) * self._ping_interval, self._ping)

    def _ping(self) -> None:
        conn = self.conn
        if conn is None or conn.lost:
            return
        loop = asyncio.get_running_loop()
        idle = loop.time() - conn.last_send
        if idle >= self._ping_interval * 0.95:
            conn.ping()
            idle = 0.0
        self._ping_handle = loop.call_later(self._ping_interval - idle, self._ping)

    def _on_watch(self, kind: int, path: str) -> None:
        if path == self.channel and kind in (CHILD_EVENT, DELETED_EVENT):
            self._wake.set()

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self.swarm.stopping:
                return
            if self.conn is None or self.conn.lost:
                raise ConnectionLost("connection lost")
            await self._relist()

    # --- ZooKeeper operations ---

    def _request(self, op: Any) -> asyncio.Future[Any]:
        if self.conn is None:
            raise ConnectionLost("not connected")
        return self.conn.request(op)

    async def _ensure(self, path: str) -> None:
        """Create ``path`` and its missing parents as empty persistent znodes (idempotent)."""
        try:
            await self._request(Create(self.full(path), b"", OPEN_ACL_UNSAFE, 0))
        except kz.NodeExistsError:
            return
        except kz.NoNodeError:
            parent = path.rsplit("/", 1)[0]
            if not parent:
                raise
            await self._ensure(parent)
            with contextlib.suppress(kz.NodeExistsError):
                await self._request(Create(self.full(path), b"", OPEN_ACL_UNSAFE, 0))

    async def _register(self) -> None:
        cfg = self.swarm.config
        await self._ensure(self.channel)
        for _ in range(5):
            registration = MemberRegistration(Pattern.STATIC, {cfg.topic: cfg.threads}, time.time_ns() // 1_000_000)
            try:
                await self._request(
                    Create(self.full(self.member_path), registration.encode(), OPEN_ACL_UNSAFE, EPHEMERAL)
                )
                break
            except kz.NoNodeError:
                await self._ensure(paths.group_ids(self.group))
            except kz.NodeExistsError:
                # A create that landed before the connection dropped: ours if it belongs to this session.
                owner = await self._owner(self.member_path)
                if owner == self.session_id:
                    break
                if owner is not None:
                    raise
        else:
            raise kz.ZookeeperError(f"could not register {self.member_path}")
        self.registered_in = self.session_id
        self.swarm.stats["registrations"] += 1

    async def _owner(self, path: str) -> int | None:
        try:
            stat = await self._request(Exists(self.full(path), False))
        except kz.NoNodeError:
            return None
        return None if stat is None else int(stat.ephemeralOwner)

    async def _relist(self) -> None:
        """List the channel (re-arming the watch); apply new commands in sequence order and delete them."""
        try:
            children: list[str] = await self._request(GetChildren(self.full(self.channel), True))
        except kz.NoNodeError:
            await self._ensure(self.channel)
            children = await self._request(GetChildren(self.full(self.channel), True))
        present = set(children)
        # Applied earlier but still there: the delete was lost with a connection.  Acknowledge again.
        again = [self._request(Delete(self.full(f"{self.channel}/{n}"), -1)) for n in sorted(self._done & present)]
        self._done &= present
        fresh = sorted((n for n in children if n not in self._done), key=lambda n: n[-10:])
        reads = [(n, self._request(GetData(self.full(f"{self.channel}/{n}"), False))) for n in fresh]
        acks: list[asyncio.Future[Any]] = again
        for name, read in reads:
            try:
                data, _ = await read
            except kz.NoNodeError:
                continue
            self._done.add(name)
            self._apply(name, data)
            acks.append(self._request(Delete(self.full(f"{self.channel}/{name}"), -1)))
        for ack in acks:
            with contextlib.suppress(kz.NoNodeError):
                await ack

    def _apply(self, name: str, data: bytes | None) -> None:
        stats = self.swarm.stats
        try:
            cmd = Command.decode(data, f"{self.channel}/{name}")
        except CodecError as e:
            stats["malformed"] += 1
            self.seen.append((name, "", -1, -1, e.reason))
            return
        stale = (cmd.epoch, cmd.generation) < (self.epoch, self.generation)
        self.seen.append((name, cmd.option.value, cmd.epoch, cmd.generation, "stale" if stale else ""))
        if stale:
            stats["stale"] += 1
            return
        self.epoch, self.generation = cmd.epoch, cmd.generation
        stats[cmd.option.value] += 1
        if cmd.issued_ms:
            self.swarm.latencies_ms.append(time.time_ns() / 1e6 - cmd.issued_ms)
        if cmd.option is CommandOption.STOP_FETCHER:
            self.partitions = 0
        else:
            self.partitions = sum(len(parts) for parts in cmd.ownership.values())


# --- the swarm ------------------------------------------------------------------------------------------------------


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
    except Exception as e:  # noqa: BLE001 - a usage error, reported as one
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
