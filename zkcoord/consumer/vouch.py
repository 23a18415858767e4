"""Whether a command in a consumer's channel was written by a coordinator: its group's state vouches for it.

Anyone who can write to ZooKeeper can write a command that is valid in form.  Epochs and generations only grow, so
a consumer that applied a forged command of a future epoch or generation would refuse every real command after it
as stale -- and acknowledge them (a refused command is deleted), so the coordinator would take its stops as done
while it still fetched (S2); a forged stop at the current generation would leave its partitions unfetched in a
STABLE group (S3).  The rule that tells them apart costs one read, pipelined with the command's own:

every command is created in a transaction that also writes its group's state with the command's epoch and
generation (``zkcoord/coordinator/commands.py``), and the state's epoch and generation only grow.  So a command that
a coordinator wrote was created no later than the state's last write (its ``czxid`` is at most the state's
``mzxid``), under an epoch and a generation no higher than the state's.  A command that fails either was not written
by a coordinator: it is refused (acknowledged, journalled) and its epoch and generation are not adopted.

A forger who writes a command at the current epoch and generation before the state's next write passes both checks
once that write lands.  While the state is still at the command's own epoch and generation, its target says what
that generation installs: a start-fetcher naming a partition the target does not give that thread is refused
(:func:`beyond_target`), and only the partitions the target vouches for may have their owner znodes repaired by the
start's claims (``zkcoord.consumer.offsets``).

When the state is absent or unreadable nothing can vouch for the command yet: it is left in the channel, neither
applied nor acknowledged (the coordinator, waiting for it, times out and retries, which writes the state again), and
looked at again shortly.  Pure; the caller does the reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from zkcoord.errors import CodecError
from zkcoord.layout.commands import Command
from zkcoord.layout.group_state import GroupState
from zkcoord.zk import Stat


@dataclass(frozen=True, slots=True)
class Vouch:
    #: why the command was not written by a coordinator (refuse it), or None
    refused: str | None = None
    #: why it cannot be judged yet (leave it in the channel, look again shortly), or None
    wait: str | None = None
    #: the group state's target (topic -> partition -> thread) when the state is at the command's own epoch and
    #: generation: what the coordinator was installing when it wrote the command (a start must not name more);
    #: None when the state has moved on since
    target: Mapping[str, Mapping[int, str]] | None = None


def vouch(
    command: Command, created: Stat, state: tuple[bytes, Stat] | None, state_path: str, *, rewritten: bool = False
) -> Vouch:
    """Judge ``command`` (created with stat ``created``) against its group's ``state`` as read after it.
    ``rewritten``: the command is a consumer-protocol assignment, rewritten in place: its last write (``mzxid``),
    not its creation, is what a coordinator's transaction wrote with the state."""
    if state is None:
        return Vouch(wait="the group has no state to vouch for it")
    data, stat = state
    try:
        current = GroupState.decode(data, state_path)
    except CodecError as e:
        return Vouch(wait=f"the group's state is unreadable ({e.reason})")
    if (created.mzxid if rewritten else created.czxid) > stat.mzxid:
        return Vouch(refused="forged: written after the group's state, by no coordinator")
    if command.epoch > current.epoch:
        return Vouch(refused=f"forged: coordinator epoch {command.epoch} > the group state's {current.epoch}")
    if command.generation > current.generation:
        return Vouch(refused=f"forged: generation {command.generation} > the group state's {current.generation}")
    if (command.epoch, command.generation) == (current.epoch, current.generation):
        return Vouch(target=current.target)
    return Vouch()


def beyond_target(command: Command, target: Mapping[str, Mapping[int, str]]) -> list[str]:
    """The partitions ``command`` gives a thread the vouching state's ``target`` does not give it (``topic/p``).  A
    coordinator's start names only its generation's target, so a start that names more was not written by one."""
    return [
        f"{topic}/{p}"
        for topic, parts in sorted(command.ownership.items())
        for p, thread in sorted(parts.items())
        if target.get(topic, {}).get(p) != thread
    ]


class Admission:
    """Which commands a consumer applies (S5): refusals by group, by the newest ``(epoch, generation)`` applied, and by
    registration.  Owned by the consumer's command thread; nothing here blocks or raises.

    Commands are ordered by ``(epoch, generation)``: epochs only grow, and generations are ordered within an epoch.
    A newer coordinator's generations are newer whatever their number: its group state may have been lost and its
    count restarted, and the older coordinator can write nothing any more (it is fenced, S1).
    """

    def __init__(self, group: str, *, unsafe: bool = False) -> None:
        self.group = group
        self.unsafe = unsafe
        #: the newest coordinator epoch and group generation of a command applied (-1: none yet)
        self.epoch = -1
        self.generation = -1

    def refusal(self, command: Command, incarnation: int | None) -> str | None:
        """Why ``command`` must not be applied by the registration ``incarnation`` (its czxid), or None."""
        judged = self.judge(command, incarnation)
        return None if judged is None else judged[1]

    def judge(self, command: Command, incarnation: int | None) -> tuple[str, str] | None:
        """As :meth:`refusal`, with the kind of refusal first: ``misaddressed`` or ``stale`` (the metrics'
        reasons, :data:`zkcoord.consumer.metrics.REFUSALS`)."""
        if command.group != self.group:
            return "misaddressed", f"addressed to group {command.group!r}"
        if self.unsafe:
            return None
        if command.epoch < self.epoch:
            return "stale", f"stale: coordinator epoch {command.epoch} < {self.epoch}"
        if command.epoch == self.epoch and command.generation < self.generation:
            return "stale", f"stale: generation {command.generation} < {self.generation}"
        if command.incarnation is not None and command.incarnation != incarnation:
            # Planned for a registration of ours that a session loss ended (or before we registered again).
            ours = "none yet" if incarnation is None else incarnation
            return "misaddressed", f"addressed to registration {command.incarnation}, ours is {ours}"
        return None

    def adopt(self, command: Command) -> None:
        """Record ``command`` as applied: later commands must be at least as new."""
        if command.epoch > self.epoch:
            self.epoch, self.generation = command.epoch, command.generation
        else:
            self.generation = max(self.generation, command.generation)
