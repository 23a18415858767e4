"""The consumer's contract with the application (issue 25, docs/consumer.md), in-process against a real ZooKeeper and
a real coordinator: rebalance callbacks run inside ``poll()`` on the application's thread; a stop is acknowledged only
after ``on_partitions_revoked`` returned; with auto-commit off nothing is committed that the application did not
commit; every rebalance is announced, an empty assignment too; a session loss is announced as a loss."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.clusters import Cluster
from tests.integration.test_consumer import make, polling, produce
from tests.zkutil import expire_session
from zkcoord.consumer import Consumer, OffsetCommitFencedError, TopicPartition
from zkcoord.data.topics import TopicAdmin
from zkcoord.errors import NoNodeError
from zkcoord.layout import paths
from zkcoord.layout.commands import ASSIGNMENT_NAME
from zkcoord.layout.kip848 import AssignmentAck
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.poll_loop import PollLoop
from zkcoord.testbed.procs import wait_until

pytestmark = pytest.mark.integration

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)


@pytest.fixture
def cluster(cluster: Cluster) -> Cluster:
    """The suite's cluster (tests/conftest.py) with broker 1 and topic ``t`` of 2 partitions."""
    cluster.broker(1)
    TopicAdmin(cluster.admin_zk).create("t", 2)
    return cluster


class Heard:
    """What one consumer's callbacks were called with, and on which thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[TopicPartition], str]] = []

    def hook(self, which: str) -> Callable[[list[TopicPartition]], None]:
        def called(partitions: list[TopicPartition]) -> None:
            self.calls.append((which, list(partitions), threading.current_thread().name))

        return called

    def kinds(self) -> list[str]:
        return [which for which, _, _ in self.calls]


def _member(cluster: Cluster, data: Path, stack: ExitStack, heard: Heard, **kw: object) -> Consumer:
    return make(
        cluster,
        data,
        stack,
        on_revoked=heard.hook("revoked"),
        on_assigned=heard.hook("assigned"),
        on_lost=heard.hook("lost"),
        **kw,
    )


def _assigned_after_revoke(heard: Heard) -> list[TopicPartition] | None:
    """What the first ``assigned`` call after the first non-empty ``revoked`` one gave, None if there is none yet."""
    revoked = next((i for i, (which, p, _) in enumerate(heard.calls) if which == "revoked" and p), None)
    if revoked is None:
        return None
    return next((p for which, p, _ in heard.calls[revoked + 1 :] if which == "assigned"), None)


@pytest.mark.parametrize("rebalance", ["eager", "incremental", "consumer"])
def test_callbacks_run_inside_poll_on_the_polling_thread(cluster: Cluster, tmp_path: Path, rebalance: str) -> None:
    heard = [Heard(), Heard()]
    with ExitStack() as stack:
        first = _member(cluster, tmp_path / "data", stack, heard[0], rebalance=rebalance)
        wait_until(polling([first], lambda: len(first.assignment()) == 2), 20, "first owns both", interval=0)
        second = _member(cluster, tmp_path / "data", stack, heard[1], rebalance=rebalance)
        both = [first, second]
        one_each = polling(both, lambda: len(first.assignment()) == 1 and len(second.assignment()) == 1)
        wait_until(one_each, 20, "one partition each", interval=0)
        wait_until(polling(both, lambda: "assigned" in heard[1].kinds()), 10, "the second heard", interval=0)
        # Every completed rebalance is announced: the first member, which lost a partition, hears its assignment
        # after its revoke (eager: what it keeps; incremental: nothing new, [] -- KIP-848's order).
        wait_until(polling(both, lambda: _assigned_after_revoke(heard[0]) is not None), 10, "the first", interval=0)
        assert len(_assigned_after_revoke(heard[0]) or []) == (1 if rebalance == "eager" else 0), heard[0].calls
    me = threading.current_thread().name
    for h in heard:
        assert h.calls and {thread for _, _, thread in h.calls} == {me}, h.calls
    assert "revoked" in heard[0].kinds(), "the first member lost a partition and was not told"
    last_assigned = next(p for which, p, _ in reversed(heard[1].calls) if which == "assigned")
    assert len(last_assigned) == 1
    assert heard[1].calls[-1][0] == "revoked", "close() did not tell the application"


def _unacknowledged(cluster: Cluster, consumer_id: str, rebalance: str) -> list[str]:
    """The names of the member's commands not acknowledged yet.  Eager: the command znodes left in its channel (an
    acknowledgement deletes them).  The consumer protocol: its assignment (``assignment-<mzxid>``) unless its
    ``ack/<c>`` names that write's zxid (docs/protocol.md, "The assignment channel")."""
    if rebalance == "eager":
        return list(cluster.admin_zk.get_children(paths.channel("g", consumer_id)))
    _, written = cluster.admin_zk.get(paths.assignment("g", consumer_id))
    data, _ = cluster.admin_zk.get(paths.ack("g", consumer_id))
    acked = AssignmentAck.decode(data).assignment if data else -1  # created empty, before the first assignment
    return [] if acked == written.mzxid else [f"{ASSIGNMENT_NAME}{written.mzxid}"]


