"""Steps of the ``classic-switch`` scenario: a classic-protocol group on ``range`` rolled, one member at a time, onto
``--assignors roundrobin,range`` while producing, and the check that its strategy switched once, at the right moment.

Each ``upgrade-strategy`` step stops one ``range``-only member of the static group with SIGTERM (it must exit 0) and
starts a member with ``--assignors roundrobin,range`` in its place, then waits for the group to settle.  The group
keeps ``range`` while any member supports only it and switches to ``roundrobin`` in the rebalance in which the last
``range``-only member is gone (``docs/classic-protocol.md``).  :func:`check_switch` reads that from the journal: the
strategy of every completed generation (``classic.joined``) against its members (``rebalance.started``) and the
strategies each member registered with (``consumer.registered``'s ``assignors``).

Runs on the scenario runner's thread; every wait has a deadline.
"""

from __future__ import annotations

import itertools
import random
import signal
from pathlib import Path

from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.scenario.cluster import RunCluster
from zkcoord.testbed.scenario.faults import Fault, Say, Skipped, _left_cleanly, _settle

OLD = ("--protocol", "classic", "--assignors", "range")
NEW = ("--protocol", "classic", "--assignors", "roundrobin,range")


def upgrade_strategy(cluster: RunCluster, rng: random.Random, say: Say) -> str:
    """Roll one ``range``-only member of the static group onto ``roundrobin,range``."""
    group = cluster.workload.static_group
    old = [m for m in cluster.live_members(group) if m.kind == "classic-range"]
    if not old:
        return Skipped("nothing left to upgrade")
    member = rng.choice(old)
    member.proc.signal(signal.SIGTERM)
    _left_cleanly(member)
    successor = cluster.start_consumer(group, kind="classic-roundrobin", extra=NEW)
    left = len(old) - 1
    cluster.record_fault(
        "upgrade-strategy",
        f"consumer-{member.proc.pid}",
        f"range-only member replaced by roundrobin,range member {successor.proc.pid}; {left} range-only left",
    )
    say(f"classic consumer {member.proc.pid} of {group} restarted with --assignors roundrobin,range")
    _settle(cluster)
    return f"{left} range-only members left"


def check_switch(journal_dir: Path, group: str) -> list[str]:
    """The problems with the group's strategy history: it must go from ``range`` to ``roundrobin`` exactly once, in
    the first generation all of whose members support ``roundrobin``, and end there."""
    upgraded: set[str] = set()
    members: dict[int, set[str]] = {}
    strategy: dict[int, str] = {}
    completed: set[int] = set()
    for e in sorted(read_journal(journal_dir), key=lambda ev: (ev.ts_ms, ev.pid, ev.seq)):
        f = e.fields
        if f.get("group") != group:
            continue
        if e.event == "consumer.registered" and "roundrobin" in (f.get("assignors") or []):
            upgraded.add(str(f.get("consumer")))
        elif e.event == "rebalance.started":
            members[int(f["generation"])] = set(f.get("members") or [])
        elif e.event == "classic.joined":
            strategy[int(f["generation"])] = str(f.get("strategy"))
        elif e.event == "rebalance.completed":
            completed.add(int(f["generation"]))
    history = [(g, strategy[g]) for g in sorted(completed) if g in strategy]
    if not history:
        return [f"no classic generation of {group} completed"]
    problems = []
    switches = sum(1 for (_, a), (_, b) in itertools.pairwise(history) if a != b)
    if switches != 1 or history[0][1] != "range" or history[-1][1] != "roundrobin":
        problems.append(f"{group}'s strategy did not switch from range to roundrobin exactly once: {history}")
    for g, used in history:
        if (used == "roundrobin") != (bool(members.get(g)) and members[g] <= upgraded):
            problems.append(f"generation {g} of {group} used {used} with members {sorted(members.get(g, ()))}")
    return problems


#: Steps of the classic-switch scenario.
STRATEGY_STEPS: dict[str, Fault] = {
    "upgrade-strategy": Fault(
        "upgrade-strategy",
        "restart one range-only classic member with --assignors roundrobin,range",
        upgrade_strategy,
    ),
}
