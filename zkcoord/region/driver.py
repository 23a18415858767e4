"""The region driver: the seed's control plane for the demo (``docs/regions.md``, "Driver").

It decides when the members drain and checkpoint, and resets the region when it must: when a member asks (a
revocation after fetching, a restart, a failed order) or when the membership changes (a member gone, back, or new).
It talks to the members through ZooKeeper only: one order at a time in ``/region/control`` (written at the version it
read, so a second driver or a stale one is refused: :class:`DriverFencedError`), answers in ``acks/<name>``.

A checkpoint ``seq`` is *complete* when every member it named answered it ``ok``, its merge holds their N distinct
contributions with no partition twice and every partition with a control variable covered, and no reset was
requested after the order.  The driver records it in ``/region/completed`` (at the version read, in a transaction
that checks ``control``'s: fenced as the orders are) before anything else: a driver that takes over resets to the
checkpoint recorded there, never to one it infers from the merges.  Only a complete checkpoint is ever reset to
(``region.completed``); the one before it is retired (a member's retire removes its local copies up to it), and a
checkpoint that did not complete has its merge removed at once (``region.incomplete``).  A checkpoint is
ordered only while every expected member and every member of the last complete checkpoint is present and no reset is
pending.

Thread: the caller's (:meth:`run` until ``stop`` is set); watches only set an event.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from zkcoord.errors import BadVersionError, NoNodeError, ZkCoordError, ZkError
from zkcoord.layout import paths
from zkcoord.layout.region import Ack, CompletedRecord, ControlOrder, Op
from zkcoord.region.shared import SharedData
from zkcoord.runtime.journal import Journal
from zkcoord.zk import ZkClient


class DriverFencedError(ZkCoordError):
    """Another driver wrote an order since this one read the control znode: this one stops."""


class RegionDriver:
    def __init__(
        self,
        zk: ZkClient,
        group: str,
        region: str,
        expected: list[str],
        *,
        interval_s: float = 2.0,
        order_timeout_s: float = 20.0,
        journal: Journal | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.zk = zk
        self.group = group
        self.region = region
        self.expected = sorted(set(expected))
        self.interval_s = interval_s
        self.order_timeout_s = order_timeout_s
        self.journal = journal or Journal(None, "driver")
        self.clock = clock
        self.shared = SharedData(zk, group, region, "driver")
        self.epoch = 0
        self.next_id = 1
        self.version = -1
        self.completed_version = -1
        self.next_seq = 1
        self.last_complete: int | None = None
        self.last_reset: int | None = None  # id of the last reset every member it named carried out
        self.seen: dict[str, str] = {}  # member -> consumer id, at the last reset
        self.completed: list[int] = []
        #: the members of the last complete checkpoint: each holds state counted in it, so no checkpoint is ordered
        #: without every one of them (a reset without one hands its partitions to the others from that checkpoint's
        #: offsets, and its counts below them are in no one else's state)
        self.last_members: tuple[str, ...] = ()
        self._wake = threading.Event()
        self._next_checkpoint = 0.0

    # --- taking over ----------------------------------------------------------------------------------------------

    def take_over(self) -> None:
        """Read the last order, the recorded complete checkpoint and the merges: continue the id sequence with a
        higher epoch and the seq sequence after every merge; the last complete checkpoint is the one ``completed``
        records (none: the initial state); every other merge is of a checkpoint that never completed, and is
        removed.  :raises ZkError:"""
        self.shared.check_region()
        self.shared.ensure_tree()
        order, self.version = self.shared.order()
        if order is not None:
            self.epoch, self.next_id = order.epoch + 1, order.id + 1
            self.next_seq = max(self.next_seq, (order.seq or 0) + 1)
        else:
            self.epoch = 1
        self.shared.ensure_completed(self.epoch)
        done, self.completed_version = self.shared.completed()
        self.last_complete = None if done is None else done.seq
        self.last_members = () if done is None or done.seq is None else done.members
        seqs = self.shared.merge_seqs()
        if seqs:
            self.next_seq = max(self.next_seq, seqs[-1] + 1)
        for seq in seqs:
            if seq != self.last_complete:
                self.shared.retire(seq)

    # --- the loop -------------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Drive until ``stop`` is set.  :raises DriverFencedError: :raises ZkError: ZooKeeper failed for good."""
        self.take_over()
        while not stop.is_set():
            self._wake.clear()
            self.step()
            self._wake.wait(max(0.05, min(self.interval_s, self._next_checkpoint - self.clock())))

    def step(self) -> str | None:
        """One decision: a reset if one is needed, else a checkpoint if one is due.  Returns the op ordered.

        Every member present under ``members/`` is driven, named in ``--members`` or not (one that is not takes
        partitions like any other: left undriven, its contribution would be missing from every merge); the expected
        names are those a checkpoint waits for."""
        live = self._live()
        present = sorted(live)
        if not present:
            return None
        changed = any(self.seen.get(m) != live[m] for m in present) or set(self.seen) - set(live)
        requested = [r for r in self.shared.requests(watch=self._watch()).values() if r.after >= (self.last_reset or 0)]
        if self.last_reset is None or changed or requested:
            order = self.order("reset", self.reset_target(), present)
            if self._all_ok(order):
                self.last_reset, self.seen = order.id, {m: live[m] for m in present}
            self._next_checkpoint = self.clock() + self.interval_s
            return "reset"
        if any(m not in live for m in {*self.expected, *self.last_members}) or self.clock() < self._next_checkpoint:
            return None
        seq = self.next_seq
        self.next_seq += 1
        order = self.order("checkpoint", seq, present)
        self._next_checkpoint = self.clock() + self.interval_s
        ok = self._all_ok(order)
        late = [r for r in self.shared.requests().values() if r.after >= (self.last_reset or 0)]
        merged = self.shared.read_merge(seq)
        if ok and not late and merged.complete and set(merged_members(self, seq)) == set(present):
            self.record_completed(seq, present)
            self.journal.emit("region.completed", group=self.group, region=self.region, checkpoint=seq, members=present)
            previous, self.last_complete, self.last_members = self.last_complete, seq, tuple(present)
            self.completed.append(seq)
            if previous is not None:
                self._all_ok(self.order("retire", previous, present))
        else:  # never reset to: its merge goes now, the members' local copies with the next retire (it sweeps)
            why = "not every member answered ok" if not ok else "a reset was requested" if late else merged.why_not()
            self.journal.emit(
                "region.incomplete", group=self.group, region=self.region, checkpoint=seq, reason=why or "other members"
            )
            self.shared.retire(seq)
        return "checkpoint"

    def record_completed(self, seq: int, members: list[str]) -> None:
        """``completed`` := seq, at the version read, checking ``control`` is still at our last order.

        :raises DriverFencedError:"""
        record = CompletedRecord(self.epoch, seq, tuple(members))
        try:
            self.completed_version = self.shared.put_completed(record, self.completed_version, self.version)
        except BadVersionError as e:
            raise DriverFencedError(f"region {self.region!r}: another driver wrote meanwhile: {e}") from e

    def reset_target(self) -> int | None:
        """The last complete checkpoint if its merge is still usable (complete and covering every partition that had
        a control variable when it was taken), else the initial state (``region.unusable`` says why): the older
        complete checkpoints are retired."""
        seq = self.last_complete
        if seq is None:
            return None
        merged = self.shared.read_merge(seq)
        if merged.complete:
            return seq
        self.journal.emit(
            "region.unusable", group=self.group, region=self.region, checkpoint=seq, reason=merged.why_not()
        )
        self.last_complete, self.last_members = None, ()
        return None

    # --- orders ---------------------------------------------------------------------------------------------------

    def order(self, op: Op, seq: int | None, members: list[str]) -> ControlOrder:
        """Write one order at the version read.  :raises DriverFencedError:"""
        order = ControlOrder(self.epoch, self.next_id, op, seq, tuple(members))
        try:
            self.version = self.shared.put_order(order, self.version, self.completed_version)
        except BadVersionError as e:
            raise DriverFencedError(f"region {self.region!r}: another driver wrote an order: {e}") from e
        self.next_id += 1
        self.journal.emit(
            "region.order", group=self.group, region=self.region, epoch=order.epoch, id=order.id, op=op, checkpoint=seq,
            members=members,
        )  # fmt: skip
        return order

    def _all_ok(self, order: ControlOrder) -> bool:
        """Wait (watches on the answers and the members, at most ``order_timeout_s``) until every member named
        answered ``order``; whether all did with ``ok`` (False at once when one of them is gone)."""
        deadline = self.clock() + self.order_timeout_s
        while True:
            changed = threading.Event()
            live = self.zk.get_children(paths.region_members(self.group), watch=_setter(changed))
            if any(m not in live for m in order.members):
                self._wake.set()  # a member it named is gone: no answer will come; the next step resets
                return False
            acks = self._answers(list(order.members), changed)
            if all(a.id >= order.id for a in acks.values()) and len(acks) == len(order.members):
                return all(a.ok and a.id == order.id for a in acks.values())
            remaining = deadline - self.clock()
            if remaining <= 0:
                return False
            changed.wait(min(remaining, 1.0))  # 1 s: a member whose session ended answers nothing, look again

    def _answers(self, names: list[str], changed: threading.Event) -> dict[str, Ack]:
        out: dict[str, Ack] = {}
        for name in names:
            path = paths.region_ack(self.group, name)
            try:
                data, _ = self.zk.get(path, watch=lambda _e: changed.set())
            except NoNodeError:
                self.zk.exists(path, watch=lambda _e: changed.set())
                continue
            try:
                out[name] = Ack.decode(data, path)
            except ZkCoordError:
                continue
        return out

    def _live(self) -> dict[str, str]:
        """Present members -> their consumer ids (a restart changes it); a watch on the names wakes the loop."""
        out: dict[str, str] = {}
        names = self.zk.get_children(paths.region_members(self.group), watch=self._watch())
        for name in names:
            try:
                out[name] = self.zk.get(paths.region_member(self.group, name))[0].decode("utf-8", "replace")
            except ZkError:
                continue
        return out

    def _watch(self) -> Callable[[Any], None]:
        return lambda _e: self._wake.set()


def _setter(event: threading.Event) -> Callable[[Any], None]:
    """A one-shot watch that only sets ``event`` (kazoo's thread)."""
    return lambda _e: event.set()


def merged_members(driver: RegionDriver, seq: int) -> list[str]:
    """The names whose contributions make up checkpoint ``seq``'s merge."""
    try:
        return driver.zk.get_children(paths.region_merge(driver.group, seq))
    except NoNodeError:
        return []
