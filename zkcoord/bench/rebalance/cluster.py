"""The processes of a benchmark run: the broker (which hosts the coordinator) and the consumer workers.

Every wait has a deadline and every process is stopped by :meth:`stop` / :meth:`terminate`, which the driver calls
in ``finally``.  Workers are controlled through their standard input and answer on their standard output
(:mod:`zkcoord.bench.rebalance.worker`); their standard error goes to a log file in the run directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from zkcoord.bench.common import BenchError
from zkcoord.runtime.shutdown import KILL_GRACE_S


def tail(path: Path, lines: int = 3) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


class WorkerProcess:
    """``python -m zkcoord.bench.rebalance.worker ...``: consumers of one protocol, controlled by JSON lines."""

    def __init__(self, index: int, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.index = index
        self.args = [sys.executable, "-m", "zkcoord.bench.rebalance.worker", "--index", str(index), *args]
        self.log_path = log_path
        self.env = env
        self.consumers: dict[str, str] = {}  # consumer id -> group
        self._proc: subprocess.Popen[str] | None = None
        self._log: IO[bytes] | None = None
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def proc(self) -> subprocess.Popen[str]:
        if self._proc is None:
            raise BenchError(f"worker {self.index} was not started")
        return self._proc

    def start(self) -> WorkerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(
            self.args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=self.env,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, name=f"bench-worker-{self.index}", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        stdout = self.proc.stdout
        if stdout is None:
            return
        for line in stdout:
            if not line.startswith("{"):
                continue  # not a reply (something else wrote to the worker's stdout): not ours to judge
            try:
                message = json.loads(line)
            except ValueError:
                message = {"ok": False, "error": f"unreadable reply {line.strip()[:200]!r}"}
            self._replies.put(message if isinstance(message, dict) else {"ok": False, "error": "not an object"})
        self._replies.put(None)  # end of output: the worker exited

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def send(self, command: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        if not self.alive() or stdin is None:
            raise BenchError(f"worker {self.index} (pid {self.pid}) is not running: {tail(self.log_path)}")
        try:
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
        except OSError as e:
            raise BenchError(f"worker {self.index} (pid {self.pid}) stopped reading: {e}") from e

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next reply; raises :class:`BenchError` if it is an error, the worker died, or ``timeout`` passed."""
        try:
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(f"worker {self.index} (pid {self.pid}) did not answer within {timeout:g} s") from None
        if reply is None:
            self._replies.put(None)
            raise BenchError(f"worker {self.index} (pid {self.pid}) exited: {tail(self.log_path)}")
        if not reply.get("ok"):
            raise BenchError(f"worker {self.index}: {reply.get('error', 'failed')}")
        return reply

    def call(self, command: dict[str, Any], timeout: float) -> dict[str, Any]:
        self.send(command)
        return self.receive(timeout)

    def stop(self, timeout: float) -> None:
        """Ask the worker to close its consumers and exit; SIGTERM, then SIGKILL, if it does not in time."""
        if self._proc is None:
            return
        proc = self._proc
        if proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                if proc.stdin is not None:
                    proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    proc.stdin.close()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)  # its stop ends before KILL_GRACE_S (the worker checks)
                try:
                    proc.wait(timeout=KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        for stream in (proc.stdin, proc.stdout):  # the driver's ends of the pipes, whoever ended the worker
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        if self._log is not None:
            self._log.close()
            self._log = None


def stop_all(workers: list[WorkerProcess], timeout: float) -> None:
    """Stop every worker, in parallel: each closes its consumers (``timeout`` in all, then signals)."""
    for worker in workers:
        if worker.alive() and worker.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                worker.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                worker.proc.stdin.flush()
    deadline = time.monotonic() + timeout
    for worker in workers:
        worker.stop(max(0.1, deadline - time.monotonic()))


def child_env(home: Path) -> dict[str, str]:
    """The environment of the run's processes: this one's, with ``ZKCOORD_HOME`` inside the run directory."""
    env = dict(os.environ)
    env["ZKCOORD_HOME"] = str(home)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_ms(pid: int) -> float | None:
    """User + system CPU time of a live process (all its threads), from ``/proc/<pid>/stat``; None if unreadable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    try:
        return (int(fields[11]) + int(fields[12])) * 1000 / _TICKS
    except (IndexError, ValueError):
        return None


#: The JVM's just-in-time compiler threads (``/proc/<pid>/task/<tid>/comm``, truncated to 15 characters).
JIT_THREADS = ("C1 CompilerThre", "C2 CompilerThre")


def process_cpu_ms_without(pid: int, threads: tuple[str, ...] = JIT_THREADS) -> float | None:
    """:func:`process_cpu_ms` less the CPU time of the process's threads named ``threads`` (a JVM's compilers by
    default: the cost of warming up, not of serving); None if unreadable.  The CPU time of threads that have exited
    is in neither part."""
    total = 0.0
    try:
        tasks = list(os.scandir(f"/proc/{pid}/task"))
    except OSError:
        return None
    for task in tasks:
        try:
            if Path(task.path, "comm").read_text().strip() in threads:
                continue
            fields = Path(task.path, "stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) * 1000 / _TICKS
        except (OSError, IndexError, ValueError):
            continue  # the thread exited meanwhile
    return total


def machine_busy_ms() -> float | None:
    """CPU time all CPUs of the machine spent busy (not idle, not waiting for I/O), from ``/proc/stat``."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        ticks = [int(x) for x in first[1:9]]  # user nice system idle iowait irq softirq steal
    except ValueError:
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) * 1000 / _TICKS


def own_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000


@dataclass(frozen=True, slots=True)
class CpuReading:
    """CPU times (ms) at one instant: the run's roles, every other process by pid, and the machine's busy time."""

    roles: dict[str, float | None]
    others: dict[int, float]
    machine: float | None


class CpuMeter:
    """CPU time consumed by the run's processes, by role: ``zookeeper`` (when started here), ``broker``,
    ``workers`` (summed) and ``driver`` (this process); by every other process of the machine; and by the machine as
    a whole (``/proc/stat``: what is busy beyond the processes is the kernel's own work, such as loopback networking
    in interrupts).  Linux ``/proc``; a role that cannot be read is None."""

    def __init__(self) -> None:
        self.pids: dict[str, list[int]] = {}

    def set(self, role: str, pids: list[int]) -> None:
        self.pids[role] = pids

    def read(self) -> CpuReading:
        roles: dict[str, float | None] = {}
        for role, pids in self.pids.items():
            values = [process_cpu_ms(pid) for pid in pids]
            roles[role] = None if not values or any(v is None for v in values) else sum(v or 0.0 for v in values)
        roles["driver"] = own_cpu_ms()
        ours = {os.getpid(), *(pid for pids in self.pids.values() for pid in pids)}
        others: dict[int, float] = {}
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if entry.name.isdigit() and int(entry.name) not in ours:
                    ms = process_cpu_ms(int(entry.name))
                    if ms is not None:
                        others[int(entry.name)] = ms
        return CpuReading(roles, others, machine_busy_ms())
