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
