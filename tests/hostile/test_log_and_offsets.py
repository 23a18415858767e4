"""Hostile state in the data plane: committed offsets out of range or malformed, partition logs cut or deleted.

Real ZooKeeper, a real broker, producers and consumers as processes (``zkcoord produce``/``consume``), the damage done
by hand to znodes and files, and the safety properties checked from the journals (:mod:`tests.ledger`): S3 (every
record produced is consumed), S4 (no duplicates where nothing crashed), and convergence within a deadline.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.integration.test_consumer_e2e import Run
from tests.ledger import Ledger
from zkcoord.admin.groups import GroupStatus, describe_group
from zkcoord.data.partlog.layout import index_path, list_segments, log_path, partition_dir
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.znodes import encode_int
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until

pytestmark = [pytest.mark.integration]

DEADLINE = 30.0


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


def produce(run: Run, topic: str, count: int, journal: Path | None = None) -> None:
    """Produce ``count`` records in batches of 10, to completion (journalled, as the ledger reads them)."""
    journal = journal or run.journal
    args = ["produce", topic, "--count", str(count), "--size", "20", "--batch", "10", "--zk", run.hosts]
    with ChildProcess(
        [*args, "--journal", str(journal), "--data-dir", str(run.data)], run.root / f"producer-{run.n}.log"
    ) as proc:
        assert proc.wait(30) == 0, proc.tail()
    run.n += 1


def consumer(run: Run, group: str, topic: str, *extra: str, journal: Path | None = None) -> ChildProcess:
    journal = journal or run.journal
    run.n += 1
    args = ["consume", "--group", group, "--topic", topic, "--zk", run.hosts, "--session-timeout", run.session]
    proc = ChildProcess(
        [*args, "--journal", str(journal), "--data-dir", str(run.data), "--auto-commit-interval", "0.2", *extra],
        run.root / f"consumer-{run.n}.log",
    )
    run.stack.enter_context(proc)
    return proc


def set_committed(run: Run, group: str, topic: str, partition: int, raw: bytes) -> None:
    run.zk.ensure_path(paths.offsets(group, topic))
    path = paths.offset(group, topic, partition)
    if run.zk.exists(path) is None:
        run.zk.create(path, raw)
    else:
        run.zk.set(path, raw)


def events(journal: Path, kind: str) -> list[dict[str, object]]:
    return [e.fields for e in read_journal(journal) if e.event == kind]


def wait_consumed(journal: Path, group: str, expected: dict[tuple[str, int], set[int]]) -> Ledger:
    """Wait until the group consumed at least ``expected`` (offsets per partition); return the ledger then."""

    def done() -> bool:
        consumed = Ledger.read(journal, group).consumed
        return all(offsets <= set(consumed.get(tp, ())) for tp, offsets in expected.items())

    wait_until(done, DEADLINE, f"group {group} to consume {sorted(expected)}", interval=0.2)
    return Ledger.read(journal, group)


def stop(proc: ChildProcess) -> None:
    proc.signal(signal.SIGTERM)
    assert proc.wait(20) == 0, proc.tail()


# --- item 4: a committed offset beyond the log end -----------------------------------------------------------------


@pytest.mark.parametrize("policy", ["earliest", "latest", "none"])
def test_a_committed_offset_beyond_the_log_end_is_handled_by_the_reset_policy(run: Run, policy: str) -> None:
    run.broker()
    TopicAdmin(run.zk).create("t", 2)
    produce(run, "t", 200)  # round-robin: 100 records in each partition
    set_committed(run, "g", "t", 0, b"999999999")  # an idle group's offset, set by hand
    c = consumer(run, "g", "t", "--offset-reset", policy)
    run.wait_members("g", 1)
    wait_until(lambda: bool(events(run.journal, "offsets.reset")), DEADLINE, "the out-of-range position reported")
    (reset,) = events(run.journal, "offsets.reset")
    expected_to = {"earliest": 0, "latest": 100, "none": None}[policy]
    assert (reset["partition"], reset["from"], reset["to"], reset["policy"]) == (0, 999999999, expected_to, policy)
    assert reset["reason"] == "beyond the log end"
    produce(run, "t", 40)  # 20 new records in each partition: 100..119
    if policy == "earliest":
        ledger = wait_consumed(run.journal, "g", {("t", 0): set(range(120)), ("t", 1): set(range(120))})
        assert ledger.missing({"t"}) == {}  # S3
    elif policy == "latest":
        ledger = wait_consumed(run.journal, "g", {("t", 0): set(range(100, 120)), ("t", 1): set(range(120))})
        assert sorted(ledger.consumed[("t", 0)]) == list(range(100, 120))  # the new records; what was there skipped
    else:
        # Held: reported, never fetched; partition 1 goes on, the consumer and the group stay up.
        ledger = wait_consumed(run.journal, "g", {("t", 1): set(range(120))})
        assert ("t", 0) not in ledger.consumed and sorted(ledger.consumed[("t", 1)]) == list(range(120))
        assert c.alive()
        assert "offset 999999999 is outside the log's range" in c.log_path.read_text()
    assert ledger.duplicates() == {}  # S4: nothing crashed, nothing twice
    description = describe_group(run.zk, "g", run.data)
    assert description.state is GroupStatus.STABLE
    view = next(p for p in description.partitions if p.partition == 0)
    assert view.last_reset is not None and view.last_reset.to == expected_to
    if policy == "none":
        assert view.out_of_range == "beyond the log end"  # describe says so too, until an operator acts
        # The operator's fix: a valid offset, then any rebalance (a member joins): the partition is consumed.
        set_committed(run, "g", "t", 0, encode_int(100))
        consumer(run, "g", "t", "--offset-reset", policy)
        run.wait_members("g", 2)
        wait_consumed(run.journal, "g", {("t", 0): set(range(100, 120))})
        assert set(Ledger.read(run.journal, "g").consumed[("t", 0)]) == set(range(100, 120))
    stop(c)


# --- committed offsets of the wrong type -------------------------------------------------------------------------


def test_committed_offsets_of_the_wrong_type_negative_or_huge_are_refused_and_the_group_converges(run: Run) -> None:
    run.broker()
    TopicAdmin(run.zk).create("w", 6)
    produce(run, "w", 300)  # 50 per partition
    # Partition 3's is a valid Java long beyond any log (a reset); the others are not offsets at all (refused):
    # 9999999999999999999 has 19 digits but exceeds 2^63-1.
    bad = [b"abc", b"-5", str(10**30).encode(), b"9223372036854775807", b"9999999999999999999", b"\xff\xfe"]
    for partition, raw in enumerate(bad):
        set_committed(run, "g", "w", partition, raw)
    c = consumer(run, "g", "w", "--threads", "1")
    run.wait_members("g", 1)
    ledger = wait_consumed(run.journal, "g", {("w", p): set(range(50)) for p in range(6)})
    assert ledger.missing({"w"}) == {} and ledger.duplicates() == {}  # S3, S4
    rejected = [e["reason"] for e in events(run.journal, "input.rejected")]
    assert len([r for r in rejected if "committed offset" in str(r)]) >= 5  # each malformed one said, once at least
    resets = events(run.journal, "offsets.reset")
    assert [(r["partition"], r["to"]) for r in resets] == [(3, 0)]  # in int syntax, but beyond any log
    assert c.alive()
    # Once consumed, the offsets committed are valid again.
    wait_until(
        lambda: all(run.zk.get(paths.offset("g", "w", p))[0] == b"50" for p in range(6)), DEADLINE, "valid commits"
    )
    stop(c)


# --- item 5: a log cut below a committed offset, a segment or index deleted -----------------------------------------


@pytest.mark.parametrize("damage", ["torn-tail", "segment-deleted", "index-deleted"])
def test_records_after_damage_below_a_committed_offset_are_consumed(run: Run, damage: str) -> None:
    """Phase 1 consumes and commits everything; the log then loses its tail (or files); phase 2 (own journal)
    produces more and a new consumer must consume all of it (S3), never confusing new records with lost offsets."""
    run.broker()
    TopicAdmin(run.zk).create("d", 1)
    produce(run, "d", 100)
    first = consumer(run, "g", "d")
    run.wait_members("g", 1)
    wait_consumed(run.journal, "g", {("d", 0): set(range(100))})
    stop(first)
    assert run.zk.get(paths.offset("g", "d", 0))[0] == b"100"
    directory = partition_dir(run.data, "d", 0)
    (base,) = list_segments(directory)
    segment = log_path(directory, base)
    if damage == "torn-tail":
        os.truncate(segment, segment.stat().st_size - 25)  # the last, consumed batch (90..99) cut in its middle
    elif damage == "segment-deleted":
        segment.unlink()
        index_path(directory, base).unlink()
    else:
        index_path(directory, base).unlink()
    phase2 = run.root / "journal2"
    produce(run, "d", 50, journal=phase2)
    produced = Ledger.read(phase2, "g").produced[("d", 0)]
    assert produced == set(range(100, 150)), f"offsets handed out again: {sorted(produced)[:3]}..."
    rewound = events(phase2, "log.rewound")
    assert [r["end_offset"] for r in rewound] == ([] if damage == "index-deleted" else [90 if "torn" in damage else 0])
    second = consumer(run, "g", "d", journal=phase2)
    ledger = wait_consumed(phase2, "g", {("d", 0): produced})
    assert ledger.missing({"d"}) == {} and ledger.duplicates() == {}  # S3, S4
    assert events(phase2, "offsets.reset") == []  # nothing out of range: the position waited for the new records
    stop(second)
