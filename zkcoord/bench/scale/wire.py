"""The swarm's ZooKeeper client: one asyncio connection carrying one session, on kazoo's wire serialization.

A minimal asyncio ZooKeeper client built on kazoo's serialization classes (:mod:`kazoo.protocol.serialization`):
frames are a 4-byte big-endian length, then a request header ``(xid, type)`` or a reply header ``(xid, zxid, err)``;
xid ``-2`` answers a ping, ``-1`` carries a watch event; the session handshake (``Connect``) has no header at all.
Requests on one connection are pipelined and answered in order.

:class:`Connection` knows frames, requests and replies only: sessions (resumption, pings, expiry) are its user's
(:class:`zkcoord.bench.scale.member.Member`), as are registration and the channel.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from kazoo import exceptions as kz
from kazoo.protocol.serialization import Close, Connect, Create, Ping, ReplyHeader, Watch, int_struct

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
            except (struct.error, ValueError, IndexError, KeyError):
                # A frame that does not parse: a protocol violation.  Give the connection up; the session is
                # resumed on a new one.
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
