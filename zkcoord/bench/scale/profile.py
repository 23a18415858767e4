"""Where a coordinator's time went: a summary of a py-spy profile (``--format raw --threads --idle``).

    python -m zkcoord.bench.scale.profile PROFILE.txt [--rate 250] [--thread coordinator-] [--top 30]

py-spy's raw format is one collapsed stack per line: ``thread (<tid>): <name>;<frame>;<frame>... <samples>``, each
frame ``function (file:line)``, outermost first.  Recorded with ``--idle``, every sample of a thread counts whether
it ran or waited, so samples / rate is wall time.

The report gives, for every thread, its wall time split into *waiting* (the innermost frame is a blocking primitive:
``Condition.wait``, ``Event.wait``, ``Queue.get``, ``select``, socket I/O...) and *running*; then, for the thread that
matters (the coordinator's worker, ``coordinator-<id>``), the inclusive time of each function of the project (and of
kazoo's blocking calls) with how much of it was spent waiting: this is where a startup spends its round trips.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

_FRAME = re.compile(r"(?P<func>.*) \((?P<file>[^():]*)(?::(?P<line>\d+))?\)$")
#: innermost frames that mean "blocked, not running"
WAITS = frozenset(
    {
        "Condition.wait",
        "Event.wait",
        "Queue.get",
        "wait",
        "select",
        "poll",
        "epoll",
        "recv",
        "sleep",
        "Lock.acquire",
        "_wait_for_tstate_lock",
        "AsyncResult.get",
        "AsyncResult.wait",
    }
)


#: kazoo functions worth a line in a breakdown: its blocking calls and its watch recipes
KAZOO_SHOWN = ("KazooClient.get", "KazooClient.exists", "KazooClient.create", "ChildrenWatch.", "DataWatch.")


@dataclass(frozen=True, slots=True)
class Frame:
    func: str
    file: str
    line: int

    @property
    def key(self) -> str:
        return f"{self.func} ({_short(self.file)})"


def _short(file: str) -> str:
    for marker in ("zkcoord/", "kazoo/", "benchmarks/", "consumer/"):
        at = file.rfind(marker)
        if at >= 0:
            return file[at:]
    return Path(file).name


def _frame(text: str) -> Frame:
    m = _FRAME.match(text)
    if m is None:
        return Frame(text, "", 0)
    return Frame(m["func"], m["file"], int(m["line"] or 0))


@dataclass
class Stacks:
    """Samples per thread name (tid dropped), each as (frames outermost first, samples)."""

    threads: dict[str, list[tuple[tuple[Frame, ...], int]]] = field(default_factory=dict)

    def total(self, thread: str) -> int:
        return sum(n for _, n in self.threads.get(thread, []))


def load(path: Path) -> Stacks:
    stacks = Stacks()
    for raw in path.read_text(errors="replace").splitlines():
        stack, _, count = raw.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        head, *frames = stack.split(";")
        name = head.split(": ", 1)[1] if ": " in head else head
        stacks.threads.setdefault(name, []).append((tuple(_frame(f) for f in frames), int(count)))
    return stacks


def waiting(frames: tuple[Frame, ...]) -> bool:
    return not frames or frames[-1].func in WAITS or frames[-1].func.endswith((".wait", ".recv", ".select"))


def inclusive(samples: list[tuple[tuple[Frame, ...], int]], wanted: str) -> tuple[Counter[str], Counter[str]]:
    """Inclusive samples and waiting samples per function whose file contains ``wanted`` (each once per stack)."""
    total: Counter[str] = Counter()
    waits: Counter[str] = Counter()
    for frames, n in samples:
        blocked = waiting(frames)
        for key in {f.key for f in frames if wanted in f.file}:
            total[key] += n
            if blocked:
                waits[key] += n
    return total, waits


def is_idle(frames: tuple[Frame, ...]) -> bool:
    """A thread waiting for its next piece of work at the top of its loop: ``Coordinator._run`` or kazoo's
    ``_thread_worker`` blocked in ``Queue.get`` (not a wait for a ZooKeeper reply inside some work)."""
    funcs = [f.func for f in frames]
    if "Queue.get" not in funcs or not waiting(frames):
        return False
    at = funcs.index("Queue.get")
    return at >= 1 and (funcs[at - 1] == "Coordinator._run" or funcs[at - 1].endswith("_thread_worker"))


def breakdown(name: str, samples: list[tuple[tuple[Frame, ...], int]], rate: int, top: int) -> list[str]:
    """Inclusive time of the project's functions (and kazoo's blocking calls and recipes) in one thread's work."""
    busy = [(frames, n) for frames, n in samples if not is_idle(frames)]
    busy_total = sum(n for _, n in busy)
    out = [f"{name}: {busy_total / rate:.2f} s at work (the rest idle, waiting for work); inclusive time:", ""]
    out.append(f"{'function':<72} {'s':>7} {'%':>6} {'waiting s':>10}")
    out.append("-" * 98)
    total, waits = inclusive(busy, "zkcoord/")
    kazoo_total, kazoo_waits = inclusive(busy, "kazoo/")
    for key, _ in kazoo_total.most_common():
        func = key.split(" (")[0]
        if func.startswith(
            ("KazooClient.get", "KazooClient.exists", "KazooClient.create", "ChildrenWatch.", "DataWatch.")
        ):
            total[key], waits[key] = kazoo_total[key], kazoo_waits[key]
    for key, n in total.most_common(top):
        share = 100.0 * n / busy_total if busy_total else 0.0
        out.append(f"{key[:72]:<72} {n / rate:>7.2f} {share:>6.1f} {waits[key] / rate:>10.2f}")
    return out


def report(path: Path, rate: int = 250, thread_prefix: str = "coordinator-", top: int = 25) -> str:
    """The per-thread table, then the breakdown of the coordinator's worker and of kazoo's watch-callback thread."""
    stacks = load(path)
    out = [f"profile {path.name} (py-spy, {rate} samples/s, idle included: samples / rate = wall seconds)", ""]
    out.append(f"{'thread':<28} {'wall s':>8} {'running s':>10} {'waiting s':>10} {'idle s':>8}")
    out.append("-" * 68)
    for name, samples in sorted(stacks.threads.items(), key=lambda kv: -stacks.total(kv[0])):
        wall = sum(n for _, n in samples)
        idle = sum(n for frames, n in samples if is_idle(frames))
        blocked = sum(n for frames, n in samples if waiting(frames)) - idle
        running = wall - idle - blocked
        out.append(
            f"{name[:28]:<28} {wall / rate:>8.2f} {running / rate:>10.2f} {blocked / rate:>10.2f} {idle / rate:>8.2f}"
        )
    out.append(
        "(running: on CPU or runnable; waiting: blocked inside work, mostly for a ZooKeeper reply; idle: no work)"
    )
    worker = next((name for name in stacks.threads if name.startswith(thread_prefix)), None)
    if worker is not None:
        out += ["", *breakdown(worker, stacks.threads[worker], rate, top)]
    watcher = next(
        (
            name
            for name, samples in stacks.threads.items()
            if not name.startswith(thread_prefix)
            and any(f.func in ("ChildrenWatch._watcher", "DataWatch._watcher") for frames, _ in samples for f in frames)
        ),
        None,
    )
    if watcher is not None:
        out += ["", *breakdown(f"{watcher} (kazoo watch callbacks)", stacks.threads[watcher], rate, 12)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--rate", type=int, default=250)
    parser.add_argument("--thread", default="coordinator-")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    print(report(args.profile, args.rate, args.thread, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
