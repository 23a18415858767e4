"""The partition log across real processes: a writer killed with SIGKILL, and two writers appending at once."""

from __future__ import annotations

import functools
import hashlib
import inspect
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from zkcoord.data.partlog import PartitionReader, Record, open_reader, open_writer

DEADLINE_S = 60.0


def value_of(i: int) -> bytes:
    """The value of record ``i``: checkable, of varied size, now and then large enough for a kill to tear it."""
    repeat = 20_000 if i % 997 == 0 else 1 + i % 40
    return hashlib.sha256(b"%d" % i).digest() * repeat


CRASH_CHILD = inspect.getsource(value_of) + textwrap.dedent(
    """
    import hashlib, sys
    from zkcoord.data.partlog import PartitionWriter, WriterConfig

    config = WriterConfig(segment_bytes=512 * 1024, index_interval_bytes=4096, fsync_on_roll=False)
    with PartitionWriter(sys.argv[1], "t", 0, config=config) as writer:
        i = writer.end_offset
        while True:
            n = 1 + i % 60
            first, last = writer.append_batch([(b"%d" % j, value_of(j)) for j in range(i, i + n)])
            if first != i:
                sys.exit(f"appended at {first}, expected {i}")
            i = last + 1
            print(last, flush=True)
    """
)

WRITER_CHILD = textwrap.dedent(
    """
    import sys
    from zkcoord.data.partlog import PartitionWriter, WriterConfig

    name, count = sys.argv[2].encode(), int(sys.argv[3])
    config = WriterConfig(segment_bytes=16 * 1024, index_interval_bytes=512, fsync_on_roll=False)
    with PartitionWriter(sys.argv[1], "t", 0, config=config) as writer:
        print("ready", flush=True)
        sys.stdin.readline()
        for i in range(count):
            if i % 4 == 0:
                writer.append_batch([(name, b"%s-%d-%d" % (name, i, k)) for k in range(3)])
            else:
                writer.append(b"%s-%d" % (name, i), key=name)
    """
)


def spawn(script: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def wait_for_line(proc: subprocess.Popen[bytes], done: Callable[[bytes], bool], deadline: float) -> None:
    """Read the child's stdout until a line satisfies ``done``; fail at the deadline or if the child exits."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    pending = b""
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, "timed out waiting for the child"
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            stderr = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"child exited with {proc.wait()}: {stderr}")
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if any(done(line) for line in lines):
            return


def acknowledges(target: int, line: bytes) -> bool:
    return int(line) >= target


def read_everything(reader: PartitionReader) -> list[Record]:
    out: list[Record] = []
    while chunk := reader.read(len(out), max_records=5_000, max_bytes=4 << 20):
        out.extend(chunk)
    return out


def test_a_writer_killed_mid_append_leaves_a_gap_free_intact_log(tmp_path: Path) -> None:
    acknowledged = -1
    for _ in range(3):
        child = spawn(CRASH_CHILD, str(tmp_path))
        target = acknowledged + 3_000
        try:
            wait_for_line(child, functools.partial(acknowledges, target), time.monotonic() + DEADLINE_S)
            # Everything acknowledged so far is in the page cache; the child is appending more as it dies.
            child.send_signal(signal.SIGKILL)
        finally:
            child.kill()
            child.communicate()
        acknowledged = target
        with open_reader(tmp_path, "t", 0) as reader:
            records = read_everything(reader)
            assert reader.end_offset() == len(records)
        assert len(records) > acknowledged
        assert [r.offset for r in records] == list(range(len(records)))
        for r in records:
            assert (r.key, r.value) == (b"%d" % r.offset, value_of(r.offset)), f"record {r.offset} damaged"
        acknowledged = len(records) - 1
    with open_writer(tmp_path, "t", 0) as writer:
        assert writer.end_offset == acknowledged + 1
        assert writer.append(b"after") == acknowledged + 1


def test_two_writer_processes_append_without_gaps_or_duplicates(tmp_path: Path) -> None:
    count = 1_500
    children = {name: spawn(WRITER_CHILD, str(tmp_path), name, str(count)) for name in ("A", "B")}
    expected_total = 2 * (count + 2 * len(range(0, count, 4)))
    records: list[Record] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        for child in children.values():
            wait_for_line(child, lambda line: line == b"ready", deadline)
        for child in children.values():
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            child.stdin.flush()
        # Read concurrently with both writers, as a fetcher in another process would.
        with open_reader(tmp_path, "t", 0) as reader:
            while len(records) < expected_total:
                assert time.monotonic() < deadline, f"only {len(records)} of {expected_total} records appeared"
                records.extend(reader.read(len(records), max_records=1_000))
                assert all(c.poll() in (None, 0) for c in children.values())
        for child in children.values():
            assert child.wait(timeout=DEADLINE_S) == 0
    finally:
        for child in children.values():
            child.kill()
            child.communicate()
    assert [r.offset for r in records] == list(range(expected_total))
    for name, _child in children.items():
        mine = [r.value for r in records if r.key == name.encode()]
        want: list[bytes] = []
        for i in range(count):
            if i % 4 == 0:
                want.extend(f"{name}-{i}-{k}".encode() for k in range(3))
            else:
                want.append(f"{name}-{i}".encode())
        assert mine == want
    # The segments the two writers rolled between them follow on from each other and verify end to end.
    with open_writer(tmp_path, "t", 0) as writer:
        assert writer.end_offset == expected_total
        assert writer.truncations == []
        writer.rebuild_index()
