"""The child processes a scale run starts besides ZooKeeper and the brokers: swarms and the py-spy profiler."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from zkcoord.bench.scale.params import GROUP_PREFIX, TOPIC, Params
from zkcoord.testbed.procs import ProcessError


class SwarmProcess:
    """``python -m zkcoord.bench.scale.swarm`` for a range of groups, output to a log file."""

    def __init__(self, index: int, *, params: Params, first: int, last: int, hosts: str, run_dir: Path) -> None:
        self.index = index
        self.ready_file = run_dir / f"swarm-{index}.ready.json"
        self.stats_file = run_dir / f"swarm-{index}.stats.json"
        self.log_path = run_dir / f"swarm-{index}.log"
        self.args = [
            sys.executable,
            "-m",
            "zkcoord.bench.scale.swarm",
            "--zk",
            hosts,
            "--groups",
            f"{first}..{last}",
            "--group-prefix",
            GROUP_PREFIX,
            "--per-group",
            str(params.per_group),
            "--topic",
            TOPIC,
            "--session-timeout",
            f"{params.consumer_session_timeout_s:g}",
            "--host",
            f"swarm{index}",
            "--ready-file",
            str(self.ready_file),
            "--stats-file",
            str(self.stats_file),
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> SwarmProcess:
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ProcessError(f"swarm {self.index} exited with {self.proc.returncode}: {self.tail()}")

    def tail(self, lines: int = 5) -> str:
        with contextlib.suppress(OSError):
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def terminate(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (the swarm closes its sessions and writes its stats), SIGKILL after ``timeout``."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode


class Profiler:
    """py-spy sampling one process (``--idle``: wall time, not only CPU), collapsed stacks to ``output``."""

    def __init__(self, pid: int, output: Path, rate: int) -> None:
        self.output = output
        exe = Path(sys.executable).with_name("py-spy")
        self.args = [
            str(exe if exe.exists() else "py-spy"),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--idle",
            "--threads",
            "--nonblocking",
            "--format",
            "raw",
            "--output",
            str(output),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Profiler:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # let it attach before anything happens
        if self.proc.poll() is not None:
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            raise ProcessError(f"py-spy failed to start: {err.strip()[:300]}")
        return self

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.proc = None
