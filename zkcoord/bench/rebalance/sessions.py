"""Who sent a change's ZooKeeper requests: the server's per-connection counters (``cons``), by role.

``mntr`` counts every request the server processed (:mod:`~zkcoord.bench.rebalance.zkfloor`), not whose it was.
The four-letter word ``cons`` lists every client connection with its session id (``sid``) and the packets received
from it (``recved``: every request, pings and the connect request included).  Two readings around a change, less the
background rate of the same connections in a quiet window before it, give each session's requests in the change;
the driver knows which session is whose (a registration's ``ephemeralOwner``), so they add up by role:

* ``coordinator``: the coordinator broker's session (the owner of ``/consumers/coordinator``);
* ``subject``: the consumer that joins (its new session, connect request included) or is restarted (the new session
  only); a consumer that leaves has closed its connection by the second reading, so its requests are not known
  (``None``), and are in ``other``;
* ``members``: the group's other members;
* ``other``: the rest of ``mntr``'s count (closed connections, other clients), or ``None`` without it.

A server that refuses ``cons`` (``4lw.commands.whitelist``) gives no readings, and every role is ``None``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from zkcoord.errors import ZkServerError
from zkcoord.zkserver import four_letter_word

#: one connection of ``cons``: ``/127.0.0.1:50022[1](queued=0,recved=2,sent=2,sid=0x10002cf039f0000,...)``
_CONNECTION = re.compile(r"recved=(\d+),.*?sid=0x([0-9a-fA-F]+)")

ROLES = ("coordinator", "subject", "members", "other")


@dataclass(frozen=True, slots=True)
class Sessions:
    """One ``cons`` reading: packets received per session id, and when (monotonic s, the counters' clock)."""

    at: float
    received: Mapping[int, int]


def read_sessions(host: str, port: int, at: float) -> Sessions | None:
    """The server's connections now (``None`` if it does not answer ``cons``: every role is then unknown)."""
    try:
        text = four_letter_word(host, port, "cons")
    except ZkServerError:
        return None
    received: dict[int, int] = {}
    for match in _CONNECTION.finditer(text):
        sid = int(match.group(2), 16)
        received[sid] = received.get(sid, 0) + int(match.group(1))
    return Sessions(at, received) if received else None


def by_role(
    quiet: Sessions | None,
    before: Sessions | None,
    after: Sessions | None,
    roles: Mapping[str, Collection[int]],
    *,
    total: float | None,
    groups: int,
) -> dict[str, float | None]:
    """Requests per role from ``before`` to ``after`` (per group), less each role's background rate from ``quiet``
    to ``before``; ``other`` is ``total`` (already per group, background subtracted) less the roles'.  A role whose
    sessions are all gone by ``after`` (a consumer that left) is ``None``."""
    out: dict[str, float | None] = dict.fromkeys(ROLES)
    if quiet is None or before is None or after is None:
        return out
    window = max(0.0, after.at - before.at)
    background = max(0.0, before.at - quiet.at)
    known = 0.0
    for role, sids in roles.items():
        live = [sid for sid in sids if sid in after.received]
        if not live:
            continue
        sent = sum(after.received[sid] - before.received.get(sid, 0) for sid in live)
        base = sum(before.received[sid] - quiet.received.get(sid, 0) for sid in live if sid in before.received)
        rate = base / background if background > 0 else 0.0
        value = max(0.0, sent - rate * window) / groups
        out[role] = round(value, 1)
        known += value
    if total is not None:
        out["other"] = round(max(0.0, total - known), 1)
    return out


__all__ = ["ROLES", "Sessions", "by_role", "read_sessions"]
