"""With ACLs a consumer never repairs an owner znode itself (docs/security.md, "No hand-over"): only the coordinator
identity writes owners, so a repair would be refused, and a refusal stops the consumer (exit 4).  Found absent or
written by hand, the owner znode is reported as a claim problem and the partition not fetched, as without repair."""

from __future__ import annotations

import dataclasses

import pytest

from zkcoord.admin.acl_setup import secure_tree
from zkcoord.consumer.offsets import OffsetStore
from zkcoord.consumer.records import TopicPartition
from zkcoord.layout import paths
from zkcoord.layout.acl import Credential
from zkcoord.zk import ZkClient, ZkConfig

pytestmark = pytest.mark.integration

COORD = Credential("coord", "c-secret")
MEMBER = Credential("member", "m-secret")
G = "g"
A = f"{G}_h-1-0000000a"


def test_a_member_does_not_repair_an_owner_znode_under_acls(zk_hosts: str) -> None:
    secure_tree(ZkConfig.from_string(zk_hosts), COORD, MEMBER)
    base = ZkConfig.from_string(zk_hosts)
    with (
        ZkClient(dataclasses.replace(base, auth=COORD)) as coord,
        ZkClient(dataclasses.replace(base, auth=MEMBER, consumer_id=A)) as a,
    ):
        a.ensure_path(paths.channel(G, A))
        a.create(paths.member(G, A), b"{}", ephemeral=True, makepath=True)
        coord.ensure_path(paths.owners(G, "t"))
        coord.create(paths.owner(G, "t", 1), b"someone-else-0")  # written by hand, with the coordinator identity
        store = OffsetStore(a, G, paths.member(G, A))
        tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
        ownership = {tp0: f"{A}-0", tp1: f"{A}-0"}
        claims = store.claim(ownership, repairable={tp0, tp1})  # the state vouches: without ACLs both are repaired
        assert claims.claims == {}
        assert len(claims.problems) == 2
        assert coord.exists(paths.owner(G, "t", 0)) is None
        assert coord.get(paths.owner(G, "t", 1))[0] == b"someone-else-0"
