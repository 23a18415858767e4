"""Crafted journals for the analysis tests: a clean run, and the same run with violations of known size.

Each process writes ``<run>/journal/<role>.<pid>.jsonl`` with the core fields (v, ts, mono, seq, role, pid, ev), the
way :class:`zkcoord.runtime.journal.Journal` does, but with explicit timestamps so every count below is exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GROUP = "g"
TOPIC = "t"

A = "g_h-1000-0000000a"
B = "g_h-1000-0000000b"
C = "g_h-1000-0000000c"
D = "g_h-1000-0000000d"
E = "g_h-1000-0000000e"


class Proc:
    """One process's journal file."""

    def __init__(self, journal: Path, role: str, pid: int) -> None:
        journal.mkdir(parents=True, exist_ok=True)
        self.path = journal / f"{role}.{pid}.jsonl"
        self.role = role
        self.pid = pid
        self.seq = 0

    def emit(self, ts: int, ev: str, **fields: Any) -> None:
        self.seq += 1
        core = {"v": 1, "ts": ts, "mono": ts * 1_000_000, "seq": self.seq, "role": self.role, "pid": self.pid}
        self.raw(json.dumps({**core, "ev": ev, **fields}) + "\n")

    def raw(self, text: str) -> None:
        with self.path.open("a") as f:
            f.write(text)


class Run:
    """The processes of one run; consumer helpers fill in the group."""

    def __init__(self, run_dir: Path) -> None:
        self.journal = run_dir / "journal"
        self.coord = Proc(self.journal, "broker-1", 101)
        self.producer = Proc(self.journal, "producer", 102)
        self.consumers: dict[str, Proc] = {}

    def consumer(self, cid: str, pid: int) -> Proc:
        if cid not in self.consumers:
            self.consumers[cid] = Proc(self.journal, f"consumer-{cid[-1]}", pid)
        return self.consumers[cid]

    def register(self, ts: int, cid: str, pid: int, topics: dict[str, int], pattern: str = "static") -> Proc:
        p = self.consumer(cid, pid)
        p.emit(ts, "consumer.registered", group=GROUP, consumer=cid, pattern=pattern, subscription=topics,
               session="0x1", registrations=1)  # fmt: skip
        return p

    def produce(self, ts: int, partition: int, first: int, last: int, topic: str = TOPIC) -> None:
        self.producer.emit(ts, "produce.batch", topic=topic, partition=partition, first=first, last=last,
                           count=last - first + 1, bytes=100 * (last - first + 1))  # fmt: skip

    def consumed(self, ts: int, cid: str, partition: int, first: int, last: int, topic: str = TOPIC) -> None:
        self.consumers[cid].emit(ts, "records.consumed", group=GROUP, consumer=cid, thread=f"{cid}-0", topic=topic,
                                 partition=partition, first=first, last=last, count=last - first + 1)  # fmt: skip

    def fetch(self, ts: int, cid: str, partition: int, started: bool, offset: int = 0, topic: str = TOPIC) -> None:
        ev = "fetch.started" if started else "fetch.stopped"
        extra = {} if started else {"reason": "stop-fetcher"}
        self.consumers[cid].emit(ts, ev, group=GROUP, consumer=cid, thread=f"{cid}-0", topic=topic,
                                 partition=partition, offset=offset, generation=1, **extra)  # fmt: skip

    def commit(
        self, ts: int, cid: str, partition: int, offset: int, topic: str = TOPIC, *, auto_commit: bool | None = None
    ) -> None:
        """``offsets.committed``; ``auto_commit`` None leaves the field out (a journal written before it existed)."""
        policy = {} if auto_commit is None else {"auto_commit": auto_commit}
        self.consumers[cid].emit(ts, "offsets.committed", group=GROUP, consumer=cid, topic=topic,
                                 partition=partition, offset=offset, **policy)  # fmt: skip

    def command(self, ts: int, cid: str, option: str, epoch: int, generation: int, *, acked: bool = True) -> None:
        c = self.coord
        c.emit(ts, "command.sent", group=GROUP, consumer=cid, option=option, epoch=epoch, generation=generation,
               partitions=1)  # fmt: skip
        self.consumers[cid].emit(ts + 2, "command.applied", group=GROUP, consumer=cid, name=f"cmd-{epoch}-{generation}",
                                 option=option, epoch=epoch, generation=generation, partitions=1)  # fmt: skip
        if acked:
            c.emit(ts + 4, "command.acked", group=GROUP, consumer=cid, option=option, epoch=epoch,
                   generation=generation, latency_ms=4.0)  # fmt: skip

    def rebalance(self, ts: int, generation: int, members: list[str], epoch: int = 1, *, complete: bool = True) -> None:
        c = self.coord
        c.emit(ts, "rebalance.requested", group=GROUP, trigger="member change")
        c.emit(ts + 1, "rebalance.started", group=GROUP, generation=generation, epoch=epoch, attempt=0,
               trigger="member change", reason="members changed", members=members, partitions=2,
               assignor="range")  # fmt: skip
        if complete:
            c.emit(ts + 20, "rebalance.barrier", group=GROUP, generation=generation, epoch=epoch, stop_ms=10.0)
            c.emit(ts + 40, "rebalance.completed", group=GROUP, generation=generation, epoch=epoch, attempts=1,
                   latency_ms=40.0, stop_ms=10.0, start_ms=20.0, members=len(members), partitions=2,
                   moved=1)  # fmt: skip


