"""The legacy (``zk-client``) consumer against a real ZooKeeper: Kafka 0.8.2's paths, convergence, conflicts, churn.

Every member here is a :class:`~zkcoord.consumer.legacy.LegacyConsumer` in this process; no coordinator runs.  A broker
is faked by its ephemeral ``/brokers/ids/0`` (topics need one; the data plane is the partition log on disk).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.ledger import Ledger
from tests.zkutil import ZkFactory, expire_session
from zkcoord.consumer import ConsumerConfig, Subscription, TopicPartition
from zkcoord.consumer.legacy import LEGACY_EVENTS, LegacyConfig, LegacyConsumer
from zkcoord.data.partlog import PartitionWriter
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import ConfigurationError, NoNodeError
from zkcoord.layout import legacy_paths, paths
from zkcoord.layout.registrations import BrokerRegistration
from zkcoord.protocol.assignors import Assignor, range_assign, roundrobin_assign
from zkcoord.runtime import journal as journal_module
from zkcoord.runtime.journal import Journal, JournalEvent, read_journal
from zkcoord.testbed.procs import wait_until
from zkcoord.zk import ConnState, ZkClient, ZkConfig

pytestmark = pytest.mark.integration

SESSION = 4.0
#: Short backoff and a generous retry budget: conflicts resolve within a test's patience.
FAST = LegacyConfig(rebalance_max_retries=50, rebalance_backoff_s=0.1)
#: A thread id of a consumer that does not exist, for owner znodes planted by the tests.
GHOST = "g_ghost-1700000000000-deadbeef-0"

Record = tuple[str, int, int]


@pytest.fixture(autouse=True)
def _legacy_events(monkeypatch: pytest.MonkeyPatch) -> None:
    """The legacy event types, until they are added to ``zkcoord.runtime.journal.EVENTS``."""
    for name, description in LEGACY_EVENTS.items():
        monkeypatch.setitem(journal_module.EVENTS, name, description)


@dataclass
class Env:
    hosts: str
    data: Path
    journal_dir: Path
    admin: ZkClient
    stack: ExitStack
    producer: Journal
    produced: set[Record] = field(default_factory=set)
    partitions: dict[str, int] = field(default_factory=dict)
    made: int = 0

    def topic(self, name: str, partitions: int) -> None:
        TopicAdmin(self.admin).create(name, partitions)
        self.partitions[name] = partitions

    def produce(self, topic: str, per_partition: int) -> None:
        for p in range(self.partitions[topic]):
            values = [f"{topic}:{p}:{i}".encode() for i in range(per_partition)]
            with PartitionWriter(self.data, topic, p) as writer:
                first, last = writer.append_batch([(None, v) for v in values])
            self.producer.emit(
                "produce.batch",
                topic=topic,
                partition=p,
                first=first,
                last=last,
                count=last - first + 1,
                bytes=sum(map(len, values)),
            )
            self.produced.update((topic, p, o) for o in range(first, last + 1))

    def consumer(
        self,
        subscription: Subscription | None = None,
        legacy: LegacyConfig = FAST,
        group: str = "g",
        **kw: object,
    ) -> LegacyConsumer:
        self.made += 1
        config = ConsumerConfig(
            group=group,
            subscription=subscription or Subscription.static({"t": 1}),
            zk=self.hosts,
            data_dir=self.data,
            session_timeout_s=SESSION,
            max_poll_records=50,
            **kw,  # type: ignore[arg-type]
        )
        consumer = LegacyConsumer(config, legacy=legacy, journal=Journal(self.journal_dir, f"consumer-{self.made}"))
        self.stack.enter_context(consumer)
        return consumer

    def owners(self, group: str = "g") -> dict[TopicPartition, str]:
        """The owner znodes of ``group``, as ``partition -> value``."""
        out: dict[TopicPartition, str] = {}
        try:
            topics = self.admin.get_children(f"{legacy_paths.group_dir(group)}/owners")
        except NoNodeError:
            return out
        for topic in topics:
            try:
                parts = self.admin.get_children(legacy_paths.owners(group, topic))
            except NoNodeError:
                continue
            owner_paths = [legacy_paths.owner(group, topic, int(p)) for p in parts]
            for p, read in zip(parts, self.admin.get_many(owner_paths), strict=True):
                if read is not None:
                    out[TopicPartition(topic, int(p))] = read[0].decode()
        return out

    def events(self, kind: str, **match: object) -> list[JournalEvent]:
        return [
            e
            for e in read_journal(self.journal_dir)
            if e.event == kind and all(e.fields.get(k) == v for k, v in match.items())
        ]

    def expected(self, consumers: list[LegacyConsumer], assignor: Assignor = range_assign) -> dict[TopicPartition, str]:
        """What Kafka's assignor gives the group (static subscriptions only)."""
        subscriptions = {c.consumer_id: dict(c.config.subscription.topics) for c in consumers}
        whole = assignor(subscriptions, self.partitions)
        return {TopicPartition(t, p): thread for t, owners in whole.items() for p, thread in owners.items()}

    def converged(self, consumers: list[LegacyConsumer], assignor: Assignor = range_assign) -> bool:
        """Every partition owned exactly once, as the assignor decides, in ZooKeeper and by the fetchers."""
        expected = self.expected(consumers, assignor)
        fetching: dict[TopicPartition, str] = {}
        for c in consumers:
            for tp, thread in c.assignment().items():
                if tp in fetching:
                    return False
                fetching[tp] = thread
        return self.owners() == expected and fetching == expected

    def wait_converged(
        self, consumers: list[LegacyConsumer], assignor: Assignor = range_assign, timeout: float = 20.0
    ) -> None:
        wait_until(lambda: self.converged(consumers, assignor), timeout, f"{len(consumers)} consumers to converge")


