"""The classic-switch demo scenario's check (``zkcoord/testbed/scenario/strategy.py``): from a journal, a group's
strategy switched from range to roundrobin exactly once, in the first generation all of whose members support
roundrobin.  Journals written with the project's own writer, on a deterministic clock."""

from __future__ import annotations

import itertools
from pathlib import Path

from zkcoord.runtime.journal import Journal
from zkcoord.testbed.scenario.strategy import check_switch

OLD = ["range"]
NEW = ["roundrobin", "range"]


def journal(tmp_path: Path, generations: list[tuple[list[str], str]], upgraded: set[str]) -> Path:
    """A journal of ``generations`` (members, strategy), each completed; ``upgraded`` registered ``NEW``."""
    clock = itertools.count(1000)
    j = Journal(tmp_path, "broker-1", wall_ms=lambda: next(clock))
    for member in sorted({m for members, _ in generations for m in members}):
        j.emit("consumer.registered", group="g", consumer=member, assignors=NEW if member in upgraded else OLD)
    for g, (members, strategy) in enumerate(generations, start=1):
        j.emit("rebalance.started", group="g", generation=g, members=members)
        j.emit("classic.joined", group="g", generation=g, strategy=strategy)
        j.emit("rebalance.completed", group="g", generation=g)
    j.close()
    return tmp_path


def test_a_switch_once_when_the_last_old_member_is_gone_is_right(tmp_path: Path) -> None:
    history = [(["a", "b"], "range"), (["b", "c"], "range"), (["c", "d"], "roundrobin")]
    assert check_switch(journal(tmp_path, history, {"c", "d"}), "g") == []


def test_a_switch_too_early_too_late_or_twice_is_a_problem(tmp_path: Path) -> None:
    early = [(["a", "b"], "range"), (["b", "c"], "roundrobin"), (["c", "d"], "roundrobin")]
    assert any("generation 2" in p for p in check_switch(journal(tmp_path / "early", early, {"c", "d"}), "g"))
    late = [(["a", "b"], "range"), (["c", "d"], "range")]
    assert check_switch(journal(tmp_path / "late", late, {"c", "d"}), "g")
    twice = [(["a"], "range"), (["c"], "roundrobin"), (["a", "c"], "range"), (["c", "d"], "roundrobin")]
    assert any("exactly once" in p for p in check_switch(journal(tmp_path / "twice", twice, {"c", "d"}), "g"))
    assert check_switch(journal(tmp_path / "none", [], set()), "g") == ["no classic generation of g completed"]
