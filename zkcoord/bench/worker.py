"""A benchmark worker: one process hosting many consumers of one protocol, each its own ZooKeeper session.

    python -m zkcoord.bench.worker --protocol coordinator|incremental|zk-client --zk HOST:PORT[/chroot] \\
        --data-dir DIR --journal DIR --index N [--session-timeout 6] [--legacy-backoff 2.0] [--legacy-retries 4] \\
        [--max-poll-records 50]

The consumers are the real ones (:class:`consumer.Consumer`, created with ``rebalance="incremental"`` for the
``incremental`` protocol, or :class:`consumer.legacy.LegacyConsumer`), sharing one journal,
``<journal>/consumer-bench<N>.<pid>.jsonl``.  They never ``poll()``: each fetcher fills its prefetch buffer with one
read and then idles, so that the consumers of one process spend the CPU they get on the control plane, not on a
fetch loop (what ``benchmarks/consumerbench`` found necessary, there for one process).

The driver (:mod:`zkcoord.bench.rebalance`) controls a worker through its standard input, one JSON object per line,
and reads one JSON reply line per command on its standard output (logging goes to standard error)::

    {"op": "add", "group": G, "topic": T, "count": K}   -> {"ok": true, "consumers": [ids...]}
    {"op": "remove", "consumer": ID}                     -> {"ok": true, "consumer": ID}
    {"op": "ping"}                                       -> {"ok": true, "pid": PID, "consumers": N}
    {"op": "quit"}                                       -> {"ok": true}, then every consumer is closed

``add`` starts the consumers one after the other (``start()`` returns once the member znode exists); ``remove``
closes one (it deregisters).  A failure is answered ``{"ok": false, "error": "..."}`` and the worker carries on.
End of input, ``quit`` and SIGTERM close every consumer, in parallel, and exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn, TextIO

from consumer import Consumer, ConsumerConfig, Subscription
from consumer.legacy import LegacyConfig, LegacyConsumer
from zkcoord.errors import ZkCoordError
from zkcoord.journal import Journal, process_started

log = logging.getLogger("zkcoord.bench.worker")

PROTOCOLS = ("coordinator", "incremental", "zk-client")
#: How long closing one consumer may take, whatever ZooKeeper does (its close() budget).
CLOSE_TIMEOUT_S = 10.0

AnyConsumer = Consumer | LegacyConsumer


class Stopped(Exception):  # a signal, not an error
    """SIGTERM arrived: close everything and exit 0."""


class Worker:
    """The consumers of one worker process, by id."""

    def __init__(self, args: argparse.Namespace, journal: Journal) -> None:
        self.args = args
        self.journal = journal
        self.consumers: dict[str, AnyConsumer] = {}

    def new_consumer(self, group: str, topic: str) -> AnyConsumer:
        config = ConsumerConfig(
            group=group,
            subscription=Subscription.static({topic: 1}),
            zk=self.args.zk,
            data_dir=self.args.data_dir,
            session_timeout_s=self.args.session_timeout,
            max_poll_records=self.args.max_poll_records,
            rebalance="incremental" if self.args.protocol == "incremental" else "eager",
        )
        if self.args.protocol == "zk-client":
            legacy = LegacyConfig(
                rebalance_max_retries=self.args.legacy_retries, rebalance_backoff_s=self.args.legacy_backoff
            )
            return LegacyConsumer(config, legacy=legacy, journal=self.journal)
        return Consumer(config, journal=self.journal)

    def handle(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command.get("op")
        if op == "ping":
            return {"ok": True, "pid": self.journal.pid, "consumers": len(self.consumers)}
        if op == "add":
            group, topic, count = str(command["group"]), str(command["topic"]), int(command.get("count", 1))
            started: list[str] = []
            for _ in range(count):
                consumer = self.new_consumer(group, topic)
                try:
                    consumer.start()
                except BaseException:
                    # whatever start() got to: threads, session
                    with contextlib.suppress(ZkCoordError, OSError, RuntimeError):
                        consumer.close(timeout=CLOSE_TIMEOUT_S)
                    raise
                self.consumers[consumer.consumer_id] = consumer
                started.append(consumer.consumer_id)
            return {"ok": True, "consumers": started}
        if op == "remove":
            consumer_id = str(command["consumer"])
            if consumer_id not in self.consumers:
                return {"ok": False, "error": f"no consumer {consumer_id} in this worker"}
            self.consumers.pop(consumer_id).close(timeout=CLOSE_TIMEOUT_S)
            return {"ok": True, "consumer": consumer_id}
        return {"ok": False, "error": f"unknown command {op!r}"}

    def close_all(self) -> None:
        consumers, self.consumers = list(self.consumers.values()), {}
        if not consumers:
            return
        with ThreadPoolExecutor(max_workers=min(32, len(consumers)), thread_name_prefix="close") as pool:
            for future in [pool.submit(c.close, CLOSE_TIMEOUT_S) for c in consumers]:
                try:
                    future.result()
                except (ZkCoordError, OSError, RuntimeError):  # keep closing the others
                    log.exception("closing a consumer failed")


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
        try:
            answer = worker.handle(command)
        except (ZkCoordError, KeyError, ValueError, RuntimeError) as e:
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        reply(out, {"op": command.get("op"), **answer})


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m zkcoord.bench.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=PROTOCOLS, required=True)
    parser.add_argument("--zk", required=True, help="HOST:PORT[/chroot]")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--session-timeout", type=float, default=6.0)
    parser.add_argument("--legacy-backoff", type=float, default=2.0)
    parser.add_argument("--legacy-retries", type=int, default=4)
    parser.add_argument("--max-poll-records", type=int, default=50)
    return parser.parse_args(argv)


def _on_sigterm(_signum: int, _frame: object) -> NoReturn:
    raise Stopped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # connection chatter while sessions close
    journal = Journal(args.journal, f"consumer-bench{args.index}")
    process_started(journal, sys.argv)
    worker = Worker(args, journal)
    reason = "done"
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        serve(worker, sys.stdin, sys.stdout)
    except Stopped:
        reason = "signal"
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one clean shutdown, not two
        worker.close_all()
        journal.emit("process.stopped", reason=reason)
        journal.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
