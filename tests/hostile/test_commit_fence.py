"""A commit on a later session than the claim's is refused, even when the owner znode looks the same (S3).

Found in a clean-clone run (a ZooKeeper restart under load): both members' sessions expired, the coordinator's next
generations deleted the owner znodes and created them again for the other member -- at the version the first had
claimed -- and the first member's auto-commit, sent on kazoo's new session before the consumer handled the loss,
passed the transaction's version check and landed after the new owner had started from the older offset.
"""

from __future__ import annotations

import pytest

from tests.zkutil import expire_session
from zkcoord.consumer.offsets import OffsetCommitFencedError, OffsetStore
from zkcoord.consumer.records import TopicPartition
from zkcoord.errors import NoNodeError
from zkcoord.layout import paths
from zkcoord.testbed.procs import wait_until
from zkcoord.testbed.scenario.proxy import TcpProxy
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

G = "g"
A, B = f"{G}_h-1-0000000a", f"{G}_h-2-0000000b"
TP = TopicPartition("t", 0)


def test_a_claim_of_an_expired_session_commits_nothing_though_the_owner_version_matches(zk_hosts: str) -> None:
    owner, offset = paths.owner(G, "t", 0), paths.offset(G, "t", 0)
    with ZkClient(ZkConfig.from_string(zk_hosts)) as admin, ZkClient(ZkConfig.from_string(zk_hosts)) as member:
        admin.create(owner, b"", makepath=True)
        admin.set(owner, f"{A}-0".encode())  # as the coordinator writes it: created, then set (version 1)
        store = OffsetStore(member, G)
        assert store.claim({TP: f"{A}-0"}).claims[TP].owner_version == 1
        expire_session(member.kazoo)  # a new session now; the claim was read in the old one
        admin.delete(owner)
        admin.create(owner, b"")
        admin.set(owner, f"{B}-0".encode())  # the next owner's, at version 1 again
        with pytest.raises(OffsetCommitFencedError):
            store.commit({TP: 219})
        with pytest.raises(NoNodeError):
            admin.get(offset)  # nothing landed
        assert store.claimed() == set()


def test_a_commit_while_the_next_session_is_being_made_is_refused(zk_hosts: str) -> None:
    """Between kazoo learning its session expired and its next session being made there is no live session
    (``session_id`` is 0), yet a request made then is queued and goes out on the next session: the fence judges the
    session the client holds (none, then), not the live one, so the claim is dropped (found in review)."""
    owner, offset = paths.owner(G, "t", 0), paths.offset(G, "t", 0)
    with ZkClient(ZkConfig.from_string(zk_hosts)) as admin, ZkClient(ZkConfig.from_string(zk_hosts)) as member:
        admin.create(owner, b"", makepath=True)
        admin.set(owner, f"{A}-0".encode())
        store = OffsetStore(member, G)
        store.claim({TP: f"{A}-0"})
        old = member.held_session
        admin.delete(owner)  # the next owner's znode, at the claimed version, as the coordinator's generations do
        admin.create(owner, b"")
        admin.set(owner, f"{B}-0".encode())
        expire_session(member.kazoo, wait_reconnect=False)
        wait_until(lambda: member.held_session != old, 10, "kazoo to drop the expired session")
        with pytest.raises(OffsetCommitFencedError):
            store.commit({TP: 219})
        wait_until(lambda: member.session_id != 0, 20, "the next session")
        with pytest.raises(NoNodeError):
            admin.get(offset)


def test_a_claim_survives_a_reconnect_within_its_session(zk_hosts: str) -> None:
    """The other side: a connection lost and resumed within the session timeout keeps the claim, and the commit
    lands (the fence must not drop what is still ours)."""
    server, _, chroot = zk_hosts.partition("/")
    host, port = server.rsplit(":", 1)
    owner = paths.owner(G, "t", 0)
    with TcpProxy(host, int(port)) as proxy, ZkClient(ZkConfig.from_string(zk_hosts)) as admin:
        admin.create(owner, b"", makepath=True)
        admin.set(owner, f"{A}-0".encode())
        config = ZkConfig.from_string(f"{proxy.address}/{chroot}", session_timeout_s=10.0)
        with ZkClient(config) as member:
            store = OffsetStore(member, G)
            store.claim({TP: f"{A}-0"})
            session = member.held_session
            proxy.cut()
            wait_until(lambda: member.session_id == 0, 10, "the connection lost")
            assert member.held_session == session, "a suspended client no longer holds its session"
            proxy.restore()
            assert store.commit({TP: 7}) == {TP: 7}
            assert member.session_id == session
        assert admin.get(paths.offset(G, "t", 0))[0] == b"7"
