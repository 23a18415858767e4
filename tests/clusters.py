"""The cluster the integration and hostile tests run on: brokers hosting coordinators, in the test's process, on one
ZooKeeper chroot, and an admin client to look at what they wrote.  The ``cluster`` fixture (tests/conftest.py) gives
each test one on its own chroot, torn down (brokers stopped, clients closed) after the test."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from tests.scripted import ScriptedConsumer
from zkcoord.broker import Broker, BrokerConfig
from zkcoord.coordinator import Coordinator, CoordinatorConfig, Role
from zkcoord.layout import paths
from zkcoord.layout.group_state import GroupPhase, GroupState
from zkcoord.runtime.journal import Journal, JournalEvent, read_journal
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ZkClient, ZkConfig

#: the brokers' ZooKeeper session timeout (s)
SESSION = 2.0


class Cluster:
    """Brokers hosting coordinators, in this process, on one ZooKeeper chroot."""

    def __init__(self, hosts: str, journal_dir: Path, stack: ExitStack) -> None:
        self.hosts = hosts
        self.journal_dir = journal_dir
        self.stack = stack
        self.brokers: dict[int, Broker] = {}
        self.admin_zk = stack.enter_context(ZkClient(ZkConfig.from_string(hosts)))

    def broker(self, broker_id: int, **config: object) -> Broker:
        coordinator = Coordinator(broker_id, CoordinatorConfig(**config))  # type: ignore[arg-type]
        zk = ZkConfig.from_string(self.hosts, session_timeout_s=SESSION)
        broker = Broker(
            BrokerConfig(broker_id, zk, host="h", takeover_wait_s=0.5),
            Journal(self.journal_dir, f"broker-{broker_id}"),
            [coordinator],
        )
        broker.start()
        self.stack.callback(broker.stop)
        self.brokers[broker_id] = broker
        return broker

    def coordinator(self, broker_id: int) -> Coordinator:
        service = self.brokers[broker_id].services[0]
        assert isinstance(service, Coordinator)
        return service

    def acting(self) -> list[int]:
        return [b for b in self.brokers if self.coordinator(b).role is Role.COORDINATOR]

    def consumer(self, group: str, subscription: dict[str, int], **kw: object) -> ScriptedConsumer:
        consumer = ScriptedConsumer(self.hosts, group, subscription, **kw)  # type: ignore[arg-type]
        self.stack.enter_context(consumer)
        return consumer

    def events(self, kind: str, **match: object) -> list[JournalEvent]:
        return [
            e
            for e in read_journal(self.journal_dir)
            if e.event == kind and all(e.fields.get(k) == v for k, v in match.items())
        ]

    def state(self, group: str) -> GroupState:
        data, _ = self.admin_zk.get(paths.group_state(group))
        return GroupState.decode(data)

    def is_stable(self, group: str, members: int) -> bool:
        try:
            state = self.state(group)
        except Exception:  # noqa: BLE001 (not written yet)
            return False
        return state.phase is GroupPhase.STABLE and len(state.members) == members

    def wait_stable(self, group: str, members: int, timeout: float = 20.0) -> GroupState:
        wait_until(lambda: self.is_stable(group, members), timeout, f"group {group} stable with {members} members")
        return self.state(group)
