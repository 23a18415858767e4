"""Securing a ZooKeeper for zkcoord: the ACL policy znode and the shared parents (``zkcoord zk secure``).

Runs on the caller's thread; blocks on ZooKeeper.  docs/security.md has the table the parents get.
"""

from __future__ import annotations

import dataclasses

from zkcoord.errors import ConfigurationError, NodeExistsError
from zkcoord.layout import paths
from zkcoord.layout.acl import POLICY, AclPolicy, Credential
from zkcoord.zk import ZkClient, ZkConfig

#: the parents every role needs, created by the coordinator side (members may not create them)
SHARED_PARENTS = (paths.BROKER_IDS, paths.BROKER_TOPICS, paths.GROUPS, paths.CONFIG_GROUPS)


def secure_tree(config: ZkConfig, coordinator: Credential, member: Credential) -> bool:
    """Write the policy (coordinator and member digest ids) and create the shared parents with their ACLs.  Returns
    whether the policy was written (False: the same one was there).

    :raises ConfigurationError: another policy is in place, or the two identities are the same.
    :raises AccessRefusedError: the policy znode or a parent exists and this identity may not write it.
    """
    policy = AclPolicy(coordinator.digest_id, member.digest_id)
    with ZkClient(dataclasses.replace(config, auth=coordinator, policy=policy), name="zk-secure") as zk:
        zk.ensure_path(paths.CONFIG)
        written = True
        try:
            zk.create(POLICY, policy.encode())
        except NodeExistsError:
            data, _ = zk.get(POLICY)
            if AclPolicy.decode(data) != policy:
                raise ConfigurationError(
                    f"{POLICY} holds another ACL policy: this ZooKeeper is secured for other identities"
                ) from None
            written = False
        zk.ensure_paths(SHARED_PARENTS)
    return written
