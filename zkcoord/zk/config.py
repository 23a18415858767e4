"""How to reach ZooKeeper: the connect string ``HOST:PORT[,HOST:PORT...][/chroot]`` and the client's settings.

Pure values (no I/O); :mod:`zkcoord.zk` re-exports both, and its :class:`~zkcoord.zk.ZkClient` takes a
:class:`ZkConfig`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zkcoord.errors import ConfigurationError
from zkcoord.layout.acl import AclPolicy, Credential

_HOSTPORT = re.compile(r"(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>[0-9]{1,5})")
#: The characters of a chroot segment: the alphabet of topic and group names (:mod:`zkcoord.layout.names`), a subset of
#: what ZooKeeper allows, so a chroot is safe in a shell line, a log line and a file name as well.
_SEGMENT = re.compile(r"[A-Za-z0-9._\-]+")


def znode_path_problem(path: str) -> str | None:
    """Why ZooKeeper would refuse ``path`` as a znode path, or None if it is valid.

    The rules of ZooKeeper's ``PathUtils.validatePath`` (which the server and kazoo apply too, kazoo with a Python
    ``ValueError``): absolute; ``/`` alone, or no trailing ``/``; no empty segment; no ``.`` or ``..`` segment; no
    NUL, no control character (U+0001..U+001F, U+007F..U+009F), nothing in U+D800..U+F8FF or U+FFF0..U+FFFF, and
    (as Java sees a character beyond U+FFFF as a surrogate pair) nothing beyond U+FFFF.  Pure; never raises.
    """
    if not path.startswith("/"):
        return "must start with '/'"
    if path == "/":
        return None
    if path.endswith("/"):
        return "must not end with '/'"
    for segment in path[1:].split("/"):
        if not segment:
            return "empty segment ('//')"
        if segment in (".", ".."):
            return f"relative segment {segment!r} not allowed"
    for i, c in enumerate(path):
        n = ord(c)
        if n == 0 or n <= 0x1F or 0x7F <= n <= 0x9F or 0xD800 <= n <= 0xF8FF or n >= 0xFFF0:
            return f"character {c!r} at {i} not allowed"
    return None


def validate_chroot(chroot: str) -> str:
    """Return ``chroot`` if it is a legal chroot, else raise :class:`ConfigurationError` saying which rule it breaks.

    A legal chroot is a valid znode path (:func:`znode_path_problem`, ZooKeeper's own rule), outside ZooKeeper's
    reserved ``/zookeeper`` subtree, whose every segment uses the name alphabet (ASCII letters, digits, ``.``, ``_``,
    ``-``).
    """
    problem = znode_path_problem(chroot)
    if problem is None and (chroot == "/zookeeper" or chroot.startswith("/zookeeper/")):
        problem = "/zookeeper is reserved for ZooKeeper itself"
    if problem is None:
        bad = sorted({c for seg in chroot[1:].split("/") for c in seg if not _SEGMENT.fullmatch(c)})
        if bad:
            problem = f"illegal characters {''.join(bad)!r}; use ASCII letters, digits, '.', '_', '-' and '/'"
    if problem is not None:
        raise ConfigurationError(f"invalid ZooKeeper chroot {chroot!r}: {problem}")
    return chroot


@dataclass(frozen=True, slots=True)
class ZkAddress:
    """A parsed ``HOST:PORT[,HOST:PORT...][/chroot]`` connect string."""

    hosts: tuple[tuple[str, int], ...]
    chroot: str | None = None

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ConfigurationError("a ZooKeeper address needs at least one HOST:PORT")
        if self.chroot is not None:
            validate_chroot(self.chroot)

    @classmethod
    def parse(cls, text: str) -> ZkAddress:
        """Parse and validate a connect string; raise :class:`ConfigurationError` with the reason if malformed.

        As ZooKeeper's own ``ConnectStringParser``: everything from the first ``/`` is the chroot, and ``/`` alone
        means none.  Any other string raises :class:`ConfigurationError` and nothing else.
        """
        text = text.strip()
        hosts_part, slash, chroot_part = text.partition("/")
        chroot = f"/{chroot_part}" if slash and chroot_part else None
        if chroot is not None:
            validate_chroot(chroot)
        hosts: list[tuple[str, int]] = []
        for item in hosts_part.split(","):
            m = _HOSTPORT.fullmatch(item.strip())
            if not m:
                raise ConfigurationError(f"invalid ZooKeeper address {item!r} in {text!r}: expected HOST:PORT")
            port = int(m["port"])
            if not 1 <= port <= 65535:
                raise ConfigurationError(f"invalid ZooKeeper port {port} in {text!r}")
            hosts.append((m["host"], port))
        return cls(hosts=tuple(hosts), chroot=chroot)

    @property
    def servers(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.hosts)

    def __str__(self) -> str:
        return self.servers + (self.chroot or "")


@dataclass(frozen=True, slots=True)
class ZkConfig:
    """How to reach ZooKeeper.  Validates itself; raises :class:`ConfigurationError`.

    :param session_timeout_s: requested session timeout; the server clamps it to its own bounds
        (2..20 ticks by default).  Short timeouts make failure detection fast and tests quick.
    :param connect_timeout_s: how long :meth:`ZkClient.start` waits for the first connection.
    :param create_chroot: create the chroot node on start if it does not exist.
    :param auth: digest credentials (``--zk-auth``); with them the session authenticates, reads the deployment's ACL
        policy at start and creates every znode with the ACL of :mod:`zkcoord.layout.acl`.  None: no credentials,
        open ACLs (the default, as before).
    :param consumer_id: the consumer this session acts for (a consumer's own znodes name its per-member id).
    :param policy: the ACL policy to apply instead of reading it (``zkcoord zk secure``, which writes it).
    """

    address: ZkAddress
    session_timeout_s: float = 6.0
    connect_timeout_s: float = 10.0
    create_chroot: bool = True
    auth: Credential | None = None
    consumer_id: str | None = None
    policy: AclPolicy | None = None

    def __post_init__(self) -> None:
        if not 0.1 <= self.session_timeout_s <= 600:
            raise ConfigurationError(f"session timeout must be within 0.1..600 s, got {self.session_timeout_s}")
        if not 0.1 <= self.connect_timeout_s <= 3600:
            raise ConfigurationError(f"connect timeout must be within 0.1..3600 s, got {self.connect_timeout_s}")
        if self.policy is not None and self.auth is None:
            raise ConfigurationError("an ACL policy needs credentials (--zk-auth)")

    @classmethod
    def from_string(cls, text: str, **kwargs: Any) -> ZkConfig:
        return cls(address=ZkAddress.parse(text), **kwargs)
