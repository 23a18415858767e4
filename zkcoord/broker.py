"""The broker process: registers ``/brokers/ids/<id>`` and hosts services (the coordinator elector).

A broker keeps one ZooKeeper session.  Its registration is an ephemeral znode with Kafka 0.8's JSON; when the
session expires the node vanishes, and the broker registers again in its new session.  Services it hosts (the
coordinator elector arrives with the coordinator) share the session and are started and stopped with it.

Threads: kazoo's connection thread only enqueues state changes (:meth:`Broker._on_state`); one worker thread,
``broker-<id>``, owns every ZooKeeper call of the broker itself.

State machine (:class:`BrokerState`)::

    NEW --start()--> REGISTERED --session lost--> UNREGISTERED --re-registered--> REGISTERED
     |                  |                               |
     +--start() fails--> STOPPED <------stop()-----------+

Stopping is bounded (:mod:`zkcoord.runtime.shutdown`): services first, then the registration is deleted within the
budget's ZooKeeper phase, then the session is closed without waiting past the budget; what could not be done is
returned as a :class:`~zkcoord.runtime.shutdown.StopReport` and journalled as ``shutdown.incomplete``.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from zkcoord.errors import (
    AccessRefusedError,
    BrokerIdInUseError,
    ConfigurationError,
    NodeExistsError,
    NoNodeError,
    ZkCoordError,
    ZkError,
)
from zkcoord.layout import paths
from zkcoord.layout.acl import group_of
from zkcoord.layout.names import validate_rack
from zkcoord.layout.paths import MAX_BROKER_ID
from zkcoord.layout.registrations import BrokerRegistration
from zkcoord.runtime.journal import Journal
from zkcoord.runtime.refusals import GROUP, STOP, Refusals
from zkcoord.runtime.shutdown import (
    DEFAULT_BROKER_TIMEOUT_S,
    DEREGISTER,
    SESSION,
    StopBudget,
    StopReport,
    validate_timeout,
)
from zkcoord.zk import ConnState, Stat, ZkClient, ZkConfig

log = logging.getLogger(__name__)


def _judge(error: AccessRefusedError) -> str:
    """A refusal of one group's znode fails that group's rebalance only; anything else (the broker's registration,
    the election, the shared parents) means this identity cannot be a broker here: the broker stops."""
    return STOP if group_of(error.path) is None else GROUP


class BrokerState(Enum):
    NEW = "new"
    REGISTERED = "registered"
    UNREGISTERED = "unregistered"
    STOPPED = "stopped"


_LEGAL = {
    BrokerState.NEW: {BrokerState.REGISTERED, BrokerState.STOPPED},
    BrokerState.REGISTERED: {BrokerState.UNREGISTERED, BrokerState.STOPPED},
    BrokerState.UNREGISTERED: {BrokerState.REGISTERED, BrokerState.STOPPED},
    BrokerState.STOPPED: set(),
}


class BrokerService(Protocol):
    """Something a broker hosts on its session (the coordinator elector, for one).

    ``start`` is called once the broker is registered, on the broker's worker thread; ``stop`` on shutdown, from
    the thread stopping the broker, and must return within ``timeout`` seconds (ZooKeeper calls are bounded by then:
    :meth:`ZkClient.bound`).
    """

    name: str

    def start(self, zk: ZkClient, journal: Journal) -> None: ...

    def stop(self, timeout: float = ...) -> None: ...


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """A broker's settings.  Validates itself; raises :class:`ConfigurationError`.

    ``port`` is the port a broker advertises in its registration (Kafka's field); zkcoord's data plane is the shared
    partition log, so nothing listens on it.
    """

    broker_id: int
    zk: ZkConfig
    host: str = field(default_factory=socket.gethostname)
    port: int = 9092
    #: How long start() waits for a leftover registration of the same id (a crashed predecessor whose session has
    #: not expired yet) to vanish before it decides the id belongs to a live broker.  None: the session timeout.
    takeover_wait_s: float | None = None
    #: how long :meth:`Broker.stop` may take (``--shutdown-timeout``), whatever ZooKeeper does
    shutdown_timeout_s: float = DEFAULT_BROKER_TIMEOUT_S
    #: the broker's rack (Kafka's ``broker.rack``), published in its registration; None: none
    rack: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.broker_id <= MAX_BROKER_ID:
            raise ConfigurationError(f"broker id must be between 0 and {MAX_BROKER_ID}, got {self.broker_id}")
        if not 1 <= self.port <= 65535:
            raise ConfigurationError(f"port must be between 1 and 65535, got {self.port}")
        validate_timeout(self.shutdown_timeout_s)
        if self.rack is not None:
            validate_rack(self.rack)

    @property
    def wait_s(self) -> float:
        return self.takeover_wait_s if self.takeover_wait_s is not None else self.zk.session_timeout_s + 1.0


_STOP = "stop"
_ENSURE = "ensure-registered"


class Broker:
    """One broker: a ZooKeeper session, its registration, and the services hosted on it.

    Use ``start()`` (blocks until registered) and ``stop()`` (idempotent), or the context manager.
    """

    def __init__(
        self,
        config: BrokerConfig,
        journal: Journal | None = None,
        services: Sequence[BrokerService] = (),
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        on_refused: Callable[[AccessRefusedError], None] | None = None,
    ) -> None:
        self.config = config
        self.journal = journal or Journal(None, f"broker-{config.broker_id}")
        self.services = list(services)
        self._clock = clock
        self._wall_ms = wall_ms
        self.zk = ZkClient(config.zk, name=f"broker-{config.broker_id}")
        self._events: queue.Queue[tuple[str, object]] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._state = BrokerState.NEW
        self._state_lock = threading.Lock()
        self.registered = threading.Event()
        self.registrations = 0
        #: the registration data last written (the node's data while nobody else writes to it)
        self._written = b""
        #: every refusal journalled (``zk.refused``); the first of the broker's own (not one group's) ends its work:
        #: set here, and ``on_refused`` called (the command line stops the process: :mod:`zkcoord.runtime.refusals`)
        self.refused = threading.Event()
        self._on_refused = on_refused
        self.refusals = Refusals(self.journal, self._refused, _judge, broker=config.broker_id)
        self.zk.refusals.add(self.refusals)

    @property
    def path(self) -> str:
        return paths.broker(self.config.broker_id)

    @property
    def state(self) -> BrokerState:
        return self._state

    def _set_state(self, new: BrokerState) -> None:
        with self._state_lock:
            if new is self._state:
                return
            if new not in _LEGAL[self._state]:
                raise RuntimeError(f"illegal broker transition {self._state.value} -> {new.value}")
            log.info("broker %d: %s -> %s", self.config.broker_id, self._state.value, new.value)
            self._state = new
        if new is BrokerState.REGISTERED:
            self.registered.set()
        else:
            self.registered.clear()

    def _refused(self, error: AccessRefusedError) -> None:
        """A refusal of the broker's own work (any thread: flags and the callback only)."""
        self.refused.set()
        if self._on_refused is not None:
            self._on_refused(error)

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def start(self) -> Broker:
        """Connect, register and start the hosted services.  Blocks.

        :raises BrokerIdInUseError: a live broker holds this id.
        :raises ZkUnavailableError: ZooKeeper cannot be reached.
        """
        self.zk.start()
        try:
            self.zk.add_listener(self._on_state)
            self.zk.ensure_paths(paths.COMMON_PATHS)
            self._register_at_start()
        except ZkCoordError:
            self._set_state(BrokerState.STOPPED)
            self.zk.stop()
            raise
        self._worker = threading.Thread(target=self._run, name=f"broker-{self.config.broker_id}", daemon=True)
        self._worker.start()
        self.watch_registration()
        for service in self.services:
            service.start(self.zk, self.journal)
        return self

    def stop(self, budget: StopBudget | None = None) -> StopReport:
        """Stop services, remove the registration (if still ours) and close the session, within ``budget`` (default:
        ``config.shutdown_timeout_s`` from now).  Idempotent (a second call reports nothing).

        Blocks until ``budget.session`` at most.  What could not be done (ZooKeeper unreachable) is returned and
        journalled (``shutdown.incomplete``): the registration and the coordinator's znode then stay until the
        session expires.
        """
        report = StopReport()
        if self._state is BrokerState.STOPPED:
            return report
        budget = budget or StopBudget.start(self.config.shutdown_timeout_s)
        self.zk.bound(budget.zookeeper)
        for service in reversed(self.services):
            service.stop(timeout=budget.zookeeper.remaining())
        if self._worker is not None:
            self._events.put((_STOP, None))
            self._worker.join(timeout=budget.zookeeper.remaining())
        session = self.zk.session_id
        try:
            if self._owns_registration():
                self.zk.delete(self.path)
                self.journal.emit("broker.deregistered", broker=self.config.broker_id)
        except ZkError as e:
            log.warning("broker %d: could not deregister: %s", self.config.broker_id, e)
            report.skip(DEREGISTER, e)
        self._set_state(BrokerState.STOPPED)
        if not self.zk.stop(timeout=budget.session.remaining()):
            report.skip(SESSION, f"session {session:#x} not closed")
        report.journal(self.journal, budget, broker=self.config.broker_id)
        return report

    def __enter__(self) -> Broker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- registration ------------------------------------------------------------------------------------------

    def _registration(self) -> bytes:
        config = self.config
        return BrokerRegistration(config.host, config.port, self._wall_ms(), rack=config.rack).encode()

    def _owner_of(self, stat: Stat | None) -> int | None:
        return None if stat is None else stat.ephemeralOwner

    def _owns_registration(self) -> bool:
        return self._owner_of(self.zk.exists(self.path)) == self.zk.session_id

    def _try_register(self) -> bool:
        """Create the ephemeral registration; True if it is (now) ours, False if another session holds it.

        The parents are created if missing: ``/brokers/ids`` deleted by hand (recursively, with every registration)
        must not keep a live broker unregistered."""
        self._written = self._registration()
        try:
            self.zk.create(self.path, self._written, ephemeral=True, makepath=True)
        except NodeExistsError:
            # A create retried after a connection loss may have landed in our own session: that is success
            # (Kafka's CheckedEphemeral, KAFKA-1387).
            return self._owns_registration()
        return True

    def _register_at_start(self) -> None:
        deadline = self._clock() + self.config.wait_s
        holder_seen = False
        while not self._try_register():
            if not holder_seen:
                holder_seen = True
                log.info(
                    "broker %d: id is registered by another session; waiting up to %.1f s for it to expire",
                    self.config.broker_id,
                    self.config.wait_s,
                )
            if self._clock() >= deadline:
                raise BrokerIdInUseError(self.config.broker_id, self.config.wait_s)
            self._wait_for_vanish(deadline)
        self._registered_now()

    def _wait_for_vanish(self, deadline: float) -> None:
        gone = threading.Event()

        def watch(_event: object) -> None:
            gone.set()

        try:
            if self.zk.exists(self.path, watch=watch) is None:
                return
        except NoNodeError:
            return
        gone.wait(timeout=max(0.0, deadline - self._clock()))

    def _registered_now(self) -> None:
        self.registrations += 1
        self._set_state(BrokerState.REGISTERED)
        self.journal.emit(
            "broker.registered",
            broker=self.config.broker_id,
            host=self.config.host,
            port=self.config.port,
            session=f"{self.zk.session_id:#x}",
            registrations=self.registrations,
        )

    # --- worker ------------------------------------------------------------------------------------------------

    def _on_state(self, state: ConnState) -> None:
        # kazoo's connection thread: enqueue only.
        self._events.put(("state", state))

    def _run(self) -> None:
        retry_at: float | None = None
        while True:
            timeout = None if retry_at is None else max(0.0, retry_at - self._clock())
            try:
                kind, arg = self._events.get(timeout=timeout)
            except queue.Empty:
                kind, arg = _ENSURE, None
            if kind == _STOP:
                return
            if isinstance(arg, ConnState):
                self.journal.emit("zk.state", state=arg.value, session=f"{self.zk.session_id:#x}")
                if arg is ConnState.LOST and self._state is BrokerState.REGISTERED:
                    self._set_state(BrokerState.UNREGISTERED)
                if arg is not ConnState.CONNECTED:
                    continue
            retry_at = None if self._ensure_registered() else self._clock() + 0.5

    def _ensure_registered(self) -> bool:
        """Register again if our node is gone (session expiry, or deleted by hand).  True when done."""
        if self._state is BrokerState.STOPPED or self.refused.is_set():
            return True  # (refused: retrying cannot help, and the process is stopping)
        try:
            if self._owns_registration():
                self._write_back()
                if self._state is not BrokerState.REGISTERED:
                    self._set_state(BrokerState.REGISTERED)
                return True
            if self._state is BrokerState.REGISTERED:
                self._set_state(BrokerState.UNREGISTERED)
            if self._try_register():
                self._registered_now()
                return True
            log.warning("broker %d: id still held by another session; will retry", self.config.broker_id)
        except ZkError as e:
            log.warning("broker %d: registration attempt failed (%s); will retry", self.config.broker_id, e)
        return False

    def _write_back(self) -> None:
        """Our registration's data is ours alone: if another client changed it (garbage, wrong types, another
        port), write ours back and say so (S7).  Conditional on the version read, so a later change is seen again.

        :raises ZkError: (the caller retries).
        """
        try:
            data, stat = self.zk.get(self.path)
        except NoNodeError:
            return  # gone meanwhile: the data watch brings us back to register again
        if data == self._written:
            return
        self.zk.set(self.path, self._written, version=stat.version)
        self.journal.emit(
            "input.rejected",
            what="broker registration",
            path=self.path,
            reason=f"changed by another client ({data[:60]!r}); written back",
        )

    def watch_registration(self) -> None:
        """Re-register if someone deletes our node while the session lives, and write our data back if someone
        changes it (both checked on the worker thread)."""

        def changed(data: bytes | None, stat: Stat | None) -> None:
            if stat is None or data != self._written:
                self._events.put((_ENSURE, None))

        self.zk.watch_data(self.path, changed)
