"""Keeping the consumer's own znodes as it wrote them: its registration and its command channel.

Both belong to this consumer's session, and the coordinator depends on both: a registration it cannot decode gets no
partitions (``zkcoord.coordinator.unreadable``), and a channel that vanished leaves the consumer deaf to every
command (the children watch on it ends with it).  Anyone may damage them -- an operator's ``set`` or ``delete``, a
buggy client -- and only this consumer can tell what they should hold, so it repairs them as soon as a watch says
they changed:

* a registration whose data is not what we wrote is written back (conditionally on the version read), as Kafka 0.8's
  consumer re-registers; its incarnation (``czxid``) does not change, so no command is invalidated;
* a registration deleted while our session lives makes the coordinator count us as gone, and it may give our
  partitions away without a stop (it expects a gone member to have stopped, S6): we stop fetching at once, commit
  (fenced by the owner znodes, so a partition already given away is not moved), and register again as a new
  incarnation, as after a session loss.  Between the deletion and our stop a new owner may already have started:
  this overlap is bounded by the time the two notifications of the one deletion take to be handled;
* a registration at our id that is not ours (its ``czxid`` is not our incarnation: deleted and created again by
  someone else) is the same case: the coordinator addresses its commands to that other registration, which we
  refuse -- so before refusing one we look at our registration, and stop and register again as above before the
  refusal deletes it.  A persistent znode at our id (a consumer's registration is ephemeral) is replaced; an
  ephemeral of another live session means another process runs with our id: we stay stopped and unregistered,
  leave the commands meant for it in the channel, and register once it is gone (never taking the id from a live
  process: the two would take it from each other for ever);
* a deleted channel is created again, and a channel created again (by us or anyone) is watched again.

Each repair is journalled (``registration.repaired``).  Runs on the consumer's command thread -- but for
:func:`register_first`, the registration at ``start()``, on the application's.
"""

from __future__ import annotations

import contextlib
import logging
import threading

from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.handler_state import HandlerState
from zkcoord.consumer.handoff import Change
from zkcoord.errors import BadVersionError, ConsumerIdInUseError, NodeExistsError, NoNodeError, ZkUnavailableError
from zkcoord.layout import paths
from zkcoord.zk import Stat

log = logging.getLogger(__name__)


def check_registration(handler: HandlerState, seen: tuple[bytes | None, Stat | None] | None = None) -> None:
    """Our registration's data watch fired (``seen``: what its read found), or a command came for a registration
    that is not our current one: repair the registration if it is not what we wrote (see the module's docstring).
    What the watch's read found is not read again when it is our registration as we wrote it: the watch was armed
    by that read, so any later change brings another call (issue 16: one request of every join).

    :raises ZkError: on I/O failure (the event is handled again shortly).
    """
    c = handler.c
    if handler.lost or c.registered_data is None or c.zk.session_id != c.registered_session:
        return  # a session loss is handled by registering again
    if seen is not None and _intact(handler, *seen):
        return
    path = paths.member(c.config.group, c.consumer_id)
    try:
        data, stat = c.zk.get(path)
    except NoNodeError:
        register_again(handler, "deleted under a live session")
        return
    if stat.czxid != c.incarnation or stat.ephemeralOwner != c.zk.session_id:
        if c.incarnation is None and stat.ephemeralOwner not in (0, c.zk.session_id):
            return  # still held by another live session (register_again): we register once it is gone
        register_again(handler, "replaced by a registration that is not ours")
        return
    if data == c.registered_data:
        return
    c.zk.set(path, c.registered_data, stat.version)
    _journal(handler, f"overwritten ({len(data)} bytes): written back")


def _intact(handler: HandlerState, data: bytes | None, stat: Stat | None) -> bool:
    """Whether ``data`` and ``stat`` are our current registration, as we wrote it, in our session."""
    c = handler.c
    return (
        stat is not None
        and stat.czxid == c.incarnation
        and stat.ephemeralOwner == c.zk.session_id
        and data == c.registered_data
    )


def register_again(handler: HandlerState, why: str) -> None:
    """Our registration ended while our session lives (deleted, or replaced by someone else's): to the coordinator we
    are gone, or are that other registration, and it may give our partitions away without a stop.  Stop fetching at
    once, commit (fenced by the owner znodes: a partition already given away is not moved), release, end a hand-over's
    wait (nothing handed to the ended registration is started), and register again as a new incarnation (replacing
    a registration that is not ours).  Command thread.

    :raises ZkError: registering failed; we stay stopped and unregistered (``incarnation`` None: every command is
        refused) and the event is handled again shortly.
    """
    c = handler.c
    revoked = set(c.fetcher.assignment())
    c.incarnation = None  # commands for the registration that ended are refused from now on
    handler.abandon_wait()
    if handler.parked is not None:  # a stop for the registration that ended: not finished, its partitions lost too
        revoked.update(c.handoff.cancel(handler.parked))
        handler.parked = None
    positions = c.fetcher.revoke(f"registration {why}")
    # With auto-commit on, what poll() returned (Kafka's auto-commit contract: the application's; a crash in the
    # middle of the batch it is on would lose that batch, a trade kept on this hostile path for no duplicates); with
    # it off, nothing.  Fenced by the owner znodes: a partition the coordinator gave away already is not moved.  What
    # is left uncommitted may be consumed again by the next owner (at least once, as after a session loss): say so, as
    # a session loss does.
    handler.commits.stopped(dict(positions) if c.config.auto_commit else {}, lost=False)
    c.journal.emit("consumer.fenced", group=c.config.group, consumer=c.consumer_id, reason=f"registration {why}")
    handler.release_all(sorted(revoked), Change.LOST)
    try:
        c.register()
    except ConsumerIdInUseError as e:
        # Another process runs with our id.  Stay stopped and unregistered (commands for its registration are
        # left to it: zkcoord.consumer.inbox); its registration's deletion fires our data watch, and we register then.
        if not handler.displaced:
            handler.displaced = True
            _journal(handler, f"{why}: stopped; not registered again: {e}")
        return
    handler.displaced = False
    handler.wait_abandoned()
    _journal(handler, f"{why}: stopped, committed, registered again")


