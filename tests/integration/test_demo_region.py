"""The region scenario end to end (``zkcoord demo --scenario region``, issue 24): a consistent region under a member
kill and restart, a member paused past its session, a leave and a join, a coordinator failover and partitions added
keeps S1-S5 and S8 (every record produced counted exactly once in the last checkpoint's state).  One safe run of
about 20 s of producing; the region-less contrast is left to ``zkcoord demo`` (docs/demo.md has its figures).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import run_cli
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.scenario.region import REGION_STEPS

#: a whole demo run and a Spark analysis: minutes on a busy 2-core machine
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(1300)]

#: the journalled fault names each step produces
EVIDENCE = {
    "member-kill": "consumer-kill",
    "member-pause": "consumer-pause",
    "member-leave-join": "consumer-join",
    "coordinator-failover": "coordinator-kill",
    "partitions-added": "partitions-added",
}


def test_region_scenario_keeps_s1_to_s5_and_exactly_once_state(tmp_path: Path) -> None:
    assert set(EVIDENCE) == set(REGION_STEPS)
    run_dir = tmp_path / "demo"
    out = run_cli(
        "demo", "--scenario", "region", "--no-contrast", "--duration", "20", "--rate", "100",
        "--run-dir", str(run_dir), "--json", timeout=1200,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    report = json.loads(out.stdout)
    [safe] = report["runs"]
    assert safe["problems"] == [], safe["problems"]
    for kind, evidence in EVIDENCE.items():
        assert safe["faults"].get(evidence, 0) >= 1, f"fault {kind} was not injected"
    [run] = report["verdict"]["runs"]
    props = run["properties"]
    assert run["status"] == "PASS", {k: p["count"] for k, p in props.items()}
    s8 = props["S8"]
    assert s8["applicable"] and s8["complete_checkpoints"] >= 2 and s8["resets"] >= 1, s8
    # every record produced was journalled, and the partitions added were consumed into the last state
    events = list(read_journal(run_dir / "safe" / "journal"))
    produced = sum(e.fields["count"] for e in events if e.event == "produce.batch")
    assert s8["records_journalled"] == produced > 0
    added = {e.fields["partition"] for e in events if e.event == "produce.batch" and e.fields["partition"] >= 4}
    assert added, "nothing was produced to the partitions added"
    last = max(e.fields["checkpoint"] for e in events if e.event == "region.completed")
    covered = {
        tp for e in events if e.event == "region.checkpoint" and e.fields["checkpoint"] == last
        for tp in e.fields["offsets"]
    }  # fmt: skip
    assert {f"ledger/{p}" for p in added} <= covered
