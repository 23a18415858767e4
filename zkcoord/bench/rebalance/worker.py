"""A benchmark worker: one process hosting many consumers of one protocol, each its own ZooKeeper session.

    python -m zkcoord.bench.rebalance.worker --protocol coordinator|incremental|consumer|zk-client \\
        --zk HOST:PORT[/chroot] \\
        --data-dir DIR --journal DIR --index N [--session-timeout 6] [--legacy-backoff 2.0] [--legacy-retries 4] \\
        [--max-poll-records 50] [--shutdown-timeout 8]

The consumers are the real ones (:class:`consumer.Consumer`, created with ``rebalance="incremental"`` for the
``incremental`` protocol and ``rebalance="consumer"`` (KIP-848) for ``consumer``, or
:class:`zkcoord.consumer.legacy.LegacyConsumer`), sharing one journal,
``<journal>/consumer-bench<N>.<pid>.jsonl``.  They are paused (``Consumer.pause()``: nothing is read or handed
out), so that the consumers of one process spend the CPU they get on the control plane, not on a fetch loop (what
``zkcoord/bench/consumer`` found necessary, there for one process).  One thread calls ``poll(0)`` on each in turn
every :data:`POLL_EVERY_S` (:class:`zkcoord.testbed.poll_loop.PollLoop`), as an application's loop would: a stop is
acknowledged only once the application's ``poll()`` has run its revoke callback (``docs/consumer.md``), so a
measured rebalance includes that wait.

The driver (:mod:`zkcoord.bench.rebalance`) controls a worker through its standard input, one JSON object per line,
and reads one JSON reply line per command on its standard output (logging goes to standard error)::

    {"op": "add", "group": G, "topic": T, "count": K}   -> {"ok": true, "consumers": [ids...]}
    {"op": "add", ..., "instance_ids": [I, ...]}         -> the same, one static member per instance id (consumer)
    {"op": "remove", "consumer": ID}                     -> {"ok": true, "consumer": ID}
    {"op": "restart", "consumer": ID}                    -> {"ok": true, "consumer": NEW_ID, "previous": ID,
                                                             "instance_id": I, "closed_ms": MS, "started_ms": MS}
    {"op": "ping"}                                       -> {"ok": true, "pid": PID, "consumers": N}
    {"op": "quit"}                                       -> {"ok": true}, then every consumer is closed

``add`` starts the consumers one after the other (``start()`` returns once the member znode exists); ``remove``
closes one (it deregisters); ``restart`` closes one and at once starts a new consumer with its group, topic and
instance id (a static member's restart: ``closed_ms`` and ``started_ms`` time its ``close()`` and the new one's
``start()``).  A failure is answered ``{"ok": false, "error": "..."}`` and the worker carries on.

End of input, ``quit``, SIGTERM and SIGINT stop the worker as ``zkcoord consume`` stops (docs/consumer.md,
"Stopping"; :class:`zkcoord.runtime.stopping.SignalStop`): every consumer is closed, in parallel, within one budget of
``--shutdown-timeout`` seconds whatever ZooKeeper does; each consumer journals ``shutdown.incomplete`` for what it
skipped.  Exit 0 when every close was complete, 3 when one was not (one ``Warning:`` line says what), ``128 +
signal`` on a second signal (at once).  The timeout is refused unless the stop ends (watchdog margin included) before
the driver's SIGKILL (:data:`zkcoord.runtime.shutdown.KILL_GRACE_S` after its SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from zkcoord.consumer import Consumer, ConsumerConfig, Subscription
from zkcoord.consumer.config import Rebalance
from zkcoord.consumer.legacy import LegacyConfig, LegacyConsumer
from zkcoord.errors import ZkCoordError
from zkcoord.runtime.journal import Journal, process_started
from zkcoord.runtime.shutdown import (
    DEFAULT_CONSUMER_TIMEOUT_S,
    KILL_GRACE_S,
    MIN_TIMEOUT_S,
    UNFINISHED,
    StopBudget,
    StopReport,
    hard_bound,
)
from zkcoord.runtime.stopping import SignalStop
from zkcoord.testbed.poll_loop import PollLoop

log = logging.getLogger("zkcoord.bench.rebalance.worker")

PROTOCOLS = ("coordinator", "incremental", "classic", "consumer", "zk-client")
#: the ``rebalance`` setting of :class:`ConsumerConfig` for each protocol but ``zk-client``
REBALANCE: dict[str, Rebalance] = {
    "coordinator": "eager",
    "incremental": "incremental",
    "classic": "classic",
    "consumer": "consumer",
}

#: How often the main thread looks whether the commands ended while it waits for them or for a signal (its signal
#: handlers run between these waits).
_WAIT_SLICE_S = 0.2

AnyConsumer = Consumer | LegacyConsumer

#: how often the poll thread calls ``poll(0)`` on every consumer of the worker (an application's poll loop, s)
POLL_EVERY_S = 0.01


class Worker:
    """The consumers of one worker process, by id.  :meth:`handle` runs on the command thread, :meth:`close_all` on
    the main thread; the lock keeps a consumer started meanwhile from escaping the stop."""

    def __init__(self, args: argparse.Namespace, journal: Journal) -> None:
        self.args = args
        self.journal = journal
        self.consumers: dict[str, AnyConsumer] = {}
        #: consumer id -> (group, topic, instance id): what a restart starts again
        self.placed: dict[str, tuple[str, str, str | None]] = {}
        #: what the stop skipped, every consumer's (filled by close_all and by an add the stop overtook)
        self.report = StopReport()
        #: cleared while a command runs
        self.idle = threading.Event()
        self.idle.set()
        self._lock = threading.Lock()
        self._stopping: StopBudget | None = None
        #: the consumers' application loop (paused consumers: poll() returns nothing but runs their callbacks)
        self.polling = PollLoop(POLL_EVERY_S, name="worker-poll")

    def new_consumer(self, group: str, topic: str, instance_id: str | None = None) -> AnyConsumer:
        """A consumer of this worker's protocol, paused (not started).  :raises ConfigurationError: an instance id
        with a protocol other than ``consumer``, or one that is not valid."""
        config = ConsumerConfig(
            group=group,
            subscription=Subscription.static({topic: 1}),
            zk=self.args.zk,
            data_dir=self.args.data_dir,
            session_timeout_s=self.args.session_timeout,
            max_poll_records=self.args.max_poll_records,
            rebalance=REBALANCE.get(self.args.protocol, "eager"),
            instance_id=instance_id,
        )
        if self.args.protocol == "zk-client":
            legacy = LegacyConfig(
                rebalance_max_retries=self.args.legacy_retries, rebalance_backoff_s=self.args.legacy_backoff
            )
            return LegacyConsumer(config, legacy=legacy, journal=self.journal)
        consumer = Consumer(config, journal=self.journal)
        consumer.pause()
        return consumer

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.get("op")
        if op == "ping":
            return {"ok": True, "pid": self.journal.pid, "consumers": len(self.consumers)}
        if op == "add":
            group, topic, count = str(command["group"]), str(command["topic"]), int(command.get("count", 1))
            instances = [str(i) for i in command.get("instance_ids") or []]
            if instances and len(instances) != count:
                return {"ok": False, "error": f"{len(instances)} instance ids for {count} consumers"}
            started = [self.start_one(group, topic, instances[k] if instances else None) for k in range(count)]
            return {"ok": True, "consumers": started}
        if op == "remove":
            consumer_id = str(command["consumer"])
            if consumer_id not in self.consumers:
                return {"ok": False, "error": f"no consumer {consumer_id} in this worker"}
            self.close_one(consumer_id)
            return {"ok": True, "consumer": consumer_id}
        if op == "restart":
            consumer_id = str(command["consumer"])
            if consumer_id not in self.consumers:
                return {"ok": False, "error": f"no consumer {consumer_id} in this worker"}
            group, topic, instance_id = self.placed[consumer_id]
            began = time.monotonic()
            self.close_one(consumer_id)
            closed = time.monotonic()
            new_id = self.start_one(group, topic, instance_id)
            return {
                "ok": True,
                "consumer": new_id,
                "previous": consumer_id,
                "instance_id": instance_id,
                "closed_ms": round((closed - began) * 1000, 1),
                "started_ms": round((time.monotonic() - closed) * 1000, 1),
            }
        return {"ok": False, "error": f"unknown command {op!r}"}

    def start_one(self, group: str, topic: str, instance_id: str | None) -> str:
        """Start one consumer (``start()`` returns once its member znode exists); its id.  Command thread.

        :raises RuntimeError: the worker's stop began meanwhile (the consumer is closed within its budget).
        """
        consumer = self.new_consumer(group, topic, instance_id)
        try:
            consumer.start()
        except BaseException:
            # whatever start() got to: threads, session
            with contextlib.suppress(ZkCoordError, OSError, RuntimeError):
                consumer.close(timeout=self.args.shutdown_timeout)
            raise
        with self._lock:
            stopping = self._stopping
            if stopping is None:
                self.consumers[consumer.consumer_id] = consumer
                self.placed[consumer.consumer_id] = (group, topic, instance_id)
                if isinstance(consumer, Consumer):
                    self.polling.add(consumer)
        if stopping is not None:  # the stop began while it started: closed within the same budget
            self.report.merge(consumer.close(budget=stopping))
            raise RuntimeError("the worker is stopping")
        return consumer.consumer_id

    def close_one(self, consumer_id: str) -> None:
        """Close one consumer (it deregisters; a static member's instance id is released with its session)."""
        leaving = self.consumers.pop(consumer_id)
        self.placed.pop(consumer_id, None)
        if isinstance(leaving, Consumer):
            self.polling.remove(leaving)
        leaving.close(timeout=self.args.shutdown_timeout)

    def close_all(self, budget: StopBudget) -> StopReport:
        """Close every consumer in parallel within ``budget`` (each journals what it skipped) and return what they
        skipped together, with a command still running at ``budget.session`` as ``unfinished``.  Main thread;
        blocks until ``budget.session`` at most."""
        self.polling.close()
        with self._lock:
            self._stopping = budget
            consumers, self.consumers = list(self.consumers.values()), {}
        if consumers:
            with ThreadPoolExecutor(max_workers=min(32, len(consumers)), thread_name_prefix="close") as pool:
                for future in [pool.submit(c.close, budget=budget) for c in consumers]:
                    try:
                        self.report.merge(future.result())
                    except (ZkCoordError, OSError, RuntimeError) as e:  # keep closing the others
                        log.exception("closing a consumer failed")
                        self.report.skip(UNFINISHED, e)
        if not self.idle.wait(budget.session.remaining()):
            self.report.skip(UNFINISHED, "a command was still running at the stop deadline")
        return self.report


def reply(out: TextIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message, separators=(",", ":")) + "\n")
    out.flush()


