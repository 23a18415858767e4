"""The ZooKeeper boundary against a real server: typed errors, transactions, chroots, states, real expiry."""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.zkutil import expire_session
from zkcoord import errors
from zkcoord.zk import ConnState, WatchEvent, WatchKind, ZkClient, ZkConfig

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zk_hosts: str) -> Iterator[ZkClient]:
    with ZkClient(ZkConfig.from_string(zk_hosts, session_timeout_s=4.0), name="test") as client:
        yield client


def test_kazoo_errors_become_typed_errors(zk: ZkClient) -> None:
    with pytest.raises(errors.NoNodeError) as info:
        zk.get("/missing")
    assert info.value.path == "/missing"
    zk.create("/a", b"1")
    with pytest.raises(errors.NodeExistsError):
        zk.create("/a", b"2")
    with pytest.raises(errors.BadVersionError):
        zk.set("/a", b"3", version=7)
    zk.create("/a/child")
    with pytest.raises(errors.NotEmptyError):
        zk.delete("/a")
    data, stat = zk.get("/a")
    assert (data, stat.version) == (b"1", 0)


def test_failed_check_rolls_back_the_whole_transaction(zk: ZkClient) -> None:
    zk.create("/epoch", b"1")
    zk.set("/epoch", b"2")  # version 1 now: a writer holding version 0 is stale
    txn = zk.transaction()
    txn.check("/epoch", 0)
    txn.create("/cmd-", b"x", sequence=True)
    with pytest.raises(errors.BadVersionError) as info:
        txn.commit()
    assert info.value.path == "/epoch"
    assert [c for c in zk.get_children("/") if c.startswith("cmd-")] == []
    ok = zk.transaction()
    ok.check("/epoch", 1)
    ok.create("/cmd-", b"x", sequence=True)
    results = ok.commit()
    assert results[1].startswith("/cmd-")


def test_chroot_is_created_and_isolates(zk_hosts: str) -> None:
    nested = ZkConfig.from_string(zk_hosts + "/deeper/still")
    with ZkClient(nested) as client:
        client.create("/x", b"in chroot")
    with ZkClient(ZkConfig.from_string(zk_hosts)) as outer:
        assert outer.get("/deeper/still/x")[0] == b"in chroot"


def test_unreachable_zookeeper_is_one_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        config = ZkConfig.from_string(f"127.0.0.1:{port}", connect_timeout_s=0.5)
        with pytest.raises(errors.ZkUnavailableError, match=r"cannot reach ZooKeeper.*zkcoord zk start"):
            ZkClient(config).start()


def test_real_session_expiry_is_seen_and_the_client_recovers(zk: ZkClient) -> None:
    states: queue.Queue[ConnState] = queue.Queue()
    zk.add_listener(states.put)
    zk.create("/eph", b"", ephemeral=True)
    children_seen: queue.Queue[list[str]] = queue.Queue()
    zk.ensure_path("/watched")
    zk.watch_children("/watched", children_seen.put)
    assert children_seen.get(timeout=5) == []
    old_session = zk.session_id

    expire_session(zk.kazoo)

    seen = []
    while ConnState.CONNECTED not in seen:
        seen.append(states.get(timeout=15))
    assert ConnState.LOST in seen, seen
    assert zk.session_id != old_session
    assert zk.exists("/eph") is None  # the server removed the old session's ephemeral
    # The children watch re-arms itself in the new session (raw watches would not).
    zk.create("/watched/after")
    deadline_hit = threading.Event()
    got: list[str] = []
    while "after" not in got and not deadline_hit.is_set():
        got = children_seen.get(timeout=10)
    assert got == ["after"]


def test_listener_errors_do_not_break_the_connection(zk: ZkClient) -> None:
    def bad(_state: ConnState) -> None:
        raise RuntimeError("listener bug")

    states: queue.Queue[ConnState] = queue.Queue()
    zk.add_listener(bad)
    zk.add_listener(states.put)  # registered after the bad one: still called
    expire_session(zk.kazoo)
    while states.get(timeout=15) is not ConnState.CONNECTED:
        pass
    zk.create("/still-works", b"")
    assert zk.exists("/still-works") is not None


def test_retry_gives_up_with_a_typed_error_at_its_deadline(zk: ZkClient) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise errors.ZkUnavailableError("flaky")
        return "ok"

    assert zk.retry(flaky, deadline_s=5) == "ok"

    def down() -> None:
        raise errors.ZkUnavailableError("down")

    with pytest.raises(errors.ZkUnavailableError):
        zk.retry(down, deadline_s=0.3)


def test_children_many_sets_one_shot_watches_that_fire_once_per_change(zk: ZkClient) -> None:
    for path in ("/w", "/w/a", "/w/b"):
        zk.create(path)
    fired: queue.Queue[WatchEvent] = queue.Queue()
    listed = zk.children_many(["/w/a", "/w/b", "/w/none"], watch=fired.put)
    assert listed == [[], [], None]
    assert zk.children_many(["/w/a"], watch=fired.put) == [[]]  # watched twice before it fires
    zk.create("/w/a/x")
    zk.create("/w/a/y")  # after the one-shot fired, before re-listing: no second event
    assert fired.get(timeout=5) == WatchEvent(WatchKind.CHILD, "/w/a")
    zk.create("/w/none")  # no watch was set on an absent node
    zk.sync("/w")
    with pytest.raises(queue.Empty):
        fired.get(timeout=0.5)
    # A connection loss drops the raw watches still armed: each fires once as RESET.
    expire_session(zk.kazoo)
    assert fired.get(timeout=15) == WatchEvent(WatchKind.RESET, "/w/b")
