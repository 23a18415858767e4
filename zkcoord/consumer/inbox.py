"""Which of the commands in a consumer's channel it applies: each one read, decoded and judged before anything is
done with it.

A command is applied only if it is well formed, addressed to this group and to our current registration, not older
than the newest ``(epoch, generation)`` applied (:class:`zkcoord.consumer.vouch.Admission`, S5) and written by a
coordinator (its group's state vouches for it: :func:`zkcoord.consumer.vouch.vouch`).  Anything else is refused:
journalled (``command.rejected``) and deleted, because the channel is a queue and a refusal is an answer.  Deleting a
command is what the coordinator takes for an acknowledgement, so a refusal must never answer a stop that was meant for
us: a command addressed to a registration that is not our current one first makes us look at our registration
(:func:`zkcoord.consumer.registration.check_registration`), which stops us and registers us again if ours was replaced.

A command the group's state cannot vouch for yet (the state is absent or unreadable) is left in the channel, neither
applied nor acknowledged, and looked at again shortly.  Command thread.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from zkcoord.consumer.core import ConsumerCore
from zkcoord.consumer.handler_state import HandlerState
from zkcoord.consumer.records import TopicPartition
from zkcoord.consumer.registration import check_registration
from zkcoord.consumer.vouch import beyond_target, vouch
from zkcoord.errors import CodecError
from zkcoord.layout import paths
from zkcoord.layout.commands import ASSIGNMENT_NAME, Command, command_sequence
from zkcoord.zk import Stat

log = logging.getLogger(__name__)


class Wait:
    """The type of :data:`WAIT`."""


#: :func:`admit`'s answer for a command that cannot be judged yet
WAIT: Final = Wait()


@dataclass(frozen=True, slots=True)
class Admitted:
    """A command to apply, with what its group's state vouched for (:class:`zkcoord.consumer.vouch.Vouch`)."""

    command: Command
    #: the partitions, with their threads, that the state's target gives us at the command's own generation: the
    #: only ones whose owner znodes the start's claims may repair (empty when the state has moved on, or unsafe)
    vouched: dict[TopicPartition, str]


def admit(handler: HandlerState, name: str, path: str) -> Admitted | Wait | None:
    """Read command ``name`` (at ``path``) and judge it: the command to apply; None if it is gone, or was refused
    and acknowledged; :data:`WAIT` if its group's state cannot vouch for it yet (then the channel is listed again
    shortly).

    :raises ZkError: on I/O failure (nothing was decided; the channel is listed again).
    """
    c = handler.c
    if not name.startswith(paths.COMMAND_PREFIX) or command_sequence(name) < 0:
        # Not a command at all: refuse it, and delete it so the channel stays a queue of commands.
        _refuse(handler, name, path, None, "not a command znode", kind="malformed")
        return None
    state_path = paths.group_state(c.config.group)
    got, state = c.zk.get_many([path, state_path])  # one round trip: the state vouches (zkcoord.consumer.vouch)
    if got is None:
        return None
    return judge(handler, name, path, got, state)


def judge(
    handler: HandlerState,
    name: str,
    path: str,
    got: tuple[bytes, Stat],
    state: tuple[bytes, Stat] | None,
    *,
    rewritten: bool = False,
) -> Admitted | Wait | None:
    """:func:`admit`'s verdict on a command read (``got``) with its group's state: also the consumer protocol's
    assignment znode's (``rewritten``: :func:`zkcoord.consumer.vouch.vouch`), whose ``path`` is
    ``assignment/<c>/<name>`` (:mod:`zkcoord.consumer.assignment`)."""
    c = handler.c
    state_path = paths.group_state(c.config.group)
    try:
        command = Command.decode(got[0], path)
    except CodecError as e:
        _refuse(handler, name, path, None, f"malformed: {e.reason}", kind="malformed")
        return None
    if command.incarnation is not None and command.incarnation != c.incarnation:
        check_registration(handler)  # see the module's docstring
        if c.incarnation is None and not handler.lost:
            # Not registered under a live session (another process holds our id, or registering failed): this
            # command may be another registration's at our id (it reads this channel too).  Leave it.
            _wait(handler, name, "meant for the registration of another process with our id")
            return WAIT
    judged = handler.admission.judge(command, c.incarnation)
    kind, reason = judged if judged is not None else ("", None)
    vouched: dict[TopicPartition, str] = {}
    if not c.config.unsafe_no_fencing:
        verdict = vouch(command, got[1], state, state_path, rewritten=rewritten)
        if reason is None and verdict.wait is not None:
            _wait(handler, name, verdict.wait)
            return WAIT
        if reason is None and verdict.refused is not None:
            kind, reason = "forged", verdict.refused
        if verdict.target is not None:
            beyond = beyond_target(command, verdict.target)
            if beyond and reason is None:
                kind = "forged"
                reason = f"forged: gives {', '.join(beyond[:3])} beyond the group's target at its generation"
            prefix = f"{c.consumer_id}-"
            vouched = {
                TopicPartition(t, p): th
                for t, parts in verdict.target.items()
                for p, th in parts.items()
                if th.startswith(prefix)
            }
    if reason is not None:
        _refuse(handler, name, path, command, reason, kind=kind)
        return None
    return Admitted(command, vouched)


def reject(c: ConsumerCore, name: str, command: Command | None, reason: str, kind: str) -> None:
    """Journal, log and count that command ``name`` is refused (the caller acknowledges it); ``kind`` is the
    metrics' reason (:data:`zkcoord.consumer.metrics.REFUSALS`)."""
    c.stats.refused(kind)
    fields: dict[str, object] = {}
    if command is not None:
        fields = {"option": command.option.value, "epoch": command.epoch, "generation": command.generation}
    c.journal.emit("command.rejected", group=c.config.group, consumer=c.consumer_id, name=name, reason=reason, **fields)
    log.warning("consumer %s: refused command %s: %s", c.consumer_id, name, reason)


def _refuse(handler: HandlerState, name: str, path: str, command: Command | None, reason: str, *, kind: str) -> None:
    reject(handler.c, name, command, reason, kind)
    handler.refuse(name)
    handler.ack(path, name)


def _wait(handler: HandlerState, name: str, why: str) -> None:
    if name not in handler.waiting:
        handler.waiting.add(name)
        handler.c.journal.emit("input.rejected", what="command not vouched for yet", path=name, reason=why)
    handler.c.redeliver_later(("assignment" if name.startswith(ASSIGNMENT_NAME) else "channel", None), delay=0.5)
