"""The region's shared data in ZooKeeper (``/consumers/groups/<g>/region``; ``docs/regions.md``): the region id, the
members taking part, the partitions' control variables, the merges, the driver's orders and the members' answers.

Every write is fenced or create-only: the region id and each control variable are created once and never
overwritten (create-if-absent: the loser of a race reads the winner's value); a member writes only its own znodes
(its name under ``members/``, ``acks/``, ``requests/``, ``merges/<seq>/``); the driver writes ``control`` at the
version it read.  Thread: any (the ZooKeeper client is thread-safe); the watches only set events.

:raises ZkError: (every method) ZooKeeper failed; the callers catch it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from zkcoord.errors import BadVersionError, CodecError, NodeExistsError, NoNodeError, NotEmptyError, ZkCoordError
from zkcoord.layout import paths
from zkcoord.layout.region import (
    Ack,
    CompletedRecord,
    Contribution,
    ControlOrder,
    Merge,
    RegionRecord,
    ResetRequest,
    merge,
)
from zkcoord.layout.znodes import decode_int, encode_int
from zkcoord.zk import ZkClient

TopicPartitionKey = tuple[str, int]


def _setter(event: threading.Event) -> Callable[[Any], None]:
    """A one-shot watch that only sets ``event`` (kazoo's thread: never a call to ZooKeeper)."""
    return lambda _e: event.set()


class RegionMismatchError(ZkCoordError):
    """This member's region is not the group's: every member of a group is in the group's one region."""

    def __init__(self, group: str, group_region: str, region: str) -> None:
        super().__init__(
            f"group {group!r} belongs to consistent region {group_region!r}; this member is in region {region!r}: "
            "all members of a group must be in the same region"
        )
        self.group_region = group_region


class MemberNameInUseError(ZkCoordError):
    """Another live member of the region has this member's name."""


class MergeTimeoutError(ZkCoordError):
    """The merge of a checkpoint did not complete (N distinct contributions) within the wait."""

    retriable = True


class SharedData:
    def __init__(self, zk: ZkClient, group: str, region: str, member: str) -> None:
        self.zk = zk
        self.group = group
        self.region = region
        self.member = member

    # --- joining ------------------------------------------------------------------------------------------------

    def check_region(self) -> None:
        """Record our region as the group's if it has none yet, else compare.  :raises RegionMismatchError:"""
        root = paths.region_root(self.group)
        try:
            self.zk.create(root, RegionRecord(self.region).encode(), makepath=True)
        except NodeExistsError:
            pass
        else:
            return
        data, _ = self.zk.get(root)
        theirs = RegionRecord.decode(data, root).region
        if theirs != self.region:
            raise RegionMismatchError(self.group, theirs, self.region)

    def join(self, consumer_id: str, wait_s: float) -> list[str]:
        """Check the region, then take our name under ``members/`` (ephemeral), waiting up to ``wait_s`` for a
        previous session of ours to expire.  Returns the members' names.

        :raises RegionMismatchError: :raises MemberNameInUseError: :raises CodecError: the region znode is corrupt.
        """
        self.check_region()
        self.ensure_tree()
        path = paths.region_member(self.group, self.member)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.zk.create(path, consumer_id.encode(), ephemeral=True)
                return self.members()
            except NodeExistsError:
                if time.monotonic() >= deadline:
                    holder = self._read_text(path)
                    raise MemberNameInUseError(
                        f"member name {self.member!r} of region {self.region!r} is in use by {holder!r}: "
                        "choose another --member-name, or wait until that member's session expires"
                    ) from None
                gone = threading.Event()
                if self.zk.exists(path, watch=_setter(gone)) is not None:
                    gone.wait(max(0.0, min(1.0, deadline - time.monotonic())))

    def ensure_tree(self) -> None:
        """The region's containers (after :meth:`check_region`); idempotent."""
        for parent in ("members", "acks", "requests", "merges", "initial"):
            self.zk.ensure_path(f"{paths.region_root(self.group)}/{parent}")

    def leave(self) -> None:
        with contextlib.suppress(NoNodeError):
            self.zk.delete(paths.region_member(self.group, self.member))

    def members(self) -> list[str]:
        return sorted(self.zk.get_children(paths.region_members(self.group)))

    def _read_text(self, path: str) -> str:
        try:
            return self.zk.get(path)[0].decode("utf-8", "replace")
        except NoNodeError:
            return ""

    # --- control variables --------------------------------------------------------------------------------------

    def initial(self, tp: TopicPartitionKey) -> int | None:
        path = paths.region_initial(self.group, *tp)
        try:
            data, _ = self.zk.get(path)
        except NoNodeError:
            return None
        return decode_int("region control variable", data, path)

    def initial_or_create(self, tp: TopicPartitionKey, compute: Callable[[], int]) -> int:
        """The partition's control variable; absent, created with ``compute()`` (create-if-absent: if another member
        created it first, theirs counts)."""
        found = self.initial(tp)
        if found is not None:
            return found
        path = paths.region_initial(self.group, *tp)
        value = compute()
        try:
            self.zk.create(path, encode_int(value), makepath=True)
        except NodeExistsError:
            data, _ = self.zk.get(path)
            return decode_int("region control variable", data, path)
        return value

    # --- merges ---------------------------------------------------------------------------------------------------

    def contribute(self, contribution: Contribution) -> None:
        """Write our contribution to checkpoint ``seq``'s merge (replacing ours for the same seq)."""
        path = paths.region_contribution(self.group, contribution.seq, contribution.member)
        try:
            self.zk.create(path, contribution.encode(), makepath=True)
        except NodeExistsError:
            self.zk.set(path, contribution.encode())  # our own znode: nobody else writes it

    def read_merge(self, seq: int, watch: Callable[[Any], None] | None = None) -> Merge:
        """The merge of ``seq`` as it stands (unreadable contributions are left out: they cannot complete it).  The
        watch, if given, is on its contributions: a new one, one deleted, and one rewritten in place."""
        root = paths.region_merge(self.group, seq)
        try:
            names = self.zk.get_children(root, watch=watch)
            root_stat = self.zk.exists(root)
        except NoNodeError:
            root_stat = None
        if root_stat is None:
            if watch is not None and self.zk.exists(root, watch=watch) is not None:
                return self.read_merge(seq, watch)  # created meanwhile
            return merge(seq, [])
        found: list[Contribution] = []
        for name in names:
            path = paths.region_contribution(self.group, seq, name)
            try:
                found.append(Contribution.decode(self.zk.get(path, watch=watch)[0], path))
            except (NoNodeError, CodecError):
                continue
        return merge(seq, found, self.controlled_before(root_stat.czxid))

    def controlled_before(self, zxid: int) -> set[TopicPartitionKey]:
        """The partitions whose control variable was created before ``zxid`` (the merge's first contribution): a
        merge must cover them.  A partition first seen later (added at runtime) is not in the checkpoint's states,
        so its control variable is its right position in a reset to it."""
        out: set[TopicPartitionKey] = set()
        root = f"{paths.region_root(self.group)}/initial"
        try:
            topics = self.zk.get_children(root)
        except NoNodeError:
            return out
        for topic in topics:
            try:
                partitions = self.zk.get_children(f"{root}/{topic}")
            except NoNodeError:
                continue
            for part in partitions:
                stat = self.zk.exists(paths.region_initial(self.group, topic, int(part))) if part.isdigit() else None
                if stat is not None and stat.czxid < zxid:
                    out.add((topic, int(part)))
        return out

    def wait_merge(self, seq: int, timeout_s: float) -> Merge:
        """Wait until checkpoint ``seq``'s merge is complete, notified by a watch on its contributions (not by
        polling).  :raises MergeTimeoutError: not complete within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            changed = threading.Event()
            found = self.read_merge(seq, watch=_setter(changed))
            if found.complete:
                return found
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not changed.wait(remaining):
                conflicts = f"; conflicting partitions {found.conflicts}" if found.conflicts else ""
                raise MergeTimeoutError(
                    f"the merge of checkpoint {seq} is not complete after {timeout_s:.1f} s "
                    f"({len(found.offsets)} partitions so far{conflicts})"
                )

    def retire(self, seq: int) -> None:
        """Remove checkpoint ``seq``'s merge (its contributions first).  Idempotent."""
        root = paths.region_merge(self.group, seq)
        try:
            names = self.zk.get_children(root)
        except NoNodeError:
            return
        for name in names:
            with contextlib.suppress(NoNodeError):
                self.zk.delete(f"{root}/{name}")
        # NotEmpty: a contribution written meanwhile (a late member): the next retire removes it
        with contextlib.suppress(NoNodeError, NotEmptyError):
            self.zk.delete(root)

    def merge_seqs(self) -> list[int]:
        try:
            return sorted(int(s) for s in self.zk.get_children(paths.region_merges(self.group)) if s.isdigit())
        except NoNodeError:
            return []

    # --- orders, answers, requests -------------------------------------------------------------------------------

    def order(self, watch: Callable[[Any], None] | None = None) -> tuple[ControlOrder | None, int]:
        """The driver's last order and the control znode's version (``None, -1``: none yet).  :raises CodecError:"""
        path = paths.region_control(self.group)
        try:
            data, stat = self.zk.get(path, watch=watch)
        except NoNodeError:
            if watch is not None and self.zk.exists(path, watch=watch) is not None:
                return self.order(watch)
            return None, -1
        return ControlOrder.decode(data, path), stat.version

    def put_order(self, order: ControlOrder, version: int, completed_version: int | None = None) -> int:
        """Write the driver's order at ``version`` (-1: the control znode must not exist yet), in a transaction that
        checks ``completed`` is still at ``completed_version`` (when given).  Returns the new version.

        :raises BadVersionError: another driver wrote since we read (we are stale)."""
        path = paths.region_control(self.group)
        txn = self.zk.transaction()
        if completed_version is not None:
            txn.check(paths.region_completed(self.group), completed_version)
        if version < 0:
            txn.create(path, order.encode())
        else:
            txn.set_data(path, order.encode(), version)
        try:
            results = txn.commit()
        except (NodeExistsError, NoNodeError) as e:
            raise BadVersionError(f"{path}: written by another driver: {e}") from e
        return 0 if version < 0 else int(results[-1].version)

    def completed(self) -> tuple[CompletedRecord | None, int]:
        """The driver's record of the last complete checkpoint and its version (``None, -1``: none).

        :raises CodecError:"""
        path = paths.region_completed(self.group)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            return None, -1
        return CompletedRecord.decode(data, path), stat.version

    def ensure_completed(self, epoch: int) -> None:
        """Create ``completed`` (no checkpoint yet) if absent, so every driver write can check its version."""
        with contextlib.suppress(NodeExistsError):
            self.zk.create(paths.region_completed(self.group), CompletedRecord(epoch, None, ()).encode())

    def put_completed(self, record: CompletedRecord, version: int, control_version: int) -> int:
        """Record a complete checkpoint at ``version``, in a transaction that checks ``control`` is still at
        ``control_version`` (this driver's last order).  Returns the new version.

        :raises BadVersionError: another driver wrote either since we read (we are stale)."""
        txn = self.zk.transaction()
        txn.check(paths.region_control(self.group), control_version)
        txn.set_data(paths.region_completed(self.group), record.encode(), version)
        try:
            results = txn.commit()
        except NoNodeError as e:
            raise BadVersionError(f"{paths.region_completed(self.group)}: {e}") from e
        return int(results[-1].version)

    def ack(self, answer: Ack) -> None:
        path = paths.region_ack(self.group, self.member)
        try:
            self.zk.set(path, answer.encode())
        except NoNodeError:
            self.zk.create(path, answer.encode(), makepath=True)

    def acks(self, names: list[str]) -> dict[str, Ack]:
        out: dict[str, Ack] = {}
        for name in names:
            path = paths.region_ack(self.group, name)
            try:
                out[name] = Ack.decode(self.zk.get(path)[0], path)
            except (NoNodeError, CodecError):
                continue
        return out

    def request_reset(self, request: ResetRequest) -> None:
        """Replace our request (deleted and created again: the driver's children watch sees every request)."""
        path = paths.region_request(self.group, self.member)
        with contextlib.suppress(NoNodeError):
            self.zk.delete(path)
        self.zk.create(path, request.encode(), makepath=True)

    def requests(self, watch: Callable[[Any], None] | None = None) -> dict[str, ResetRequest]:
        out: dict[str, ResetRequest] = {}
        try:
            names = self.zk.get_children(paths.region_requests(self.group), watch=watch)
        except NoNodeError:
            return out
        for name in names:
            path = paths.region_request(self.group, name)
            try:
                out[name] = ResetRequest.decode(self.zk.get(path)[0], path)
            except (NoNodeError, CodecError):
                continue
        return out