@pytest.fixture
def env(zk_hosts: str, tmp_path: Path) -> Iterator[Env]:
    with ExitStack() as stack:
        admin = stack.enter_context(ZkClient(ZkConfig.from_string(zk_hosts)))
        broker = BrokerRegistration("localhost", 9092, time.time_ns() // 1_000_000)
        admin.create(paths.broker(0), broker.encode(), ephemeral=True, makepath=True)
        producer = stack.enter_context(Journal(tmp_path / "journal", "producer"))
        yield Env(zk_hosts, tmp_path / "data", tmp_path / "journal", admin, stack, producer)


def drain(consumers: list[LegacyConsumer], want: set[Record], got: Counter[Record], timeout: float = 20.0) -> None:
    """Poll every consumer until everything in ``want`` has been handed out (counting into ``got``)."""

    def done() -> bool:
        for consumer in consumers:
            got.update((r.topic, r.partition, r.offset) for r in consumer.poll(0.005))
        return want <= set(got)

    wait_until(done, timeout, f"{len(want)} records", interval=0)


def poll_until(consumers: list[LegacyConsumer], got: Counter[Record], count: int, timeout: float = 10.0) -> None:
    """Poll every consumer until ``got`` holds ``count`` distinct records."""

    def enough() -> bool:
        for consumer in consumers:
            got.update((r.topic, r.partition, r.offset) for r in consumer.poll(0.005))
        return len(got) >= count

    wait_until(enough, timeout, f"{count} records", interval=0)


def planted_owner(env: Env, topic: str, partition: int) -> ZkClient:
    """Another session holding ``/consumers/g/owners/<topic>/<partition>`` (a stale owner, as after a crash)."""
    other = env.stack.enter_context(ZkClient(ZkConfig.from_string(env.hosts)))
    other.create(legacy_paths.owner("g", topic, partition), GHOST.encode(), ephemeral=True, makepath=True)
    return other


def assert_clean(env: Env) -> None:
    """The journal alone shows: nothing lost, nothing twice, no partition fetched by two consumers at once."""
    ledger = Ledger.read(env.journal_dir, "g")
    assert ledger.total_produced() == len(env.produced)
    assert ledger.missing() == {}
    assert ledger.duplicates() == {}
    assert ledger.overlaps() == []


# --- the layout ---------------------------------------------------------------------------------------------------


def test_znodes_are_kafka_08_paths_and_formats(env: Env) -> None:
    env.topic("t", 2)
    env.produce("t", 30)
    c = env.consumer(Subscription.static({"t": 2}), auto_commit=False)
    cid = c.consumer_id
    wait_until(lambda: len(c.assignment()) == 2, 10, "both partitions")

    data, stat = env.admin.get(f"/consumers/g/ids/{cid}")
    registration = json.loads(data)
    assert set(registration) == {"version", "subscription", "pattern", "timestamp"}
    assert registration["version"] == 1
    assert registration["subscription"] == {"t": 2}
    assert registration["pattern"] == "static"
    assert isinstance(registration["timestamp"], str) and registration["timestamp"].isdigit()
    assert stat.ephemeralOwner == c.zk.session_id
    for p in (0, 1):  # range over threads <cid>-0, <cid>-1: one partition each
        data, stat = env.admin.get(f"/consumers/g/owners/t/{p}")
        assert data == f"{cid}-{p}".encode()
        assert stat.ephemeralOwner == c.zk.session_id

    drain([c], env.produced, Counter())
    assert c.commit() == {TopicPartition("t", 0): 30, TopicPartition("t", 1): 30}
    for p in (0, 1):
        data, stat = env.admin.get(f"/consumers/g/offsets/t/{p}")
        assert data == b"30"
        assert stat.ephemeralOwner == 0  # persistent
    assert sorted(env.admin.get_children("/consumers/g")) == ["ids", "offsets", "owners"]
    assert env.admin.exists(paths.GROUPS) is None, "the legacy protocol writes nothing of the coordinator's"
    registered = env.events("consumer.registered", consumer=cid)
    assert [e.fields["protocol"] for e in registered] == ["zk-client"]
    assert env.events("legacy.rebalance.completed", consumer=cid, partitions=2)

    c.close()
    assert env.admin.get_children("/consumers/g/ids") == []
    assert env.admin.get_children("/consumers/g/owners/t") == []
    assert env.events("consumer.deregistered", consumer=cid)


# --- convergence and consumption ----------------------------------------------------------------------------------


def test_three_consumers_converge_to_range_and_consume_everything_once(env: Env) -> None:
    env.topic("t", 7)
    env.produce("t", 100)
    got: Counter[Record] = Counter()
    first = env.consumer(Subscription.static({"t": 2}))
    consumers = [first]
    wait_until(lambda: len(first.assignment()) == 7, 10, "the first consumer owning everything")
    poll_until(consumers, got, 150)  # consumed, committed on the hand-overs below
    for joined in (1, 2):
        consumers.append(env.consumer())
        poll_until(consumers, got, 150 + 100 * joined)  # consumption goes on while the group rebalances
    env.wait_converged(consumers)
    assert len(env.expected(consumers)) == 7
    drain(consumers, env.produced, got)
    assert set(got) == env.produced
    assert_clean(env)
    assert all(c.metrics().rebalances >= 1 for c in consumers)


def test_roundrobin_converges_to_kafkas_assignment(env: Env) -> None:
    env.topic("t", 4)
    env.topic("u", 3)
    legacy = LegacyConfig(rebalance_max_retries=50, rebalance_backoff_s=0.1, assignor="roundrobin")
    consumers = [env.consumer(Subscription.static({"t": 1, "u": 1}), legacy=legacy) for _ in range(2)]
    env.wait_converged(consumers, roundrobin_assign)


def test_churn_converges_again_and_hands_over_offsets_without_duplicates(env: Env) -> None:
    env.topic("t", 6)
    env.produce("t", 40)
    got: Counter[Record] = Counter()
    a, b = env.consumer(), env.consumer()
    env.wait_converged([a, b])
    drain([a, b], env.produced, got)

    c = env.consumer()  # join
    env.wait_converged([a, b, c])
    env.produce("t", 40)
    drain([a, b, c], env.produced, got)

    owned_by_b = set(b.assignment())
    b.close()  # a clean leave: commit, release, deregister
    env.wait_converged([a, c])
    for tp in owned_by_b:  # the next owner starts exactly where b committed
        committed = [
            e.fields["offset"]
            for e in env.events("offsets.committed", consumer=b.consumer_id)
            if (e.fields["topic"], e.fields["partition"]) == tp
        ]
        starts = [
            e.fields["offset"]
            for e in env.events("fetch.started", topic=tp.topic, partition=tp.partition)
            if e.fields["consumer"] != b.consumer_id
        ]
        assert committed and starts[-1] == committed[-1]
    env.produce("t", 40)

    d = env.consumer(Subscription.static({"t": 3}))  # join with more threads than the others
    env.wait_converged([a, c, d])
    drain([a, c, d], env.produced, got)
    assert set(got) == env.produced and max(got.values()) == 1
    assert_clean(env)


# --- conflicts and retries ----------------------------------------------------------------------------------------


def test_a_conflict_is_journalled_and_a_retry_succeeds_once_the_owner_is_gone(env: Env) -> None:
    env.topic("t", 2)
    other = planted_owner(env, "t", 0)
    c = env.consumer()
    wait_until(
        lambda: bool(env.events("legacy.rebalance.conflict", consumer=c.consumer_id, topic="t", partition=0)),
        10,
        "a journalled conflict",
    )
    conflict = env.events("legacy.rebalance.conflict", consumer=c.consumer_id)[0].fields
    assert conflict["owner"] == GHOST and conflict["thread"] == f"{c.consumer_id}-0"
    assert c.assignment() == {}, "no fetcher starts before every claim of the attempt succeeded"

    other.delete(legacy_paths.owner("g", "t", 0))
    env.wait_converged([c])
    completed = env.events("legacy.rebalance.completed", consumer=c.consumer_id)
    assert completed[-1].fields["attempt"] > 1 and completed[-1].fields["partitions"] == 2
    retrying = env.events("legacy.rebalance.retrying", consumer=c.consumer_id)
    assert retrying and "still owned by others" in retrying[0].fields["reason"]
    assert retrying[0].fields["backoff_s"] == FAST.rebalance_backoff_s


def test_exhausted_retries_are_journalled_and_the_next_trigger_recovers(env: Env) -> None:
    env.topic("t", 2)
    other = planted_owner(env, "t", 0)
    c = env.consumer(legacy=LegacyConfig(rebalance_max_retries=3, rebalance_backoff_s=0.05))
    wait_until(lambda: bool(env.events("legacy.rebalance.failed", consumer=c.consumer_id)), 10, "the failure")
    failed = env.events("legacy.rebalance.failed", consumer=c.consumer_id)[0].fields
    assert failed["retries"] == 3 and "still owned by others" in failed["reason"]
    assert len(env.events("legacy.rebalance.started", consumer=c.consumer_id)) == 3
    assert len(env.events("legacy.rebalance.retrying", consumer=c.consumer_id)) == 2
    # Registered, owning nothing (the claim of t/1 was rolled back), until something triggers a rebalance.
    assert env.admin.exists(legacy_paths.member("g", c.consumer_id)) is not None
    assert c.assignment() == {}
    assert env.owners() == {TopicPartition("t", 0): GHOST}

    other.delete(legacy_paths.owner("g", "t", 0))
    d = env.consumer()  # the next trigger: a member joins
    env.wait_converged([c, d])


# --- triggers -----------------------------------------------------------------------------------------------------


def test_new_matching_topics_and_added_partitions_trigger_rebalances(env: Env) -> None:
    env.topic("w-1", 1)
    c = env.consumer(Subscription.whitelist("w-.*", 1))
    wait_until(lambda: set(c.assignment()) == {TopicPartition("w-1", 0)}, 10, "w-1")
    env.topic("w-2", 2)  # the /brokers/topics children watch
    wait_until(lambda: len(c.assignment()) == 3, 10, "w-2 picked up")
    TopicAdmin(env.admin).alter("w-1", 3)  # the /brokers/topics/w-1 data watch
    wait_until(lambda: len(c.assignment()) == 5, 10, "w-1's new partitions picked up")
    assert {tp.topic for tp in c.assignment()} == {"w-1", "w-2"}
    assert env.events("legacy.rebalance.started", consumer=c.consumer_id, trigger="matching topics changed")
    assert env.events("legacy.rebalance.started", consumer=c.consumer_id, trigger="topic w-1 changed")


def test_a_member_whose_regex_is_outside_the_dialect_is_left_out_and_reported(env: Env) -> None:
    """A registration's regex outside the topic-pattern dialect makes it unreadable: Python would match ``(?i)W-.*``
    case-insensitively where a Java reader (a 0.8 client, the analysis) may not, so no member counts it in."""
    env.topic("w-1", 2)
    bad = b'{"version":1,"pattern":"white_list","subscription":{"(?i)W-.*":1},"timestamp":"1"}'
    env.admin.create(legacy_paths.member("g", "g_bad-1-deadbeef"), bad, ephemeral=True, makepath=True)
    c = env.consumer(Subscription.whitelist("w-.*", 1))
    everything = {TopicPartition("w-1", 0), TopicPartition("w-1", 1)}
    wait_until(lambda: set(c.assignment()) == everything, 10, "w-1 wholly to the readable member")
    reasons = [str(e.fields["reason"]) for e in env.events("input.rejected")]
    assert any("outside the topic-pattern dialect" in r and "inline flags" in r for r in reasons), reasons


def test_session_expiry_reregisters_and_the_group_converges_again(env: Env) -> None:
    env.topic("t", 4)
    a, b = env.consumer(), env.consumer()
    env.wait_converged([a, b])
    expire_session(a.zk.kazoo)
    wait_until(lambda: a.registrations == 2, 15, "a registered again")
    env.wait_converged([a, b])
    assert env.events("legacy.session.expired", consumer=a.consumer_id, partitions=2)
    registered = env.events("consumer.registered", consumer=a.consumer_id)
    assert [e.fields["registrations"] for e in registered] == [1, 2]
    assert registered[0].fields["session"] != registered[1].fields["session"]


def test_close_returns_promptly_when_zookeeper_is_gone(zk_factory: ZkFactory, tmp_path: Path) -> None:
    server = zk_factory.server()
    hosts = server.connect_string + "/gone"
    admin = ZkClient(ZkConfig.from_string(hosts)).start()  # its session holds the broker's ephemeral
    config = ConsumerConfig("g", Subscription.static({"t": 1}), zk=hosts, data_dir=tmp_path, session_timeout_s=SESSION)
    c = LegacyConsumer(config, legacy=FAST)
    try:
        admin.create(paths.broker(0), BrokerRegistration("localhost", 9092, 1).encode(), ephemeral=True, makepath=True)
        TopicAdmin(admin).create("t", 1)
        c.start()
        wait_until(lambda: len(c.assignment()) == 1, 10, "the partition")
        server.stop()
        wait_until(lambda: c.zk.state is not ConnState.CONNECTED, 10, "the connection to drop")
    finally:
        began = time.monotonic()
        report = c.close(timeout=2.0)
        took = time.monotonic() - began
        admin.stop()
    assert took < 2.0, f"close() waited {took:.2f} s for a ZooKeeper that is gone"
    assert not report.complete and {"deregister", "session-close"} <= set(report.skipped), report


# --- configuration ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{"rebalance_max_retries": 0}, {"rebalance_backoff_s": -1.0}, {"assignor": "sticky"}],
)
def test_legacy_config_validates_itself(kwargs: Mapping[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        LegacyConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("group", ["groups", "coordinator", "coordinator_epoch", "coordinator_terms"])
def test_group_names_of_the_coordinators_znodes_are_refused(group: str, tmp_path: Path) -> None:
    config = ConsumerConfig(group, Subscription.static({"t": 1}), zk="127.0.0.1:1", data_dir=tmp_path)
    with pytest.raises(ConfigurationError, match="reserved"):
        LegacyConsumer(config)
