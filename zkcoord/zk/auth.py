"""Credentials and ACLs at the ZooKeeper boundary: reading ``--zk-auth``, and the ACL each created znode gets.

Part of :mod:`zkcoord.zk` (may import kazoo).  The rules themselves are :mod:`zkcoord.layout.acl` (pure); this module
loads a credential, turns the rules' grants into kazoo ``ACL`` objects, and decides, for one session, the ACL of a
znode it creates (:class:`AclContext`).  Without credentials nothing here is used: znodes are created with kazoo's
default, open ACL, as before.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kazoo.protocol.serialization import Auth
from kazoo.security import ACL, Id

from zkcoord import errors
from zkcoord.layout.acl import AclPolicy, Credential, Grant, acl_for, may_create, member_credential


def load_credential(source: str) -> Credential:
    """The digest credential ``user:password`` from ``source``: ``env:VAR`` (an environment variable) or a file path.

    Never from the command line itself: a password there is visible in ``ps`` and shell history.
    :raises ConfigurationError: missing or unreadable source, or malformed content (the message never shows it).
    """
    if source.startswith("env:"):
        var = source[4:]
        value = os.environ.get(var) if var else None
        if value is None:
            raise errors.ConfigurationError(f"--zk-auth {source}: environment variable {var or '?'} is not set")
        return Credential.parse(value, f"${var}")
    try:
        text = Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise errors.ConfigurationError(f"--zk-auth {source}: cannot read the credentials file ({reason})") from None
    return Credential.parse(text, source)


def to_kazoo(grants: Sequence[Grant]) -> list[ACL]:
    return [ACL(int(g.perms), Id(g.scheme, g.ident)) for g in grants]


@dataclass(frozen=True, slots=True)
class AclContext:
    """One session's ACL rules: the deployment's policy, this session's role, and (a consumer's) own per-member id."""

    policy: AclPolicy
    role: str
    own: tuple[str, str] | None = None

    @classmethod
    def of(cls, policy: AclPolicy, credential: Credential, consumer_id: str | None) -> AclContext:
        """:raises ConfigurationError: the credential is neither role's."""
        role = policy.role_of(credential)
        own = None
        if role == "member" and consumer_id is not None:
            own = (consumer_id, member_credential(credential, consumer_id).digest_id)
        return cls(policy, role, own)

    def acl(self, path: str) -> list[ACL]:
        return to_kazoo(acl_for(self.policy, path, self.own))

    def check_create(self, path: str) -> None:
        """:raises AccessRefusedError: a member would create a shared parent (the coordinator side's to create)."""
        if not may_create(self.role, path):
            raise errors.AccessRefusedError(
                f"{path} does not exist and a member may not create it: in a deployment with ACLs the coordinator "
                "side creates it (zkcoord zk secure, or a broker with --zk-auth)",
                path,
            )


def auth_data(credential: Credential | None, consumer_id: str | None) -> list[tuple[str, str]]:
    """kazoo's ``auth_data`` for a session: the credential, and a consumer's per-member credential (added by every
    session of a consumer: harmless for a coordinator identity, which ACLs never name by it)."""
    if credential is None:
        return []
    out = [("digest", f"{credential.user}:{credential.password}")]
    if consumer_id is not None:
        mine = member_credential(credential, consumer_id)
        out.append(("digest", f"{mine.user}:{mine.password}"))
    return out


class HideAuth(logging.Filter):
    """Hides the password of kazoo's ``Auth`` request in its log records: kazoo logs every request it sends at DEBUG
    (``zkcoord -vv``), the session's ``Auth`` with its ``user:password`` too.  Added to every session's kazoo logger
    by :class:`~zkcoord.zk.ZkClient`; kazoo's connection logs through that logger only."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, Auth) for a in args):
            record.args = tuple(a._replace(auth="<hidden>") if isinstance(a, Auth) else a for a in args)
        return True


#: the one instance every session's logger holds (``addFilter`` adds an instance once)
HIDE_AUTH = HideAuth()


def kazoo_logger(name: str) -> logging.Logger:
    """The kazoo logger of session ``name``, with :data:`HIDE_AUTH`."""
    logger = logging.getLogger(f"kazoo.{name}")
    logger.addFilter(HIDE_AUTH)
    return logger