@pytest.mark.parametrize("rebalance", ["eager", "consumer"])
def test_a_stop_is_acknowledged_only_after_the_revoke_callback_returned(
    cluster: Cluster, tmp_path: Path, rebalance: str
) -> None:
    produce(tmp_path / "data", "t", 2, 20)
    release = threading.Event()
    entered = threading.Event()

    def slow_revoke(partitions: list[TopicPartition]) -> None:
        if partitions:
            entered.set()
            assert release.wait(20)

    with ExitStack() as stack:
        first = make(cluster, tmp_path / "data", stack, on_revoked=slow_revoke, auto_commit=False, rebalance=rebalance)
        wait_until(polling([first], lambda: len(first.assignment()) == 2), 20, "first owns both", interval=0)
        poller = threading.Thread(target=lambda: [first.poll(0.05) for _ in range(200) if not release.is_set()])
        poller.start()
        stack.callback(poller.join)
        stack.callback(release.set)
        second = make(cluster, tmp_path / "data", stack, rebalance=rebalance)
        assert entered.wait(20), "the revoke callback never ran"
        # The callback is still running: the stop waits unacknowledged, and nobody fetches the partitions it names
        # (eager: both; the consumer protocol revokes only the one that moves).
        kept = 0 if rebalance == "eager" else 1
        wait_until(lambda: len(first.fetcher.assignment()) == kept, 5, "the first stopped fetching")
        assert sorted(first.assignment()) == [P0, P1], "inside the revoke callback the partitions are still its own"
        parked = _unacknowledged(cluster, first.consumer_id, rebalance)
        assert parked, "the stop was acknowledged while the application's revoke callback still ran"
        assert second.assignment() == {} and not cluster.is_stable("g", 2)
        release.set()
        poller.join()
        wait_until(polling([first, second], lambda: cluster.is_stable("g", 2)), 20, "stable with 2", interval=0)
        applied = [
            e
            for e in read_journal(cluster.journal_dir)
            if e.event == "command.applied" and e.fields.get("name") in parked
        ]
        assert applied and applied[0].fields["wait_ms"] > 0


@pytest.mark.parametrize("rebalance", ["eager", "consumer"])
def test_with_auto_commit_off_a_stop_commits_nothing_the_application_did_not(
    cluster: Cluster, tmp_path: Path, rebalance: str
) -> None:
    """The application got 0..49 of each partition, finished and committed only 0..24: the next owner starts at 25."""
    produce(tmp_path / "data", "t", 2, 50)
    with ExitStack() as stack:
        first = make(cluster, tmp_path / "data", stack, auto_commit=False, max_poll_records=500, rebalance=rebalance)
        got: list[int] = []

        def received() -> int:
            got.extend(r.offset for r in first.poll(0.05))
            return len(got)

        wait_until(lambda: received() >= 100, 20, "100 records", interval=0)
        first.commit({P0: 25, P1: 25})  # what it finished
        second = make(cluster, tmp_path / "data", stack, rebalance=rebalance)
        wait_until(polling([first, second], lambda: cluster.is_stable("g", 2)), 20, "stable with 2", interval=0)
        for tp in (P0, P1):
            assert cluster.admin_zk.get(paths.offset("g", tp.topic, tp.partition))[0] == b"25"
        moved = next(iter(second.assignment()))
        started = [
            e.fields["offset"]
            for e in read_journal(cluster.journal_dir)
            if e.event == "fetch.started" and e.fields.get("consumer") == second.consumer_id
        ]
        assert started == [25], f"the next owner of {moved} did not start at the application's own commit"


