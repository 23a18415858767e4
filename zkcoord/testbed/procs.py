"""Child processes of the project's own commands, started and stopped for real (demo, tests, benchmarks).

A :class:`ChildProcess` runs ``python -m zkcoord ...`` with its output captured to a log file, and stops with a
real signal.  Waiting is always on a condition with a deadline: :func:`wait_until`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from zkcoord.errors import ZkCoordError
from zkcoord.runtime.shutdown import KILL_GRACE_S


class ProcessError(ZkCoordError):
    """A child process failed to start, exited with an error, or did not reach a state in time."""


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    interval: float = 0.02,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Poll ``condition`` until it is true; raise :class:`ProcessError` naming ``what`` after ``timeout`` s."""
    deadline = clock() + timeout
    while not condition():
        if clock() >= deadline:
            raise ProcessError(f"timed out after {timeout:g} s waiting for {what}")
        # A short blocking wait between polls; the condition is the thing waited on, with a deadline.
        time.sleep(interval)


class ChildProcess:
    """``python -m zkcoord ARGS`` as a child, output to ``log_path``.  Context manager: terminates on exit.

    ``prefix``: a command that runs the rest in place of itself (``exec``), so that the child's pid is zkcoord's:
    ``nsenter --net=PATH`` starts it on another host's network (:mod:`zkcoord.testbed.multihost`).
    """

    def __init__(
        self, args: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None, prefix: Sequence[str] = ()
    ) -> None:
        self.args = [*prefix, sys.executable, "-m", "zkcoord", *args]
        self._shown = len(prefix) + 3  # where zkcoord's own arguments start, for messages
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> ChildProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise ProcessError("process not started")
        return self._proc

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            self.proc.send_signal(signum)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            shown = " ".join(self.args[self._shown : self._shown + 2])
            raise ProcessError(f"{shown} did not exit within {timeout:g} s") from e

    def terminate(self, timeout: float = KILL_GRACE_S) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` (by default after any default ``--shutdown-timeout`` stop is
        over); return the exit status."""
        if self._proc is None:
            return 0
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> ChildProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.terminate()


def run_command(args: Sequence[str], log_path: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    """Run ``zkcoord ARGS`` to completion; return its output; raise :class:`ProcessError` on failure."""
    child = ChildProcess(args, log_path, env=env).start()
    status = child.wait(timeout)
    child.terminate()
    if status != 0:
        raise ProcessError(f"zkcoord {' '.join(args[:2])} failed with status {status}: {child.tail(1)}")
    return log_path.read_text(errors="replace")
