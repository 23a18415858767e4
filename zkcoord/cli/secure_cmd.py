"""``zkcoord zk secure``: publish a deployment's ACL policy and create its shared parents with their ACLs.

Run once, with the coordinator identity's credentials, before any broker or consumer runs with ``--zk-auth``
(docs/security.md).  Idempotent: run again with the same identities it changes nothing and says so.
"""

from __future__ import annotations

import click

from zkcoord.admin.acl_setup import secure_tree
from zkcoord.cli.common import zk_auth, zk_config, zk_options
from zkcoord.errors import ConfigurationError
from zkcoord.zk import load_credential


@click.command()
@zk_options
@click.option(
    "--member-auth",
    required=True,
    metavar="FILE|env:VAR",
    help="The member role's credentials user:password (consumers' --zk-auth), read from FILE or $VAR.",
)
def secure(zk: str, session_timeout: float, member_auth: str) -> None:
    """Secure this ZooKeeper for zkcoord: --zk-auth names the coordinator identity (brokers and operator tools),
    --member-auth the member identity (consumers).  Writes the policy to /config/acl and creates /brokers/ids,
    /brokers/topics, /consumers/groups and /config/groups with least-privilege ACLs (docs/security.md)."""
    coordinator = zk_auth()
    if coordinator is None:
        raise ConfigurationError("zkcoord zk secure needs --zk-auth (the coordinator identity's credentials)")
    created = secure_tree(zk_config(zk, session_timeout), coordinator, load_credential(member_auth))
    click.echo(f"ACL policy {'written' if created else 'already in place'}: coordinator {coordinator.user!r}")