@pytest.mark.parametrize("rebalance", ["eager", "incremental", "consumer"])
def test_an_idle_member_hears_an_empty_assignment(cluster: Cluster, tmp_path: Path, rebalance: str) -> None:
    heard = [Heard(), Heard(), Heard()]
    with ExitStack() as stack:
        members = [_member(cluster, tmp_path / "data", stack, h, rebalance=rebalance) for h in heard]
        wait_until(polling(members, lambda: cluster.is_stable("g", 3)), 30, "stable with 3", interval=0)
        wait_until(polling(members, lambda: all("assigned" in h.kinds() for h in heard)), 10, "all heard", interval=0)
        idle = [i for i, m in enumerate(members) if m.assignment() == {}]
    assert len(idle) == 1
    # Incremental announcements name what each start added; the idle member's last one names nothing.
    assert next((k, p) for k, p, _ in reversed(heard[idle[0]].calls) if k == "assigned") == ("assigned", [])


@pytest.mark.parametrize("rebalance", ["eager", "consumer"])
def test_a_session_loss_is_announced_as_lost_and_its_commits_are_refused(
    cluster: Cluster, tmp_path: Path, rebalance: str
) -> None:
    produce(tmp_path / "data", "t", 2, 10)
    heard = Heard()
    refused: list[BaseException] = []
    with ExitStack() as stack:
        holder: list[Consumer] = []

        def lost(partitions: list[TopicPartition]) -> None:
            heard.hook("lost")(partitions)
            try:
                holder[0].commit(dict.fromkeys(partitions, 1))
            except OffsetCommitFencedError as e:
                refused.append(e)

        consumer = make(
            cluster,
            tmp_path / "data",
            stack,
            on_revoked=heard.hook("revoked"),
            on_lost=lost,
            auto_commit=False,
            rebalance=rebalance,
        )
        holder.append(consumer)
        wait_until(polling([consumer], lambda: len(consumer.assignment()) == 2), 20, "owns both", interval=0)
        expire_session(consumer.zk.kazoo)
        wait_until(polling([consumer], lambda: "lost" in heard.kinds()), 20, "the loss announced", interval=0)
        calls = list(heard.calls)  # before close(), which revokes whatever the rejoin was given meanwhile
    (_, partitions, _) = next(c for c in calls if c[0] == "lost")
    assert sorted(partitions) == [P0, P1]
    assert refused, "a commit inside on_partitions_lost was not refused"
    # Lost, not revoked: no revoke of those partitions follows (a rejoin's eager stop revokes nothing: [] is fine).
    after = calls[[c[0] for c in calls].index("lost") :]
    assert not [p for which, p, _ in after if which == "revoked" and set(p) & {P0, P1}], after


@pytest.mark.parametrize("rebalance", ["eager", "consumer"])
def test_a_hung_application_leaves_within_its_poll_interval_and_rejoins_when_it_polls(
    cluster: Cluster, tmp_path: Path, rebalance: str
) -> None:
    heard = Heard()
    with ExitStack() as stack:
        hung = _member(
            cluster, tmp_path / "data", stack, heard, max_poll_interval_s=1.0, auto_commit=False, rebalance=rebalance
        )
        other = make(cluster, tmp_path / "data", stack, rebalance=rebalance)
        loop = stack.enter_context(PollLoop())
        loop.add(other)
        wait_until(polling([hung], lambda: cluster.is_stable("g", 2)), 20, "stable with 2", interval=0)
        wait_until(polling([hung], lambda: len(hung.assignment()) == 1), 10, "one partition each", interval=0)
        first_incarnation = hung.incarnation
        # The application stops calling poll(): within its interval (and a heartbeat) it leaves the group.
        left = time.monotonic()
        wait_until(lambda: hung.incarnation is None, 5, "the hung member to leave")
        assert time.monotonic() - left < 1.0 + 2.5  # the interval, a heartbeat (0.5 s) and a busy machine's delays
        wait_until(lambda: cluster.admin_zk.exists(paths.member("g", hung.consumer_id)) is None, 5, "deregistered")
        assert hung.assignment() == {}
        wait_until(lambda: cluster.is_stable("g", 1) and len(other.assignment()) == 2, 20, "the other owns both")
        (event,) = [e for e in read_journal(cluster.journal_dir) if e.event == "consumer.poll_timeout"]
        assert event.fields["consumer"] == hung.consumer_id and event.fields["partitions"] == 1
        # Polling again: the loss is announced, and it registers again as a new incarnation.
        wait_until(polling([hung], lambda: "lost" in heard.kinds()), 10, "the loss announced", interval=0)
        rejoined = polling([hung], lambda: hung.incarnation not in (None, first_incarnation))
        wait_until(rejoined, 10, "registered again", interval=0)
        wait_until(polling([hung], lambda: cluster.is_stable("g", 2)), 20, "stable with 2 again", interval=0)
        loop.remove(other)


