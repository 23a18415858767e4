"""Who may do what to which znode when the deployment runs with ZooKeeper credentials (``--zk-auth``): the ACL table.

Pure values and rules (no I/O): :mod:`zkcoord.zk` applies them to every znode it creates for a client that has
credentials, and reads the deployment's :class:`AclPolicy` from ``/config/acl``.  ``docs/security.md`` explains the
table and what ZooKeeper's ACL model cannot express.

Identities are ZooKeeper ``digest`` ids (``user:base64(sha1(user:password))``): the **coordinator** role's one user
(brokers and operator tools), the **member** role's one user (consumers), and each consumer's own **per-member** id,
derived from the member credential and its consumer id (:func:`member_credential`), which only that consumer's
process adds to its session.  ACLs are per znode and set by the znode's creator; CREATE and DELETE on a znode govern
its children, so the rules below are written per parent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from enum import IntFlag

from zkcoord.errors import CodecError, ConfigurationError
from zkcoord.layout import paths

#: The policy znode: the deployment's two role identities (JSON), written by ``zkcoord zk secure``.
POLICY = f"{paths.CONFIG}/acl"

_USER = re.compile(r"[A-Za-z0-9._\-]{1,249}")
_DIGEST_ID = re.compile(r"[A-Za-z0-9._\-]{1,249}:[A-Za-z0-9+/=]{28}")


class Perm(IntFlag):
    """ZooKeeper's permission bits (``ZooDefs.Perms``)."""

    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


@dataclass(frozen=True, slots=True)
class Grant:
    """One ACL entry: ``perms`` for ``scheme:ident`` (``world:anyone`` or a ``digest`` id)."""

    scheme: str
    ident: str
    perms: Perm


@dataclass(frozen=True, slots=True)
class Credential:
    """A digest credential ``user:password``.  The password is never shown (``repr`` hides it)."""

    user: str
    password: str

    def __post_init__(self) -> None:
        if not _USER.fullmatch(self.user):
            raise ConfigurationError("ZooKeeper credentials: the user must be 1..249 of [A-Za-z0-9._-]")
        if not self.password:
            raise ConfigurationError("ZooKeeper credentials: the password is empty (expected user:password)")

    def __repr__(self) -> str:
        return f"Credential(user={self.user!r}, password=<hidden>)"

    @classmethod
    def parse(cls, text: str, where: str) -> Credential:
        """``user:password`` (one line; surrounding blanks and a final newline ignored).  :raises ConfigurationError:
        naming ``where`` the text came from, never echoing the text itself."""
        line = text.strip()
        user, colon, password = line.partition(":")
        if not colon or "\n" in line:
            raise ConfigurationError(f"ZooKeeper credentials in {where}: expected one line user:password")
        try:
            return cls(user, password)
        except ConfigurationError as e:
            raise ConfigurationError(f"{e} (in {where})") from None

    @property
    def digest_id(self) -> str:
        """ZooKeeper's digest id of this credential, ``user:base64(sha1(user:password))`` (what ACLs name)."""
        raw = hashlib.sha1(f"{self.user}:{self.password}".encode()).digest()  # noqa: S324 -- ZooKeeper's scheme
        return f"{self.user}:{base64.b64encode(raw).decode()}"


def member_credential(member: Credential, consumer_id: str) -> Credential:
    """The per-member credential of consumer ``consumer_id``: user = the consumer id, password = an HMAC of it keyed
    by the member role's password.  Only a process holding the member password can derive it; the consumer adds it
    to its session, so the znodes it names (its registration, its channel) refuse every other session."""
    tag = hmac.new(member.password.encode(), consumer_id.encode(), hashlib.sha256).hexdigest()
    return Credential(consumer_id, tag)


@dataclass(frozen=True, slots=True)
class AclPolicy:
    """The deployment's roles: the coordinator's and the member's digest ids (``/config/acl``)."""

    coordinator: str
    member: str

    def __post_init__(self) -> None:
        for what, ident in (("coordinator", self.coordinator), ("member", self.member)):
            if not _DIGEST_ID.fullmatch(ident):
                raise ConfigurationError(f"ACL policy: {what} is not a digest id user:base64")
        if self.coordinator == self.member:
            raise ConfigurationError("ACL policy: the coordinator and member identities must differ")

    def encode(self) -> bytes:
        doc = {"coordinator": self.coordinator, "member": self.member, "version": 1}
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes, path: str = POLICY) -> AclPolicy:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise CodecError("ACL policy", f"not JSON ({e})", path) from None
        if not isinstance(doc, dict) or doc.get("version") != 1 or set(doc) != {"coordinator", "member", "version"}:
            raise CodecError("ACL policy", "expected {coordinator, member, version: 1}", path)
        if not isinstance(doc["coordinator"], str) or not isinstance(doc["member"], str):
            raise CodecError("ACL policy", "ids must be strings", path)
        try:
            return cls(doc["coordinator"], doc["member"])
        except ConfigurationError as e:
            raise CodecError("ACL policy", str(e), path) from None

    def role_of(self, credential: Credential) -> str:
        """``"coordinator"`` or ``"member"``.  :raises ConfigurationError: the credential is neither role's."""
        ident = credential.digest_id
        if ident == self.coordinator:
            return "coordinator"
        if ident == self.member:
            return "member"
        raise ConfigurationError(
            f"ZooKeeper user {credential.user!r} is neither the coordinator nor the member identity of this "
            f"deployment's ACL policy ({POLICY}); check --zk-auth"
        )


