"""One control-plane consumer of the swarm: its session, registration and channel, as one asyncio task.

Each consumer behaves as ``tests/scripted.py``'s :class:`ScriptedConsumer` (the reference control-plane consumer):

1. opens its own session (requested timeout ``--session-timeout``; a ping whenever the connection has been idle for a
   third of the negotiated timeout, as kazoo and the Java client do);
2. creates its channel ``/consumers/groups/<g>/channel/<consumerId>`` (persistent, parents as needed), then its member
   znode ``/consumers/groups/<g>/ids/<consumerId>`` (ephemeral, a static :class:`MemberRegistration`), with a Kafka
   consumer id ``<group>_<host>-<ms>-<8 hex>``;
3. lists its channel with a child watch, and on every watch event lists it again: new commands are read in sequence
   order (the 10-digit suffix), a command older than the newest ``(epoch, generation)`` seen is refused as stale, a
   malformed one is recorded, and each is acknowledged: deleted, and recorded in the channel's data, in one
   transaction (as :mod:`zkcoord.consumer.acks` does).  No fetching: control plane only.

A dropped connection is resumed in the same session (and the channel listed again, which re-arms the watch); a session
the server declares expired is replaced by a new one that registers again under the same consumer id.

The connection itself is :class:`zkcoord.bench.scale.wire.Connection`; the process-wide state a member shares (its
configuration, the connect slots, the counters and latencies, the stopping flag) is its swarm's: what a member needs of
it is :class:`SwarmHost`, which :class:`zkcoord.bench.scale.swarm.Swarm` (the owner of every member) satisfies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from typing import Any, Protocol

from kazoo import exceptions as kz
from kazoo.protocol.serialization import Create, Delete, Exists, GetChildren, GetData, SetData, Transaction
from kazoo.security import OPEN_ACL_UNSAFE

from zkcoord.bench.scale.wire import (
    CHILD_EVENT,
    DELETED_EVENT,
    EPHEMERAL,
    NO_PASSWORD,
    Connection,
    ConnectionLost,
    SessionExpired,
)
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.commands import Command, CommandOption, encode_acknowledged
from zkcoord.layout.registrations import MemberRegistration, Pattern

log = logging.getLogger("swarm")


class MemberSettings(Protocol):
    """The part of the swarm's configuration a member reads."""

    @property
    def session_timeout_s(self) -> float: ...

    @property
    def topic(self) -> str: ...

    @property
    def threads(self) -> int: ...


class SwarmHost(Protocol):
    """What a member needs of the swarm it belongs to (all on the swarm's one event loop): its settings, the connect
    slots, the shared counters and latencies, whether it is stopping, a server to connect to, and where to report
    that this member registered."""

    @property
    def config(self) -> MemberSettings: ...

    @property
    def chroot(self) -> str: ...

    @property
    def stopping(self) -> bool: ...

    @property
    def slots(self) -> asyncio.Semaphore: ...

    @property
    def stats(self) -> Counter[str]: ...

    @property
    def latencies_ms(self) -> list[float]: ...

    def is_stopping(self) -> bool: ...

    def pick_host(self) -> tuple[str, int]: ...

    def member_ready(self) -> None: ...


class Member:
    """One consumer: its session, registration and channel.  Runs as one asyncio task (:meth:`run`)."""

    def __init__(self, swarm: SwarmHost, group: str, consumer_id: str) -> None:
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
        again = [self._ack(n) for n in sorted(self._done & present, key=lambda n: n[-10:])]
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
            acks.append(self._ack(name))
        for ack in acks:
            with contextlib.suppress(kz.NoNodeError):
                await ack

    def _ack(self, name: str) -> asyncio.Future[Any]:
        """Acknowledge command ``name``: one transaction deleting it and recording it in the channel (pipelined:
        ZooKeeper applies a session's requests in order, so the record only grows).  A command already gone fails the
        transaction in its results, not as an error."""
        ops: list[Any] = [Delete(self.full(f"{self.channel}/{name}"), -1)]
        record = encode_acknowledged(name)
        if record is not None:
            ops.append(SetData(self.full(self.channel), record, -1))
        return self._request(Transaction(ops))

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
