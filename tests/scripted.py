"""A scripted consumer for coordinator tests: registers, obeys its channel in sequence order, records everything.

It is a real ZooKeeper client (no mock): it creates its member znode, watches its channel and acknowledges commands
(deleted and recorded in the channel, in one transaction: :mod:`zkcoord.consumer.acks`), exactly as the real consumer
does.  Tests choose its behaviour: acknowledge (the default), never acknowledge (a stuck member), acknowledge stops
only after a delay (an application finishing its batch and its revoke callback first, as the consumer's contract
has it), or reject by rule.  Command handling runs on its own thread; the watch only enqueues.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zkcoord.consumer.acks import acknowledge
from zkcoord.errors import CodecError, NoNodeError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.commands import ASSIGNMENT_NAME, Command, CommandOption
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.layout.registrations import MemberRegistration, Pattern
from zkcoord.zk import ZkClient, ZkConfig


@dataclass
class Seen:
    name: str
    command: Command | None
    error: str = ""
    #: when it was applied, on this process's monotonic clock (to order two members' steps)
    at_ns: int = field(default_factory=time.monotonic_ns)


@dataclass
class ScriptedConsumer:
    hosts: str
    group: str
    subscription: dict[str, int]
    pattern: Pattern = Pattern.STATIC
    ack: bool = True
    session_timeout: float = 4.0
    consumer_id: str = ""
    #: start() connects and watches but does not register; call register() (to join many at the same instant)
    defer_register: bool = False
    #: the poll interval its registration publishes (None: none, as a zk-client-era member)
    max_poll_interval_ms: int | None = None
    #: how long after reading a stop-fetcher it acknowledges it (its application's batch and revoke callback)
    stop_ack_delay_s: float = 0.0
    #: registers ``"protocol": "consumer"`` (KIP-848's consumer protocol)
    consumer_protocol: bool = False
    #: a static member's instance id (consumer protocol; the scripted member does not hold ``instances/<id>``)
    instance_id: str | None = None
    seen: list[Seen] = field(default_factory=list)
    owned: dict[str, dict[int, str]] = field(default_factory=dict)
    fetching: bool = False
    generation: int = -1
    epoch: int = -1

    def __post_init__(self) -> None:
        if not self.consumer_id:
            self.consumer_id = f"{self.group}_test-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        self.zk = ZkClient(ZkConfig.from_string(self.hosts, session_timeout_s=self.session_timeout), name="scripted")
        #: channel listings, and (consumer protocol) writes of the assignment znode as ``(data, mzxid)``
        self._inbox: queue.Queue[list[str] | tuple[bytes, int] | None] = queue.Queue()
        self._done: set[str] = set()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"scripted-{self.consumer_id[-8:]}", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def start(self) -> ScriptedConsumer:
        self.zk.start()
        self.zk.ensure_path(paths.channel(self.group, self.consumer_id))
        if not self.defer_register:
            self.register()
        self._thread.start()
        self.zk.watch_children(paths.channel(self.group, self.consumer_id), self._inbox.put)
        if self.consumer_protocol:  # the consumer protocol's channel: one znode, read through a data watch
            self.zk.watch_data(
                paths.assignment(self.group, self.consumer_id),
                lambda data, stat: None if stat is None else self._inbox.put((data or b"", stat.mzxid)),
            )
        return self

    def register(self) -> None:
        self.zk.ensure_path(paths.group_ids(self.group))
        self.register_async().get(timeout=10)

    def register_async(self) -> Any:
        """Send the member znode's create without waiting (a kazoo async result): many consumers can register in
        one burst of a few milliseconds, as a fleet restarting at once would.  The group's ``ids`` must exist."""
        reg = MemberRegistration(
            self.pattern,
            self.subscription,
            int(time.time() * 1000),
            max_poll_interval_ms=self.max_poll_interval_ms,
            consumer_protocol=self.consumer_protocol,
            instance_id=self.instance_id,
        )
        return self.zk.kazoo.create_async(paths.member(self.group, self.consumer_id), reg.encode(), ephemeral=True)

    def close(self) -> None:
        self._inbox.put(None)
        self.zk.stop()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- command handling (own thread) ---------------------------------------------------------------------------

    def _run(self) -> None:
        while (children := self._inbox.get()) is not None:
            if isinstance(children, tuple):
                self._assignment(*children)
                continue
            for name in sorted(children, key=lambda n: n[-10:]):
                if name in self._done:
                    continue
                path = f"{paths.channel(self.group, self.consumer_id)}/{name}"
                try:
                    data, _ = self.zk.get(path)
                except NoNodeError:
                    continue
                except ZkError:
                    break
                self._done.add(name)
                command = self._apply(name, data)
                if command is not None and command.option is CommandOption.STOP_FETCHER and self.stop_ack_delay_s:
                    time.sleep(self.stop_ack_delay_s)  # the application's batch and its revoke callback
                if self.ack:
                    with contextlib.suppress(ZkError):
                        acknowledge(self.zk, path)

    def _assignment(self, data: bytes, mzxid: int) -> None:
        """A write of the assignment znode: applied, then acknowledged by one write of ``ack/<c>`` naming it, as the
        consumer does (:mod:`zkcoord.consumer.assignment`)."""
        name = f"{ASSIGNMENT_NAME}{mzxid}"
        if name in self._done:
            return
        self._done.add(name)
        command = self._apply(name, data)
        if command is not None and command.option is CommandOption.STOP_FETCHER and self.stop_ack_delay_s:
            time.sleep(self.stop_ack_delay_s)
        if self.ack:
            with contextlib.suppress(ZkError):
                acknowledge(self.zk, f"{paths.assignment(self.group, self.consumer_id)}/{name}")

    def _apply(self, name: str, data: bytes) -> Command | None:
        try:
            cmd = Command.decode(data)
        except CodecError as e:
            with self._changed:
                self.seen.append(Seen(name, None, e.reason))
                self._changed.notify_all()
            return None
        stale = (cmd.epoch, cmd.generation) < (self.epoch, self.generation)
        with self._changed:
            self.seen.append(Seen(name, cmd, "stale" if stale else ""))
            if not stale:
                self.epoch, self.generation = cmd.epoch, cmd.generation
                if cmd.option is CommandOption.STOP_FETCHER and cmd.revoke is not None:
                    # An incremental stop: only the partitions it names.
                    for t, parts in cmd.revoke.items():
                        for p in parts:
                            self.owned.get(t, {}).pop(p, None)
                    self.owned = {t: parts for t, parts in self.owned.items() if parts}
                elif cmd.option is CommandOption.STOP_FETCHER:
                    self.fetching = False
                    self.owned = {}
                else:
                    self.fetching = True
                    self.owned = {t: dict(p) for t, p in cmd.ownership.items()}
            self._changed.notify_all()
        return cmd

    # --- waiting ------------------------------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[ScriptedConsumer], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.consumer_id}: condition not reached in {timeout} s; saw {self.seen}")
                self._changed.wait(left)

    def commands(self, option: CommandOption | None = None) -> list[Command]:
        return [s.command for s in self.seen if s.command and (option is None or s.command.option is option)]

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, parts in self.owned.items() for p in parts}


