"""The consumer protocol's channel on the member's side: its assignment znode, read through a data watch.

A consumer-protocol coordinator writes each command to a member into one znode, ``assignment/<c>`` (rewritten in
place, in the fenced transaction that writes the member's records and the group state), instead of a sequential
znode in the member's channel; the member acknowledges it by one write of ``ack/<c>`` naming the write it handled
(the zxid, :class:`~zkcoord.layout.kip848.AssignmentAck`: :func:`zkcoord.consumer.acks.assignment_ack`).  Each write
of the znode is one command, named ``assignment-<mzxid>`` (:data:`~zkcoord.layout.commands.ASSIGNMENT_NAME`), and
goes through the same judgement as a channel's (:func:`zkcoord.consumer.inbox.judge`): addressed to our group and
registration, not older than what we applied, vouched for by the group's state, read with it in one round trip.

The heartbeat thread's lease round trip reads the assignment's stat, and a write newer than the last handled is
read again (:meth:`AssignmentReader.heard`): a member that misses a fire still converges.  A read always sees the
newest write: a member that misses a write (two landed before it looked, or a read
failed and was retried) handles the newest, which is the coordinator's whole current word (an incremental start
names the whole assignment, a stop names everything to give up).  The coordinator waits on the write it made last,
so it is that one the member acknowledges.

Command thread only; the watch only enqueues.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from zkcoord.consumer.core import ConsumerCore
from zkcoord.errors import NodeExistsError
from zkcoord.layout import paths
from zkcoord.layout.commands import ASSIGNMENT_NAME, assignment_zxid
from zkcoord.zk import Stat, WatchEvent, WatchKind
from zkcoord.zk.types import OneShot


@dataclass(frozen=True, slots=True)
class Written:
    """One write of our assignment znode, as read with the group's state."""

    name: str
    #: ``assignment/<c>/<name>``: what the acknowledgement functions take for this command's path
    path: str
    got: tuple[bytes, Stat]
    state: tuple[bytes, Stat] | None


class AssignmentReader:
    """Reads our assignment znode, keeping one data watch on it (one callback, so a fire enqueues one event)."""

    def __init__(self, core: ConsumerCore) -> None:
        self.c = core
        #: the session in which our ``ack/<c>`` was last known to exist (0: not known)
        self.ack_session = 0
        #: whether our assignment znode is known to exist (a read found it, its watch saw it created or changed, or
        #: the heartbeat's round trip found it): until it is, a read starts with an ``exists`` that arms the watch,
        #: and the group's state is read only once there is an assignment for it to vouch for
        self.seen = False

    def probe(self) -> str:
        """What the heartbeat thread's lease round trip reads (``exists``): our assignment znode for the consumer
        protocol (see :meth:`heard`), else our registration."""
        c = self.c
        consumer = c.config.rebalance == "consumer"
        return (paths.assignment if consumer else paths.member)(c.config.group, c.consumer_id)

    def heard(self, stat: Stat | None, done: str) -> None:
        """The heartbeat thread's round trip read ``stat`` of :meth:`probe`: an assignment written after ``done`` (the
        last write the command thread handled) is read again -- so a member that missed its watch's fire (the
        one-shot watch spent, the event lost) still hears its assignment within a heartbeat, as KIP-848's heartbeat
        response carries it.  Heartbeat thread; only enqueues."""
        if self.c.config.rebalance == "consumer" and stat is not None and stat.mzxid > assignment_zxid(done):
            self.seen = True
            self.c.events.put(("assignment", None))

    def _fired(self, event: WatchEvent) -> None:
        if event.kind in (WatchKind.CREATED, WatchKind.CHANGED):
            self.seen = True
        self.c.events.put(("assignment", None))

    def read(self) -> Written | None:
        """Read the assignment and the group state (one round trip), arming the watch on the assignment; None if
        there is none yet (a watch waits for its creation).  Makes sure our ``ack/<c>`` exists first (once per
        session: an acknowledgement inside a commit's transaction can only set it).  While the assignment is not
        known to exist (a member that just joined: the coordinator writes it only once it has seen the
        registration) an ``exists`` comes first, which arms the watch: the state, read only to vouch for an
        assignment, is not read for none (issue 16: one request of every join).

        :raises ZkError: on I/O failure (the event is redelivered).
        """
        c = self.c
        group, me = c.config.group, c.consumer_id
        if self.ack_session != c.zk.session_id:
            with contextlib.suppress(NodeExistsError):
                c.zk.create(paths.ack(group, me), b"", makepath=True)
            self.ack_session = c.zk.session_id
        path = paths.assignment(group, me)
        # One watcher object for both reads (kazoo keeps one per path and callback): one fire per change.
        watch = OneShot(self._fired, path)
        if not self.seen and c.zk.exists(path, watch=watch) is None:
            return None  # the watch brings its creation
        got, state = c.zk.get_many([path, paths.group_state(group)], watch=self._fired, watched=[path])
        self.seen = got is not None
        if got is None:
            if c.zk.exists(path, watch=watch) is not None:
                c.events.put(("assignment", None))  # created meanwhile: read it
            return None
        name = f"{ASSIGNMENT_NAME}{got[1].mzxid}"
        return Written(name, f"{path}/{name}", got, state)