def clean_run(run_dir: Path) -> Run:
    """Two partitions of topic t, 100 records each; consumer A alone, then A and B after one rebalance.

    Every record is consumed exactly once, ownership hands over cleanly, one coordinator (epoch 1).
    """
    r = Run(run_dir)
    r.coord.emit(1000, "coordinator.elected", broker=1, epoch=1, session="0x10")
    r.produce(1100, 0, 0, 99)
    r.produce(1100, 1, 0, 99)
    r.register(1200, A, 201, {TOPIC: 1})
    r.rebalance(1210, 1, [A])
    r.command(1215, A, "stop-fetcher", 1, 1)
    r.command(1235, A, "start-fetcher", 1, 1)
    r.fetch(1246, A, 0, True)
    r.fetch(1246, A, 1, True)
    r.consumed(1300, A, 0, 0, 49)
    r.consumed(1300, A, 1, 0, 39)
    r.commit(1400, A, 0, 50)
    r.commit(1400, A, 1, 40)
    r.register(1500, B, 202, {TOPIC: 1})
    r.rebalance(1510, 2, [A, B])
    r.command(1515, A, "stop-fetcher", 1, 2)
    r.command(1515, B, "stop-fetcher", 1, 2)
    r.fetch(1518, A, 0, False, 50)
    r.fetch(1518, A, 1, False, 50)
    r.commit(1518, A, 1, 50)
    # A poll handed 40..49 out at 1517, just before the stop, and its event was written at 1519, just after (poll's
    # thread journals once it returns): the hand-out time (at_ms) is what counts, so it is inside A's ownership.
    r.consumers[A].emit(1519, "records.consumed", group=GROUP, consumer=A, thread=f"{A}-0", topic=TOPIC,
                        partition=1, first=40, last=49, count=10, at_ms=1517)  # fmt: skip
    r.command(1535, A, "start-fetcher", 1, 2)
    r.command(1535, B, "start-fetcher", 1, 2)
    r.fetch(1551, A, 0, True, 50)
    r.fetch(1556, B, 1, True, 50)
    r.consumed(1600, A, 0, 50, 99)
    r.consumed(1600, B, 1, 50, 99)
    r.commit(1610, A, 0, 100)
    r.commit(1610, B, 1, 100)
    return r


def finish(r: Run, ts: int = 1700) -> None:
    """A and B stop fetching and deregister cleanly."""
    r.fetch(ts, A, 0, False, 100)
    r.fetch(ts, B, 1, False, 100)
    for cid in (A, B):
        r.consumers[cid].emit(ts + 10, "consumer.deregistered", group=GROUP, consumer=cid)


