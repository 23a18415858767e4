"""How to reach ZooKeeper: the connect string ``HOST:PORT[,HOST:PORT...][/chroot]`` and the client's settings.

Pure values (no I/O); :mod:`zkcoord.zk` re-exports both, and its :class:`~zkcoord.zk.ZkClient` takes a
:class:`ZkConfig`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from zkcoord.errors import ConfigurationError

_HOSTPORT = re.compile(r"(?P<host>[A-Za-z0-9.\-]+|\[[0-9a-fA-F:]+\]):(?P<port>[0-9]{1,5})")
_CHROOT = re.compile(r"(/[A-Za-z0-9._\-]+)+")


@dataclass(frozen=True, slots=True)
class ZkAddress:
    """A parsed ``HOST:PORT[,HOST:PORT...][/chroot]`` connect string."""

    hosts: tuple[tuple[str, int], ...]
    chroot: str | None = None

    @classmethod
    def parse(cls, text: str) -> ZkAddress:
        """Parse and validate a connect string; raise :class:`ConfigurationError` with the reason if malformed."""
        text = text.strip()
        hosts_part, slash, chroot_part = text.partition("/")
        chroot = f"/{chroot_part}" if slash else None
        if chroot is not None and not _CHROOT.fullmatch(chroot.rstrip("/") or "/x"):
            raise ConfigurationError(f"invalid ZooKeeper chroot {chroot!r} in {text!r}")
        if chroot is not None:
            chroot = chroot.rstrip("/") or None
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
    """

    address: ZkAddress
    session_timeout_s: float = 6.0
    connect_timeout_s: float = 10.0
    create_chroot: bool = True

    def __post_init__(self) -> None:
        if not 0.1 <= self.session_timeout_s <= 600:
            raise ConfigurationError(f"session timeout must be within 0.1..600 s, got {self.session_timeout_s}")
        if not 0.1 <= self.connect_timeout_s <= 3600:
            raise ConfigurationError(f"connect timeout must be within 0.1..3600 s, got {self.connect_timeout_s}")

    @classmethod
    def from_string(cls, text: str, **kwargs: Any) -> ZkConfig:
        return cls(address=ZkAddress.parse(text), **kwargs)