def test_with_auto_commit_on_a_stop_commits_what_poll_returned_before_the_revoke_callback(
    cluster: Cluster, tmp_path: Path
) -> None:
    produce(tmp_path / "data", "t", 2, 30)
    seen: list[list[bytes | None]] = []

    def revoked(partitions: list[TopicPartition]) -> None:
        if partitions:
            seen.append([_offset(cluster, tp) for tp in (P0, P1)])

    with ExitStack() as stack:
        first = make(cluster, tmp_path / "data", stack, on_revoked=revoked, auto_commit_interval_s=3600)
        got: list[int] = []

        def received() -> int:
            got.extend(r.offset for r in first.poll(0.05))
            return len(got)

        wait_until(lambda: received() >= 60, 20, "60 records", interval=0)
        second = make(cluster, tmp_path / "data", stack)
        wait_until(polling([first, second], lambda: bool(seen)), 20, "the revoke callback", interval=0)
    assert seen[0] == [b"30", b"30"], "the positions of what poll() returned were not committed before the callback"


def test_close_with_auto_commit_off_commits_nothing_and_tells_the_application(cluster: Cluster, tmp_path: Path) -> None:
    produce(tmp_path / "data", "t", 2, 20)
    heard = Heard()
    with ExitStack() as stack:
        consumer = _member(cluster, tmp_path / "data", stack, heard, auto_commit=False)
        got: list[int] = []

        def received() -> int:
            got.extend(r.offset for r in consumer.poll(0.05))
            return len(got)

        wait_until(lambda: received() >= 40, 20, "40 records", interval=0)
        consumer.commit({P0: 5})  # what the application finished
        consumer.close()
        assert heard.calls[-1][:2] == ("revoked", [P0, P1]) and heard.calls[-1][2] == threading.current_thread().name
    assert [_offset(cluster, tp) for tp in (P0, P1)] == [b"5", None]


def test_an_application_that_never_polls_leaves_within_its_poll_interval(cluster: Cluster, tmp_path: Path) -> None:
    with ExitStack() as stack:
        idle = make(cluster, tmp_path / "data", stack, max_poll_interval_s=1.0)
        started = time.monotonic()
        wait_until(lambda: idle.incarnation is None, 10, "the member that never polled to leave")
        assert time.monotonic() - started < 1.0 + 2.5
        wait_until(lambda: cluster.admin_zk.exists(paths.member("g", idle.consumer_id)) is None, 5, "deregistered")
        (event,) = [e for e in read_journal(cluster.journal_dir) if e.event == "consumer.poll_timeout"]
        assert event.fields["consumer"] == idle.consumer_id


def _offset(cluster: Cluster, tp: TopicPartition) -> bytes | None:
    try:
        return cluster.admin_zk.get(paths.offset("g", tp.topic, tp.partition))[0]
    except NoNodeError:
        return None


def test_close_from_another_thread_waits_for_the_running_poll_and_its_callback(
    cluster: Cluster, tmp_path: Path
) -> None:
    """A consumer polled by one thread (a PollLoop) and closed by another while a stop's revoke callback runs in
    ``poll()``: ``close()`` waits for that ``poll()`` to return, so no two callbacks ever run at once and the stop's
    partitions are told once."""
    release, entered = threading.Event(), threading.Event()
    running, overlapped = [0], [False]
    told: list[list[TopicPartition]] = []
    guard = threading.Lock()

    def on_revoked(partitions: list[TopicPartition]) -> None:
        with guard:
            running[0] += 1
            overlapped[0] = overlapped[0] or running[0] > 1
        try:
            if partitions:
                told.append(partitions)
                entered.set()
                release.wait(10)
        finally:
            with guard:
                running[0] -= 1

    with ExitStack() as stack:
        first = make(cluster, tmp_path / "data", stack, on_revoked=on_revoked, auto_commit=False)
        loop = stack.enter_context(PollLoop())
        loop.add(first)
        wait_until(lambda: len(first.assignment()) == 2, 20, "first owns both")
        make(cluster, tmp_path / "data", stack)  # a join: the first member's stop is parked, its callback blocks
        assert entered.wait(20), "the revoke callback never ran"
        closer = threading.Thread(target=first.close)
        closer.start()
        closer.join(0.5)
        assert closer.is_alive(), "close() did not wait for the poll() running the callback"
        release.set()
        closer.join(20)
        assert not closer.is_alive()
        loop.remove(first)
    assert not overlapped[0], "two rebalance callbacks ran at once"
    # The stop's two partitions once; then at most close() revoking the one the rebalance gave back.
    assert told[0] == [P0, P1] and len(told) <= 2 and all(len(t) == 1 for t in told[1:]), told