#: What :func:`violations_run` breaks, exactly.
EXPECTED = {
    "S1": 1,  # one command.sent with epoch 1 after epoch 2 was elected
    "S2": 2,  # one overlapping pair (A and C on t-0) + one delivery of C outside any interval of its own
    "S3": 10,  # offsets 120..129 of t-0 never consumed
    "S3-risk": 0,  # no group journals records.processed: no commit is judged
    "S4": 5,  # B consumes t-1 95..99 twice, cleanly; the 30 offsets after D's crash are allowed
    "S5": 2,  # two commands applied after a newer one (a deposed epoch's start; an older generation's stop)
    "S8": 0,  # no consistent region: n/a
}


def violations_run(run_dir: Path) -> Run:
    """The clean run plus one of each violation (counts in :data:`EXPECTED`)."""
    r = clean_run(run_dir)
    # S2 overlap: C fetches t-0 while A owns it; and C delivers t-1 records it never owned.
    r.register(1570, C, 203, {TOPIC: 1})
    r.fetch(1580, C, 0, True, 50)
    r.fetch(1650, C, 0, False, 50)
    r.produce(1640, 1, 100, 109)
    r.consumed(1660, C, 1, 100, 109)
    r.consumers[C].emit(1665, "consumer.deregistered", group=GROUP, consumer=C)
    # S3 gap: t-0 100..149 produced, A consumes 100..119 and 130..149.
    r.produce(1640, 0, 100, 149)
    r.consumed(1650, A, 0, 100, 119)
    r.consumed(1660, A, 0, 130, 149)
    r.commit(1670, A, 0, 150)  # past the gap: the commit that makes it a loss for good
    # S4 clean duplicate: B consumes t-1 95..99 again.
    r.consumed(1650, B, 1, 95, 99)
    # S4 allowed: on topic u, D consumes 0..49, commits 20, dies (no deregistration); E re-consumes 20..59.
    r.produce(1100, 0, 0, 59, topic="u")
    r.register(1290, D, 204, {"u": 1})
    r.fetch(1300, D, 0, True, 0, topic="u")
    r.consumed(1310, D, 0, 0, 39, topic="u")
    r.commit(1320, D, 0, 20, topic="u")
    r.consumed(1330, D, 0, 40, 49, topic="u")
    r.register(1390, E, 205, {"u": 1})
    r.fetch(1400, E, 0, True, 20, topic="u")
    r.consumed(1450, E, 0, 20, 59, topic="u")
    r.fetch(1700, E, 0, False, 60, topic="u")
    r.consumers[E].emit(1710, "consumer.deregistered", group=GROUP, consumer=E)
    finish(r)
    # S1 and S5: broker 2 is elected with epoch 2; broker 1 (deposed) still sends; old commands are applied.
    b2 = Proc(r.journal, "broker-2", 103)
    b2.emit(1800, "coordinator.elected", broker=2, epoch=2, session="0x20")
    b2.emit(1850, "rebalance.started", group=GROUP, generation=3, epoch=2, attempt=0, trigger="coordinator change",
            reason="new coordinator", members=[A, B], partitions=2, assignor="range")  # fmt: skip
    r.coord.emit(1860, "command.sent", group=GROUP, consumer=A, option="stop-fetcher", epoch=1, generation=2,
                 partitions=1)  # fmt: skip
    # S5: each consumer applies a command older than one it had already applied.  A: the deposed epoch 1's start
    # after epoch 2's stop; B: generation 3's stop after generation 4's.
    r.consumers[A].emit(1890, "command.applied", group=GROUP, consumer=A, name="cmd-2-3", option="stop-fetcher",
                        epoch=2, generation=3, partitions=0)  # fmt: skip
    r.consumers[A].emit(1900, "command.applied", group=GROUP, consumer=A, name="cmd-1-2", option="start-fetcher",
                        epoch=1, generation=2, partitions=1)  # fmt: skip
    r.consumers[B].emit(1890, "command.applied", group=GROUP, consumer=B, name="cmd-1-4", option="stop-fetcher",
                        epoch=1, generation=4, partitions=0)  # fmt: skip
    r.consumers[B].emit(1900, "command.applied", group=GROUP, consumer=B, name="cmd-1-3", option="stop-fetcher",
                        epoch=1, generation=3, partitions=0)  # fmt: skip
    r.consumers[A].emit(1910, "command.rejected", group=GROUP, consumer=A, name="cmd-1-2",
                        reason="stale: coordinator epoch 1 < 2", option="stop-fetcher", epoch=1,
                        generation=2)  # fmt: skip
    return r


