"""Crafted journals of a consistent region (S8): a correct run, and one that counts records twice after a reset.

Topic ``r`` has two partitions of ten records each, journalled one by one (``produce.records``): partition 0 holds
keys ``k0``/``k1`` alternately with numbers 0..9, partition 1 key ``k2`` with numbers 100..109.  Members ``m1``
(partition 0) and ``m2`` (partition 1) of group ``rg``, region 1, checkpoint at 1 (below offsets 5 and 3), reset to it,
go on to the end and checkpoint at 2 (everything); the driver completes 1 and 2 (``region.completed``); checkpoint 3
(``m2`` never wrote it, the driver never completed it) is not judged.  ``m1``'s consumer fetched 5..6 before the
reset and again after it: a duplicate S4 leaves to S8 (a region rewinds by design).
"""

from __future__ import annotations

from pathlib import Path

from tests.spark.journals import Proc

GROUP = "rg"
TOPIC = "r"
MEMBERS = ["m1", "m2"]

P0 = [("k0" if o % 2 == 0 else "k1", o) for o in range(10)]
P1 = [("k2", 100 + o) for o in range(10)]


def _state(*parts: list[tuple[str, int]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for records in parts:
        for key, value in records:
            count, total = out.get(key, [0, 0])
            out[key] = [count + 1, total + value]
    return out


def _produce(producer: Proc, ts: int) -> None:
    for partition, records in ((0, P0), (1, P1)):
        producer.emit(ts, "produce.batch", topic=TOPIC, partition=partition, first=0, last=9, count=10, bytes=640)
        producer.emit(ts, "produce.records", topic=TOPIC, partition=partition, first=0,
                      keys=[k for k, _ in records], values=[v for _, v in records])  # fmt: skip


def _checkpoint(p: Proc, ts: int, member: str, checkpoint: int, offsets: dict[str, int],
                state: dict[str, list[int]], group: str = GROUP, region: object = 1) -> None:  # fmt: skip
    p.emit(ts, "region.checkpoint", group=group, region=region, member=member, checkpoint=checkpoint,
           members=MEMBERS if group == GROUP else ["m3", "m4"], offsets=offsets, state=state)  # fmt: skip


def region_run(run_dir: Path, *, double: bool = False) -> Path:
    """The region run; ``double``: after the reset to checkpoint 1, ``m1`` processes offsets 3 and 4 of partition 0
    again without its state having been reset to checkpoint 1's (keys ``k1`` and ``k0`` counted twice: two rows at
    checkpoint 2), ``m2``'s checkpoint 1 holds a record above its offset (one row at checkpoint 1), and a second
    region (group ``rg2``) whose ``m4`` never checkpoints (one row)."""
    journal = run_dir / "journal"
    producer = Proc(journal, "producer", 201)
    m1, m2 = Proc(journal, "region-m1", 202), Proc(journal, "region-m2", 203)
    driver = Proc(journal, "driver-rg", 205)
    for p, name in ((m1, "m1"), (m2, "m2")):
        p.emit(1000, "region.joined", group=GROUP, region=1, member=name, members=MEMBERS)
    _produce(producer, 1010)
    where = {"group": GROUP, "consumer": "rg_m1", "thread": "rg_m1-0", "topic": TOPIC, "partition": 0}
    m1.emit(1005, "fetch.started", **where, offset=0, generation=1)
    m1.emit(1020, "records.consumed", **where, first=0, last=6, count=7)
    m1.emit(1220, "records.consumed", **where, first=5, last=9, count=5)
    _checkpoint(m1, 1100, "m1", 1, {f"{TOPIC}/0": 5}, _state(P0[:5]))
    _checkpoint(m2, 1100, "m2", 1, {f"{TOPIC}/1": 3}, _state(P1[: 4 if double else 3]))
    for p, name, offsets in ((m1, "m1", {f"{TOPIC}/0": 5}), (m2, "m2", {f"{TOPIC}/1": 3})):
        p.emit(1200, "region.reset_pending", group=GROUP, region=1, member=name, reason="member restarted")
        p.emit(1210, "region.reset", group=GROUP, region=1, member=name, checkpoint=1, offsets=offsets)
    again = P0[3:5] if double else []
    _checkpoint(m1, 1300, "m1", 2, {f"{TOPIC}/0": 10}, _state(P0, again))
    _checkpoint(m2, 1300, "m2", 2, {f"{TOPIC}/1": 10}, _state(P1))
    for checkpoint, ts in ((1, 1150), (2, 1350)):
        driver.emit(ts, "region.completed", group=GROUP, region=1, checkpoint=checkpoint, members=MEMBERS)
    _checkpoint(m1, 1400, "m1", 3, {f"{TOPIC}/0": 10}, _state(P0, again))
    m1.emit(1440, "consumer.deregistered", group=GROUP, consumer="rg_m1")
    m1.emit(1450, "region.retired", group=GROUP, region=1, checkpoint=1)
    if double:
        m3 = Proc(journal, "region-m3", 204)
        m3.emit(1000, "region.joined", group="rg2", region="two", member="m3", members=["m3", "m4"])
        _checkpoint(m3, 1100, "m3", 1, {f"{TOPIC}/0": 4}, _state(P0[:4]), group="rg2", region="two")
    return run_dir


#: S8's rows of the ``double`` run, as both readers list them
DOUBLE_ROWS = [
    {"group": GROUP, "region": "1", "checkpoint": 1, "last": False, "key": "k2", "expected_count": 3,
     "expected_sum": 303, "found_count": 4, "found_sum": 406},
    {"group": GROUP, "region": "1", "checkpoint": 2, "last": True, "key": "k0", "expected_count": 5,
     "expected_sum": 20, "found_count": 6, "found_sum": 24},
    {"group": GROUP, "region": "1", "checkpoint": 2, "last": True, "key": "k1", "expected_count": 5,
     "expected_sum": 25, "found_count": 6, "found_sum": 28},
    {"group": "rg2", "region": "two", "checkpoint": None, "last": True, "key": None, "expected_count": 20,
     "expected_sum": 1090, "found_count": 0, "found_sum": 0},
]  # fmt: skip
