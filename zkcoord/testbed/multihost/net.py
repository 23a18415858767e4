"""Hosts with their own network stacks, and partitions between them that drop packets.

A :class:`Host` is a network namespace reached through a path (``/run/netns/NAME`` for one this process made,
``/proc/PID/ns/net`` for a container's); a process runs on it through ``nsenter --net=PATH`` (:attr:`Host.enter`).
:func:`drop_between` writes iptables ``DROP`` rules into the namespaces of one side, for both directions: packets
vanish, nothing is refused or reset, so a peer finds out only by its own timeouts -- as on a real network that
partitions.  :func:`heal` flushes them.

:class:`NetLab` makes hosts itself: namespaces, each with a veth on one bridge of a private /24, for a run on one
machine (the multi-host scenario); :meth:`NetLab.close` removes everything it made.  Needs root and the ``ip``,
``nsenter`` and ``iptables`` commands (:func:`missing`).  Every method blocks on those commands (seconds at most) and
raises :class:`NetError`; use from one thread.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from zkcoord.errors import ZkCoordError

COMMANDS = ("ip", "nsenter", "iptables")
_TIMEOUT_S = 20.0


class NetError(ZkCoordError):
    """A namespace, link or rule could not be made or removed."""


def missing() -> str | None:
    """Why hosts cannot be made here (not root, a command absent), or ``None`` when they can."""
    if os.geteuid() != 0:
        return "network namespaces and iptables need root"
    absent = [c for c in COMMANDS if shutil.which(c) is None]
    return f"missing commands: {', '.join(absent)}" if absent else None


def _run(*argv: str, check: bool = True) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NetError(f"{' '.join(argv)}: {e}") from e
    if check and done.returncode != 0:
        raise NetError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True, slots=True)
class Host:
    """One host: a name, its address, and the path of its network namespace."""

    name: str
    ip: str
    netns: str

    @property
    def enter(self) -> tuple[str, ...]:
        """The command prefix that runs a command on this host (it ``exec``s: the pid stays the command's)."""
        return ("nsenter", f"--net={self.netns}")

    def iptables(self, *args: str) -> None:
        _run(*self.enter, "iptables", "-w", *args)


def drop_between(side: Iterable[Host], others: Iterable[Host]) -> None:
    """Drop every packet between each host of ``side`` and each of ``others``, both ways (rules on ``side``)."""
    peers = list(others)
    for host in side:
        for peer in peers:
            host.iptables("-A", "INPUT", "-s", peer.ip, "-j", "DROP")
            host.iptables("-A", "OUTPUT", "-d", peer.ip, "-j", "DROP")


def heal(hosts: Iterable[Host]) -> None:
    """Remove every rule :func:`drop_between` wrote on ``hosts``."""
    for host in hosts:
        host.iptables("-F", "INPUT")
        host.iptables("-F", "OUTPUT")


@dataclass
class NetLab:
    """Hosts as network namespaces on one bridge (``10.231.N.0/24``, the bridge is ``.1``), made by this process."""

    tag: str = field(default_factory=lambda: f"{random.randrange(16**4):04x}")
    hosts: list[Host] = field(default_factory=list)
    _made: list[tuple[str, ...]] = field(default_factory=list)  # undo commands, run in reverse by close()

    def __post_init__(self) -> None:
        reason = missing()
        if reason:
            raise NetError(f"cannot make hosts: {reason}")
        used = _run("ip", "-o", "-4", "addr", "show")
        free = [n for n in range(256) if f"10.231.{n}." not in used]
        if not free:
            raise NetError("no free 10.231.N.0/24 for the hosts' bridge")
        self.subnet = f"10.231.{random.choice(free)}"
        self.bridge = f"zkb{self.tag}"
        self._do(("ip", "link", "add", self.bridge, "type", "bridge"), ("ip", "link", "del", self.bridge))
        _run("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        # Docker's engine loads br_netfilter and sets FORWARD's policy to DROP: traffic between ports of any bridge
        # then goes through FORWARD, and would be dropped without this.
        rule = ("FORWARD", "-i", self.bridge, "-o", self.bridge, "-j", "ACCEPT")
        self._do(("iptables", "-w", "-I", *rule), ("iptables", "-w", "-D", *rule))

    def add(self, name: str) -> Host:
        """A new host called ``name`` (unique in this lab) on the bridge, its loopback up."""
        index = len(self.hosts) + 2
        if index > 254:
            raise NetError("a lab holds at most 253 hosts")
        ns = f"zkc{self.tag}-{index}"
        veth = f"zkv{self.tag}{index}"
        self._do(("ip", "netns", "add", ns), ("ip", "netns", "del", ns))
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "link", "set", veth, "master", self.bridge, "up")
        _run("ip", "-n", ns, "addr", "add", f"{self.subnet}.{index}/24", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        host = Host(name, f"{self.subnet}.{index}", f"/run/netns/{ns}")
        self.hosts.append(host)
        return host

    def close(self) -> None:
        """Remove the namespaces (their veths go with them), the bridge and the forwarding rule.  Idempotent."""
        while self._made:
            _run(*self._made.pop(), check=False)
        self.hosts.clear()

    def _do(self, command: Sequence[str], undo: tuple[str, ...]) -> None:
        _run(*command)
        self._made.append(undo)