def delivery(
    consumer: str,
    ts: int,
    first: int,
    last: int,
    interval: tuple[int, int] | None,
    command: str | None = None,
    epoch: int | None = None,
    generation: int | None = 1,
) -> dict[str, Any]:
    """One delivery of an S3 or S4 example: a consumer's range, when, and the ownership interval it was delivered
    under (``interval``: start, end; None: none) with its generation and the start-fetcher that granted it."""
    start, end = interval if interval is not None else (None, None)
    return {"consumer": consumer, "ts": ts, "first": first, "last": last, "start_ts": start, "end_ts": end,
            "generation": generation if interval is not None else None, "command": command, "epoch": epoch}  # fmt: skip


#: The S3 and S4 examples of :func:`violations_run`: A delivered t-0 ..119 and then 130.. under its interval from
#: generation 2's start (cmd-1-2, epoch 1), and committed 150; B delivered t-1 50..99 and then 95..99 again.
VIOLATION_LOST = {
    "group": GROUP, "topic": TOPIC, "partition": 0, "first": 120, "last": 129, "count": 10, "judged_on": "consumed",
    "before": delivery(A, 1650, 100, 119, (1551, 1700), "cmd-1-2", 1),
    "after": delivery(A, 1660, 130, 149, (1551, 1700), "cmd-1-2", 1),
    "commit": {"consumer": A, "ts": 1670, "offset": 150},
}  # fmt: skip
VIOLATION_DUPLICATE = {
    "group": GROUP, "topic": TOPIC, "partition": 1, "first": 95, "last": 99, "count": 5, "judged_on": "consumed",
    "delivery_a": delivery(B, 1600, 50, 99, (1556, 1700), "cmd-1-2", 1),
    "delivery_b": delivery(B, 1650, 95, 99, (1556, 1700), "cmd-1-2", 1),
}  # fmt: skip

#: A member of :func:`damaged_run` whose black list is outside the topic-pattern dialect (it never fetches)
OUTSIDE_MEMBER = "g_h-1000-00000009"
OUTSIDE_DIALECT = "(?i)T"

#: What :func:`damaged_run` does to the journal, as the analysis should count it.
DAMAGE = {"truncated": 2, "malformed": 2, "newer_schema": 1, "unknown_event": 1, "incomplete": 1, "seq_gaps": 1}


def damaged_run(run_dir: Path) -> Run:
    """The clean run with every kind of damage a reader must survive (counts in :data:`DAMAGE`)."""
    r = clean_run(run_dir)
    finish(r)
    a = r.consumers[A]
    a.raw("{oops\n")  # not JSON
    a.raw(json.dumps({"v": 1, "ts": 1720, "seq": 99, "ev": "zk.state"}) + "\n")  # core fields missing
    a.emit(1730, "consumer.teleported", group=GROUP, consumer=A)  # an event type from the future
    a.seq += 1  # a lost line: a gap in the sequence numbers
    a.emit(1740, "zk.state", state="connected", session="0x1")
    newer = {"v": 2, "ts": 1750, "mono": 1, "seq": a.seq + 1, "role": a.role, "pid": a.pid, "ev": "records.consumed"}
    a.seq += 1
    a.raw(json.dumps({**newer, "group": GROUP, "records": [[0, 9]]}) + "\n")  # schema version 2: never guessed at
    r.producer.emit(1760, "produce.batch", topic=TOPIC, partition=0, first=100, count=10)  # no "last": incomplete
    r.producer.raw('{"v":1,"ts":1770,"mono":1,"seq":')  # killed mid-write: a torn last line
    b = r.consumers[B]
    line = {"v": 1, "ts": 1780, "mono": 1, "seq": b.seq + 1, "role": b.role, "pid": b.pid, "ev": "zk.state"}
    b.raw(json.dumps({**line, "state": "lost", "session": "0x2"}))  # complete JSON, but no newline: still torn
    # a regex outside the topic-pattern dialect (Java reads the flag, so it compiles there): left out of S3, listed
    r.register(1790, OUTSIDE_MEMBER, 206, {OUTSIDE_DIALECT: 1}, pattern="black_list")
    return r