def serve(worker: Worker, inp: TextIO, out: TextIO) -> None:
    """Answer commands until ``quit`` or the end of input."""
    for line in inp:
        if not line.strip():
            continue
        try:
            command = json.loads(line)
        except ValueError as e:
            reply(out, {"ok": False, "error": f"bad command: {e}"})
            continue
        if not isinstance(command, dict):
            reply(out, {"ok": False, "error": "bad command: not a JSON object"})
            continue
        if command.get("op") == "quit":
            reply(out, {"ok": True, "op": "quit"})
            return
        worker.idle.clear()
        try:
            answer = worker.handle(command)
        except (ZkCoordError, KeyError, ValueError, RuntimeError) as e:
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        finally:
            worker.idle.set()
        reply(out, {"op": command.get("op"), **answer})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m zkcoord.bench.rebalance.worker", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--protocol", choices=PROTOCOLS, required=True)
    parser.add_argument("--zk", required=True, help="HOST:PORT[/chroot]")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--session-timeout", type=float, default=6.0)
    parser.add_argument("--legacy-backoff", type=float, default=2.0)
    parser.add_argument("--legacy-retries", type=int, default=4)
    parser.add_argument("--max-poll-records", type=int, default=50)
    parser.add_argument(
        "--shutdown-timeout",
        type=_shutdown_timeout,
        default=DEFAULT_CONSUMER_TIMEOUT_S,
        help=f"seconds the stop may take, whatever ZooKeeper does (default %(default)g; below {KILL_GRACE_S:g} s, "
        "the driver's SIGKILL, with the watchdog's margin); exit 3 if a consumer's close skipped steps",
    )
    return parser.parse_args(argv)


