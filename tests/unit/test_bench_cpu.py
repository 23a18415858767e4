"""The benchmark's CPU readings from ``/proc`` (Linux), on this process's own threads."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from zkcoord.bench.rebalance.cluster import process_cpu_ms, process_cpu_ms_without
from zkcoord.bench.rebalance.zkfloor import _cpu_per_op

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")


def _spin_named(name: str, seconds: float, spun: threading.Event, done: threading.Event) -> None:
    # The kernel's thread name, as a JVM names its compiler threads (Python's thread names stay in Python).
    Path(f"/proc/self/task/{threading.get_native_id()}/comm").write_text(name)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    spun.set()
    done.wait(10)  # alive, so its CPU time is still in /proc/<pid>/task


def test_the_cpu_time_of_named_threads_is_left_out() -> None:
    spun, done = threading.Event(), threading.Event()
    spinner = threading.Thread(target=_spin_named, args=("zkc-spinner", 0.3, spun, done))
    spinner.start()
    try:
        assert spun.wait(10)
        every = process_cpu_ms_without(os.getpid(), ())
        without = process_cpu_ms_without(os.getpid(), ("zkc-spinner",))
        total = process_cpu_ms(os.getpid())
    finally:
        done.set()
        spinner.join()
    assert every is not None and without is not None and total is not None
    assert every - without >= 250  # the spinner's 300 ms, in 10 ms clock ticks read a moment apart
    assert total >= every - 20


def test_no_pid_no_reading() -> None:
    assert process_cpu_ms_without(2**22 + 12345) is None  # above the kernel's pid limit


def test_cpu_per_watched_write_needs_a_reading_and_enough_writes() -> None:
    assert _cpu_per_op(None, 1, 1000) == (None, None)
    assert _cpu_per_op((0.0, 0.0), 1, 199) == (None, None)
    server, client = _cpu_per_op((None, 0.0), None, 1000)
    assert server is None and client is not None and client >= 0