READ_ALL = Grant("world", "anyone", Perm.READ)


def _digest(ident: str, perms: Perm) -> Grant:
    return Grant("digest", ident, perms)


def group_of(path: str | None) -> str | None:
    """The group a znode below ``/consumers/groups/<group>/`` (or that group's own node) belongs to, else None."""
    part = None if path is None else _group_part(path)
    return None if part is None else part[0]


def _group_part(path: str) -> tuple[str, list[str]] | None:
    """``(group, segments below it)`` for a path under ``/consumers/groups/<group>``, else None."""
    head = f"{paths.GROUPS}/"
    if not path.startswith(head):
        return None
    group, *rest = path[len(head) :].split("/")
    return group, rest


#: Directories of a group in which members create znodes (their registration, their channel, offsets, reset
#: records, static instances): the member role gets CREATE on them.  ``instances`` also DELETE: a static member
#: takes its instance znode over from its own previous session.
_MEMBER_DIRS = {
    "ids": Perm.CREATE,
    "channel": Perm.CREATE,
    "ack": Perm.CREATE,
    "offsets": Perm.CREATE,
    "resets": Perm.CREATE,
}


def acl_for(policy: AclPolicy, path: str, own: tuple[str, str] | None = None) -> list[Grant]:
    """The ACL a znode at ``path`` is created with.  ``own``: the creating consumer's ``(consumer id, per-member
    digest id)`` (members only; :func:`member_credential`).

    Everyone may read everything; the coordinator identity may do everything to every znode; beyond that:

    * ``/consumers/groups``: members CREATE (a group's first member creates its node);
    * ``<group>``: members CREATE (its member directories; see docs/security.md for what this cannot stop);
    * ``<group>/{ids,channel,ack,offsets,resets}`` and ``offsets/<t>``, ``resets/<t>``: members CREATE;
      ``instances``: members CREATE and DELETE;
    * ``ids/<c>`` (ephemeral): its own member WRITE (re-registering); ``channel/<c>``: its own member WRITE (the
      acknowledgement record) and DELETE (acknowledging = deleting a command), ``ack/<c>`` (the consumer protocol's
      acknowledgement) likewise -- "its own" is the per-member id;
    * ``offsets/<t>/<p>``, ``resets/<t>/<p>``: members WRITE (a partition's owner changes between members);
    * ``classic/sync``: members WRITE (the classic protocol's leader, whichever member the generation names);
    * anything else (commands, owners, state, KIP-848 records, brokers, topics, configs, election znodes): read-only
      but for the coordinator.
    """
    coordinator = _digest(policy.coordinator, Perm.ALL)
    base = [READ_ALL, coordinator]
    member = policy.member
    if path == paths.GROUPS:
        return [*base, _digest(member, Perm.CREATE)]
    part = _group_part(path)
    if part is None:
        return base
    _group, rest = part
    if not rest:
        return [*base, _digest(member, Perm.CREATE)]
    top = rest[0]
    if len(rest) == 1 and top in _MEMBER_DIRS:
        return [*base, _digest(member, _MEMBER_DIRS[top])]
    if len(rest) == 1 and top == "instances":
        return [*base, _digest(member, Perm.CREATE | Perm.DELETE)]
    if top in ("offsets", "resets") and len(rest) == 2:
        return [*base, _digest(member, Perm.CREATE)]
    if top in ("offsets", "resets") and len(rest) == 3:
        return [*base, _digest(member, Perm.WRITE)]
    if rest == ["classic", "sync"]:
        # the classic protocol's leader -- any member, chosen per generation -- writes the generation's assignment;
        # its transaction checks the join record's version, and the coordinator validates what it wrote
        return [*base, _digest(member, Perm.WRITE)]
    if top in ("ids", "channel", "ack") and len(rest) == 2:
        if own is None or own[0] != rest[1]:
            return base  # created for a member by someone else: only the member's own process can name it
        return [*base, _digest(own[1], Perm.WRITE if top == "ids" else Perm.WRITE | Perm.DELETE)]
    return base


def may_create(role: str, path: str) -> bool:
    """Whether a process of ``role`` creates ``path`` when missing.  Members create only below their group's node
    (and the group's node): the shared parents are the coordinator side's (``zkcoord zk secure``, brokers)."""
    if role == "coordinator":
        return True
    return _group_part(path) is not None