def check_channel(handler: HandlerState, czxid: int | None) -> None:
    """Our channel's data watch fired (``czxid``: the channel's, None if it is gone): a channel gone is created
    again, and a channel that is not the one whose children we watch (created again, by us or by anyone) is watched
    again -- a children watch ends for good with the channel it was set on.

    :raises ZkError: on I/O failure (the event is handled again shortly).
    """
    c = handler.c
    if handler.lost:
        return
    path = paths.channel(c.config.group, c.consumer_id)
    if czxid is None:
        c.zk.ensure_path(path)
        stat = c.zk.exists(path)
        if stat is None:
            raise ZkUnavailableError("our channel vanished again as it was created", path)  # handled again shortly
        czxid = stat.czxid
        _journal(handler, "channel deleted: created again")
    if handler.channel_czxid is None:
        handler.channel_czxid = czxid  # the first report: the channel whose children start() watches
    elif czxid != handler.channel_czxid:
        handler.channel_czxid = czxid
        if not c.channel_watched():  # else the watch found the new channel by itself: one watch is enough
            c.watch_channel()


def _journal(handler: HandlerState, reason: str) -> None:
    c = handler.c
    c.journal.emit("registration.repaired", group=c.config.group, consumer=c.consumer_id, reason=reason)
    log.warning("consumer %s: registration repaired: %s", c.consumer_id, reason)


def delete_own(c: ConsumerCore, incarnation: int | None = None) -> bool:
    """Delete our member znode (``incarnation``: that registration of ours, default the current one) -- only our own:
    not a registration another process made at our id while we were not registered; True if it is gone now (deleted,
    or gone with its session already).

    :raises ZkError: on I/O failure.
    """
    if c.zk.role == "member":
        return False  # with ACLs no member may delete in ids/ (docs/security.md): it goes with the session
    path = paths.member(c.config.group, c.consumer_id)
    held = c.zk.exists(path)
    if held is None:
        return True
    if held.ephemeralOwner != c.zk.session_id or held.czxid != (c.incarnation if incarnation is None else incarnation):
        return False
    with contextlib.suppress(NoNodeError, BadVersionError):  # its session ended: gone with it
        c.zk.delete(path, held.version)
    return True


def create_channel(c: ConsumerCore) -> None:
    """Create our command channel at ``start()`` (ours from before a restart is fine): one request, where ensuring
    it is an ``exists``, its parent's, then the ``create`` (issue 16: two requests of every join).

    :raises ZkError: on I/O failure.
    """
    with contextlib.suppress(NodeExistsError):
        c.zk.create(paths.channel(c.config.group, c.consumer_id), makepath=True)


def register_first(c: ConsumerCore) -> None:
    """Register at start.  A live registration at our id may be our own previous process's, killed before its session
    expired: wait that session out (up to the session timeout and a half), woken by a watch on the registration rather
    than by polling, before refusing.  Application thread (``start()``).

    :raises ConsumerIdInUseError: another live session still holds our id (or our instance id:
        :class:`~zkcoord.errors.InstanceIdInUseError`) at the deadline.
    :raises ZkError: on I/O failure.
    """
    path = paths.member(c.config.group, c.consumer_id)
    deadline = c.clock() + c.config.session_timeout_s * 1.5
    changed = threading.Event()  # set by a one-shot watch on the registration (a stale one only loops once more)
    while True:
        try:
            c.register()
        except ConsumerIdInUseError as e:
            changed.clear()  # our id, or our static instance id (e.path), held by another session: watch that znode
            held = c.zk.exists(e.path or path, watch=lambda _event: changed.set())
            if held is not None and not changed.wait(max(0.0, deadline - c.clock())):
                raise
        else:
            return


def watch_own(c: ConsumerCore) -> None:
    """Watch our own registration and channel node: the command thread repairs them if someone damages them
    (:func:`check_registration`, :func:`check_channel`).  The watches only enqueue."""
    c.zk.watch_data(paths.member(c.config.group, c.consumer_id), lambda d, s: c.events.put(("registration", (d, s))))
    c.zk.watch_data(
        paths.channel(c.config.group, c.consumer_id),
        lambda _d, stat: c.events.put(("channel-node", None if stat is None else stat.czxid)),
    )
