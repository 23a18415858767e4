"""A real Spark standalone cluster for a test: one master and N workers, JVMs started from the installed PySpark's
``spark-class``, bound to 127.0.0.1, and stopped (with their executors) whatever happens.

The workers can be given a directory they must not see (``hidden``): they run in a mount namespace of their own with
an empty tmpfs over it, as executors on other hosts do not see a directory on the driver's local disk.  The driver
(the test's ``zkcoord analyze``) sees it as usual.  This needs ``unshare`` and either root or unprivileged user
namespaces; a machine without them fails the test that asks for it, with the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any

import pyspark

from zkcoord.testbed.procs import wait_until
from zkcoord.zkserver import LOOPBACK, free_ports

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"

#: Deadlines (s): a JVM's start on a 2-core machine busy with other tests takes seconds, not minutes.
START_S = 120.0
STOP_S = 15.0

#: The daemons do little: a small heap and the client compiler only (less CPU spent on JIT compilation).
DAEMON_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class StandaloneCluster:
    """``with StandaloneCluster(base, workers=2) as c:`` then ``zkcoord analyze --master c.url`` with ``env=c.env``.

    ``base`` holds the logs (``master.log``, ``worker-N.log``), the workers' directories and ``conf/`` (the
    ``spark-defaults.conf`` every Spark process of the test reads through ``SPARK_CONF_DIR``).
    """

    def __init__(self, base: Path, workers: int = 2, *, hidden: Path | None = None) -> None:
        self.base = base
        self.workers = workers
        self.hidden = hidden
        port, ui, *worker_uis = free_ports(2 + workers, LOOPBACK)
        self.url = f"spark://{LOOPBACK}:{port}"
        self.port, self.ui, self.worker_uis = port, ui, worker_uis
        conf = base / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        # Executors of a test's small analysis: the client compiler only, like the daemons (cold JVMs that would
        # otherwise spend most of their CPU compiling code they run a few times).
        (conf / "spark-defaults.conf").write_text(
            f"spark.executor.extraJavaOptions {DAEMON_OPTS}\nspark.executor.memory 512m\n"
        )
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": DAEMON_OPTS,
        }
        self._procs: list[tuple[str, subprocess.Popen[bytes], IO[bytes]]] = []

    # --- start -----------------------------------------------------------------------------------------------------

    def __enter__(self) -> StandaloneCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.base / f"{name}.log").open("ab")
        # A session (process group) of its own: stop() signals the JVM and everything it started (executors).
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self._procs.append((name, proc, log))

    def _start(self) -> None:
        self._spawn(
            "master",
            [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", LOOPBACK, "--port", str(self.port),
             "--webui-port", str(self.ui)],
        )  # fmt: skip
        # Workers started before the master listens retry only after several seconds: wait for the master first.
        self._wait(lambda s: s is not None, "the Spark master to answer")
        for i, ui in enumerate(self.worker_uis, 1):
            work = self.base / f"worker-{i}"
            work.mkdir(exist_ok=True)
            worker = [
                str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", self.url, "--host", LOOPBACK,
                "--cores", "1", "--memory", "1g", "--webui-port", str(ui), "--work-dir", str(work),
            ]  # fmt: skip
            self._spawn(f"worker-{i}", self._hiding(worker) if self.hidden is not None else worker)
        self._wait(lambda s: s is not None and self.alive_workers(s) == self.workers, f"{self.workers} workers")

    def _hiding(self, command: list[str]) -> list[str]:
        """``command`` in a mount namespace where :attr:`hidden` is an empty tmpfs."""
        namespace = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", "--mount"]
        script = 'mount -t tmpfs -o size=1m zkcoord-hidden "$0" && exec "$@"'
        return [*namespace, "sh", "-c", script, str(self.hidden), *command]

    def _wait(self, ready: Any, what: str) -> None:
        def check() -> bool:
            for name, proc, _log in self._procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}): {self.tail(name)}")
            return bool(ready(self.state()))

        wait_until(check, START_S, what, interval=0.2)

    # --- state -----------------------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any] | None:
        """The master's state (its web UI's ``/json/``), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.ui}/json/", timeout=2) as reply:
                return dict(json.load(reply))
        except (OSError, ValueError, urllib.error.URLError):
            return None

    @staticmethod
    def alive_workers(state: dict[str, Any]) -> int:
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def tail(self, name: str, lines: int = 5) -> str:
        try:
            text = (self.base / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(ln for ln in text.splitlines() if not ln.startswith("\tat "))[-2000:].rsplit("\n", lines)[-1]

    # --- stop ------------------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGTERM every JVM's process group (workers first: they stop their executors), SIGKILL what is left after
        :data:`STOP_S`.  Idempotent."""
        for _name, proc, _log in reversed(self._procs):
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        for _name, proc, log in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
            # executors or a JVM that ignored SIGTERM: the whole group, by its id
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
            log.close()
        self._procs.clear()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)