def _shutdown_timeout(text: str) -> float:
    seconds = float(text)
    if not seconds >= MIN_TIMEOUT_S or hard_bound(seconds) >= KILL_GRACE_S:  # NaN too
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_TIMEOUT_S:g} s and end before the driver's SIGKILL ({KILL_GRACE_S:g} s, "
            f"watchdog margin included), got {text}"
        )
    return seconds


def main(argv: list[str] | None = None) -> int:
    """Serve commands on a thread of their own until ``quit``, the end of input or a signal; then stop within the
    budget and return (or exit with) the status.  Main thread (the signal handlers run on it)."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # connection chatter while sessions close
    stop = SignalStop(f"bench worker {args.index}", args.shutdown_timeout)
    journal = Journal(args.journal, f"consumer-bench{args.index}")
    stop.attach(journal, worker=args.index)
    process_started(journal, sys.argv)
    worker = Worker(args, journal)
    served = threading.Event()

    def commands() -> None:
        try:
            serve(worker, sys.stdin, sys.stdout)
        finally:
            served.set()

    # A daemon: blocked reading the driver's input when a signal comes, it is not waited for.
    threading.Thread(target=commands, name="worker-commands", daemon=True).start()
    while not (served.is_set() or stop.requested.is_set()):
        served.wait(_WAIT_SLICE_S)
    code = stop.finish(worker.close_all(stop.begin()))
    journal.emit("process.stopped", reason="signal" if stop.requested.is_set() else "done")
    journal.close()
    if code != 0:
        stop.exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