# --- records.processed: runs judged on what the application finished (S3, S4) ---------------------------------------


def processed(r: Run, ts: int, cid: str, partition: int, first: int, last: int, group: str = GROUP) -> None:
    """``records.processed``: the application of ``cid`` finished ``first..last`` of t-``partition`` at ``ts``."""
    r.consumers[cid].emit(ts, "records.processed", group=group, consumer=cid, thread=f"{cid}-0", topic=TOPIC,
                          partition=partition, first=first, last=last, count=last - first + 1)  # fmt: skip


#: The range :func:`processed_run` with ``gap=True`` never processes (t-0), although it was consumed and committed.
PROCESSED_GAP = (75, 99)


def processed_run(run_dir: Path, *, gap: bool = False) -> Run:
    """The clean run (every record consumed once, offsets committed to the end) whose applications journal what they
    finished; with ``gap``, A's application never finished t-0 75..99 (:data:`PROCESSED_GAP`): it was handed them by
    ``poll()`` and the stop committed 100 for it, the loss of issue 25."""
    r = clean_run(run_dir)
    processed(r, 1305, A, 0, 0, 49)
    processed(r, 1305, A, 1, 0, 39)
    processed(r, 1520, A, 1, 40, 49)
    processed(r, 1605, A, 0, 50, PROCESSED_GAP[0] - 1 if gap else 99)
    processed(r, 1605, B, 1, 50, 99)
    finish(r)
    return r


#: The S3 example of :func:`processed_run` with ``gap``: A's application finished t-0 ..74 under A's interval from
#: generation 2's start and nothing after, and A's commit of 100 at 1610 went past the gap.
GAP_LOST = {
    "group": GROUP, "topic": TOPIC, "partition": 0, "first": PROCESSED_GAP[0], "last": PROCESSED_GAP[1], "count": 25,
    "judged_on": "processed", "before": delivery(A, 1605, 50, 74, (1551, 1700), "cmd-1-2", 1), "after": None,
    "commit": {"consumer": A, "ts": 1610, "offset": 100},
}  # fmt: skip

H = "h_h-1000-0000000f"


def mixed_groups_run(run_dir: Path) -> Run:
    """:func:`processed_run` (group g, judged on processed, complete) beside group h, whose consumer journals no
    ``records.processed`` (judged on consumed) and was never handed t-1 90..99."""
    r = processed_run(run_dir)
    h = r.consumer(H, 206)
    h.emit(1200, "consumer.registered", group="h", consumer=H, pattern="static", subscription={TOPIC: 1},
           session="0x3", registrations=1)  # fmt: skip
    for partition, last in ((0, 99), (1, 89)):
        common = {"group": "h", "consumer": H, "thread": f"{H}-0", "topic": TOPIC, "partition": partition}
        h.emit(1250, "fetch.started", **common, offset=0, generation=1)
        h.emit(1300, "records.consumed", **common, first=0, last=last, count=last + 1)
        h.emit(1310, "fetch.stopped", **common, offset=last + 1, generation=1, reason="stop-fetcher")
        # auto-commit off, committing what poll() returned: not judged, h journals nothing processed (S3-risk 0)
        h.emit(1315, "offsets.committed", group="h", consumer=H, topic=TOPIC, partition=partition, offset=last + 1,
               auto_commit=False)  # fmt: skip
    h.emit(1320, "consumer.deregistered", group="h", consumer=H)
    return r