def write_command(zk: ZkClient, group: str, consumer_id: str, command: Command, name: str | None = None) -> str:
    """Write ``command`` into ``consumer_id``'s channel as a coordinator does, for tests that play the coordinator:
    in one transaction with the group's state, raised to the command's epoch and generation if below them (a consumer
    applies only commands its group's state vouches for: :mod:`zkcoord.consumer.vouch`).  ``name``: the command's name
    before its sequence number (default ``cmd-<epoch>-<generation>-``).  A start's ownership goes into the state's
    target, as the target of a coordinator's generation holds what its starts give.  Returns the command's path."""
    state_path = paths.group_state(group)
    try:
        data, stat = zk.get(state_path)
        old: GroupState | None = GroupState.decode(data, state_path)
    except (NoNodeError, CodecError):
        old, stat = None, None
    state = GroupState(command.generation, GroupPhase.STARTING, command.epoch, {}, {})
    if old is not None:
        state = dataclasses.replace(
            old, epoch=max(old.epoch, command.epoch), generation=max(old.generation, command.generation)
        )
    if command.ownership:  # the target a coordinator installs holds what its starts give (zkcoord.consumer.vouch)
        target = {t: dict(parts) for t, parts in state.target.items()}
        for t, parts in command.ownership.items():
            target.setdefault(t, {}).update(parts)
        state = dataclasses.replace(state, target=target)
    txn = zk.transaction()
    if stat is None:
        txn.create(state_path, state.encode())
    else:
        txn.set_data(state_path, state.encode(), stat.version)
    prefix = name or f"{paths.COMMAND_PREFIX}{command.epoch}-{command.generation}-"
    txn.create(f"{paths.channel(group, consumer_id)}/{prefix}", command.encode(), sequence=True)
    return str(txn.commit()[-1])