def poll_timeout_run(run_dir: Path, *, timeout: bool = True) -> Run:
    """One partition (t-0, 100 records).  A's application processes 0..49, commits 50, processes 50..74 and hangs:
    A leaves the group for not polling (``consumer.poll_timeout``; with ``timeout=False`` that event is missing) and
    its application, unstuck, still finishes 75..79 before A joins again.  B takes t-0 from the commit, 50, and
    processes 50..99.  Offsets 50..79 are processed twice, all in A's uncommitted tail: allowed after the timeout
    (S4 0, ``after_crash`` 30), clean duplicates without it (S4 30)."""
    r = Run(run_dir)
    r.coord.emit(1000, "coordinator.elected", broker=1, epoch=1, session="0x10")
    r.produce(1100, 0, 0, 99)
    r.register(1200, A, 201, {TOPIC: 1})
    r.fetch(1250, A, 0, True, 0)
    r.consumed(1300, A, 0, 0, 49)
    processed(r, 1320, A, 0, 0, 49)
    r.commit(1330, A, 0, 50)
    r.consumed(1340, A, 0, 50, 99)
    processed(r, 1400, A, 0, 50, 74)
    if timeout:
        r.consumers[A].emit(1500, "consumer.poll_timeout", group=GROUP, consumer=A, interval_ms=100,
                            partitions=[f"{TOPIC}-0"])  # fmt: skip
    r.fetch(1500, A, 0, False, 100)
    r.register(1510, B, 202, {TOPIC: 1})
    processed(r, 1550, A, 0, 75, 79)
    r.fetch(1600, B, 0, True, 50)
    r.consumed(1610, B, 0, 50, 99)
    processed(r, 1650, B, 0, 50, 99)
    r.commit(1660, B, 0, 100)
    r.register(1700, A, 201, {TOPIC: 1})
    r.fetch(1800, B, 0, False, 100)
    for cid in (A, B):
        r.consumers[cid].emit(1810, "consumer.deregistered", group=GROUP, consumer=cid)
    return r


#: The S4 example of :func:`poll_timeout_run` without the timeout: A's application finished 50..74 under A's only
#: interval, B's 50..99 under B's; no start-fetcher was journalled.
DUPLICATE_WITHOUT_TIMEOUT = {
    "group": GROUP, "topic": TOPIC, "partition": 0, "first": 50, "last": 79, "count": 30, "judged_on": "processed",
    "delivery_a": delivery(A, 1400, 50, 74, (1250, 1500)), "delivery_b": delivery(B, 1650, 50, 99, (1600, 1800)),
}  # fmt: skip

#: What :func:`at_risk_run` commits before it is processed, per consumer (S3-risk: 20 + 50 offsets)
AT_RISK = [
    {"group": GROUP, "consumer": A, "topic": TOPIC, "partition": 0, "first": 30, "last": 49, "count": 20},
    {"group": GROUP, "consumer": B, "topic": TOPIC, "partition": 1, "first": 50, "last": 99, "count": 50},
]


def at_risk_run(run_dir: Path, *, auto_commit: bool) -> Run:
    """Two partitions, every record processed once (S3 0), but two commits ahead of the application, the order the
    unsafe contrast keeps (a stop commits what ``poll()`` returned): A is handed t-0 0..49, has processed 0..29 when
    its offset 50 is committed (30..49 at risk) and finishes 30..49 only after; B takes t-1 over at 50, is handed
    50..99 and commits 100 before processing any (50..99 at risk: B was never handed 0..49, A processed them).  The
    other commits follow the work.  With ``auto_commit`` the commits are by contract those of what ``poll()``
    returned, and none is judged: S3-risk 0."""
    r = Run(run_dir)
    r.coord.emit(1000, "coordinator.elected", broker=1, epoch=1, session="0x10")
    r.produce(1100, 0, 0, 99)
    r.produce(1100, 1, 0, 99)
    r.register(1200, A, 201, {TOPIC: 1})
    r.fetch(1250, A, 0, True, 0)
    r.fetch(1250, A, 1, True, 0)
    r.consumed(1300, A, 0, 0, 49)
    r.consumed(1300, A, 1, 0, 49)
    processed(r, 1320, A, 0, 0, 29)
    r.commit(1330, A, 0, 30, auto_commit=auto_commit)  # what was finished: fine
    r.commit(1340, A, 0, 50, auto_commit=auto_commit)  # 30..49 not finished yet
    processed(r, 1350, A, 1, 0, 49)
    r.commit(1350, A, 1, 50, auto_commit=auto_commit)  # finished in the same millisecond: counts as before
    processed(r, 1360, A, 0, 30, 49)
    r.register(1400, B, 202, {TOPIC: 1})
    r.fetch(1410, A, 1, False, 50)
    r.fetch(1420, B, 1, True, 50)
    r.consumed(1430, B, 1, 50, 99)
    r.commit(1440, B, 1, 100, auto_commit=auto_commit)  # nothing finished yet
    processed(r, 1450, B, 1, 50, 99)
    r.commit(1460, B, 1, 100, auto_commit=auto_commit)
    r.consumed(1470, A, 0, 50, 99)
    processed(r, 1480, A, 0, 50, 99)
    r.commit(1490, A, 0, 100, auto_commit=auto_commit)
    finish(r)
    return r


#: The runs of :func:`processed_runs` and what each verdict counts.
PROCESSED_EXPECTED = {
    "gap": {
        "S1": 0,
        "S2": 0,
        "S3": 25,
        "S3-risk": 0,
        "S4": 0,
        "S5": 0,
        "S8": 0,
    },  # its commits predate the field: not judged
    "complete": {"S1": 0, "S2": 0, "S3": 0, "S3-risk": 0, "S4": 0, "S5": 0, "S8": 0},
    "mixed": {"S1": 0, "S2": 0, "S3": 10, "S3-risk": 0, "S4": 0, "S5": 0, "S8": 0},
    "timeout": {"S1": 0, "S2": 0, "S3": 0, "S3-risk": 0, "S4": 0, "S5": 0, "S8": 0},
    "no-timeout": {"S1": 0, "S2": 0, "S3": 0, "S3-risk": 0, "S4": 30, "S5": 0, "S8": 0},
    "at-risk": {"S1": 0, "S2": 0, "S3": 0, "S3-risk": 70, "S4": 0, "S5": 0, "S8": 0},
    "auto-commit": {"S1": 0, "S2": 0, "S3": 0, "S3-risk": 0, "S4": 0, "S5": 0, "S8": 0},
    # S8 (tests/spark/region_journals.py): a correct region; one counting records twice after a reset
    "region": {"S1": 0, "S2": 0, "S3": 0, "S3-risk": 0, "S4": 0, "S5": 0, "S8": 0},
    "region-double": {"S1": 0, "S2": 0, "S3": 0, "S3-risk": 0, "S4": 0, "S5": 0, "S8": 4},
}


def processed_runs(base: Path) -> list[Path]:
    """Write the runs of :data:`PROCESSED_EXPECTED` under ``base``; return their directories."""
    from tests.spark.region_journals import region_run  # it builds on this module's Proc

    processed_run(base / "gap", gap=True)
    processed_run(base / "complete")
    mixed_groups_run(base / "mixed")
    poll_timeout_run(base / "timeout")
    poll_timeout_run(base / "no-timeout", timeout=False)
    at_risk_run(base / "at-risk", auto_commit=False)
    at_risk_run(base / "auto-commit", auto_commit=True)
    region_run(base / "region")
    region_run(base / "region-double", double=True)
    return [base / name for name in PROCESSED_EXPECTED]
