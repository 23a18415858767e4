"""The random nemesis's schedule: a pure function of the seed (the same in another process, whatever its hash seed),
drawn over every fault kind, with two faults at once in every schedule, never two on the same part of the system;
and bad ``--seed``/``--seeds`` input is one ``Error:`` line."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest

from tests.cli import run_cli
from zkcoord.analysis.verdict import PROPERTIES, PropertyResult, ReadCounts, RunVerdict, Verdict
from zkcoord.cli.demo_cmd import seed_summary, seeds_total
from zkcoord.errors import ConfigurationError
from zkcoord.runtime.faults import _armed, arm, disarm
from zkcoord.testbed.procs import ProcessError, wait_until
from zkcoord.testbed.scenario import faults, nemesis
from zkcoord.testbed.scenario.faults import FAULTS, Fault, Skipped
from zkcoord.testbed.scenario.nemesis import (
    Schedule,
    Step,
    draw_schedule,
    parse_seed,
    parse_seeds,
    resource,
    run_schedule,
)
from zkcoord.testbed.scenario.runner import RunResult

if TYPE_CHECKING:
    from zkcoord.testbed.scenario.cluster import RunCluster

SEEDS = range(200)


def test_a_schedule_is_a_pure_function_of_its_seed() -> None:
    here = [draw_schedule(seed, 120).to_json() for seed in range(20)]
    assert here == [draw_schedule(seed, 120).to_json() for seed in range(20)]
    code = (
        "import json; from zkcoord.testbed.scenario.nemesis import draw_schedule; "
        "print(json.dumps([draw_schedule(s, 120).to_json() for s in range(20)]))"
    )
    for hash_seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        assert json.loads(out.stdout) == here
    assert len({json.dumps(s["steps"]) for s in here}) == len(here), "two seeds drew the same schedule"


def test_every_schedule_overlaps_two_faults_on_different_parts_within_the_run() -> None:
    for seed in SEEDS:
        for duration in (20.0, 120.0, 600.0):
            schedule = draw_schedule(seed, duration)
            assert len(schedule.steps) == max(1, int(duration // 30)), (seed, duration)
            assert schedule.overlapping >= 1, (seed, duration)
            for step in schedule.steps:
                assert 2.0 <= step.at_s <= duration * 0.75, step
                assert step.kind in FAULTS
                if step.overlap is not None:
                    assert step.overlap in FAULTS and resource(step.overlap) != resource(step.kind), step
                    assert 0.3 <= step.overlap_after_s <= 3.0, step
            assert [s.at_s for s in schedule.steps] == sorted(s.at_s for s in schedule.steps)


def test_every_fault_kind_is_drawn_alone_first_and_second() -> None:
    first = {s.kind for seed in SEEDS for s in draw_schedule(seed, 120).steps}
    second = {s.overlap for seed in SEEDS for s in draw_schedule(seed, 120).steps if s.overlap}
    assert first == set(FAULTS) and second == set(FAULTS)
    # the pairs the issue names: a coordinator pause during a consumer kill, ZooKeeper restarted during a rebalance
    pairs = {(s.kind, s.overlap) for seed in SEEDS for s in draw_schedule(seed, 120).steps}
    assert ("consumer-kill", "coordinator-zombie") in pairs and ("consumer-join", "zk-restart") in pairs


def test_seeds_parse_or_say_why_not() -> None:
    assert parse_seeds("3..7") == range(3, 8) and parse_seeds("5") == range(5, 6) and parse_seed(" 9 ") == 9
    for bad in ("", "x", "1..", "..3", "7..3", "-1..2", "1.5", "0..5000", "1..2..3"):
        with pytest.raises(ConfigurationError):
            parse_seeds(bad)
    for bad in ("", "x", "-1", "1e3", str(2**32), "1_0", "+3", "\u0661"):
        with pytest.raises(ConfigurationError):
            parse_seed(bad)
    # int() reads "1_0" as 10 and "\u0661" (an Arabic-Indic one) as 1: a seed is ASCII digits, as it is printed
    for bad in ("1_0..12", "1..1_2", "\u0661..3", "+1..3"):
        with pytest.raises(ConfigurationError):
            parse_seeds(bad)


@pytest.mark.parametrize(
    "args",
    [
        ("--seeds", "9..3"),
        ("--seeds", "a..b"),
        ("--seed", "seven"),
        ("--seed", "-2"),
        ("--seed", "1", "--seeds", "1..2"),
        ("--nemesis", "random", "--scenario", "zombie"),
        # with --seeds, a refused configuration is refused once, before any seed (not an ERROR line per seed)
        ("--nemesis", "random", "--scenario", "zombie", "--seeds", "1..3"),
        ("--seeds", "1..2", "--nemesis", "random", "--scenario", "migration", "--no-contrast"),
    ],
)
def test_bad_seed_input_is_one_error_line(args: tuple[str, ...], tmp_path: os.PathLike[str]) -> None:
    out = run_cli("demo", "--run-dir", str(tmp_path), *args)
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), out.stderr
    assert not list(os.scandir(tmp_path)), "a refused run must start nothing"


def test_a_fault_point_armed_and_not_fired_can_be_withdrawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault whose wait timed out withdraws what it armed: the point no longer fires at a later hit (nobody would
    be there to resume or restart the process); once it fired, there is nothing to withdraw."""
    monkeypatch.setenv("ZKCOORD_FAULT_DIR", str(tmp_path))
    arm(tmp_path, os.getpid(), "coordinator.before_start", "pause")
    assert disarm(tmp_path, os.getpid()) is True
    assert _armed("coordinator.before_start") is None, "a withdrawn point fired"
    assert disarm(tmp_path, os.getpid()) is False
    arm(tmp_path, os.getpid(), "coordinator.before_start", "pause")
    assert _armed("coordinator.before_start") is not None  # it fires (the process acts on it)...
    assert disarm(tmp_path, os.getpid()) is False  # ...and is gone


def test_a_skipped_fault_is_said_and_is_not_one_of_two_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault that finds nothing to inject into returns :class:`Skipped`: the log says so, nemesis.json lists it and
    its step does not count as two faults at once (it started during the first, but injected nothing)."""
    second_started = threading.Event()
    at: list[float] = []

    def first(cluster: object, rng: random.Random, say: Callable[[str], None]) -> str:
        assert second_started.wait(10), "the second fault never started"
        # in progress well past the second's start (the spans' times are rounded to 10 ms)
        wait_until(lambda: time.monotonic() > at[0] + 0.1, 5, "the first fault to outlast the second", interval=0.02)
        return "injected"

    def second(cluster: object, rng: random.Random, say: Callable[[str], None]) -> str:
        at.append(time.monotonic())
        second_started.set()
        return Skipped("nobody to kill")

    fakes = {"first": Fault("first", "", first), "second": Fault("second", "", second)}
    monkeypatch.setattr(nemesis, "FAULTS", fakes)
    schedule = Schedule(1, 20.0, (Step(2.0, "first", 7, "second", 0.3),))
    said: list[str] = []
    problems: list[str] = []
    cluster = cast("RunCluster", SimpleNamespace(run_dir=tmp_path))
    log = run_schedule(cluster, schedule, started=time.monotonic(), say=said.append, problems=problems,
                       pace=lambda offset: None)  # fmt: skip
    assert problems == [] and "fault second skipped: nobody to kill" in said, said
    assert log.skipped() == ["second: nobody to kill"]
    assert log.overlapped() == 0, "a skipped fault counted as overlapping"
    written = json.loads((tmp_path / "nemesis.json").read_text())
    assert written["skipped"] == ["second: nobody to kill"] and written["overlapped"] == 0


def test_a_coordinator_fault_waits_for_a_coordinator_rather_than_skipping() -> None:
    """Under another fault (ZooKeeper restarting, a failover) there is a moment without a coordinator: the coordinator
    faults wait it out (with a deadline) instead of giving up on the fault."""
    answers = iter([None, None, 2])
    cluster = cast(
        "RunCluster", SimpleNamespace(coordinator=lambda: next(answers), workload=SimpleNamespace(session_timeout_s=3))
    )
    assert faults._coordinator(cluster) == 2


def test_a_seed_line_says_what_was_skipped() -> None:
    verdict = Verdict((RunVerdict("safe", "j", ReadCounts(1, 1, 1), tuple(
        PropertyResult(k, t, 0) for k, t in PROPERTIES.items())),), "out")  # fmt: skip
    result = RunResult(Path("r/safe"), unsafe=False, skipped=["network-cut: no proxied consumer"])
    result.nemesis = {"seed": 3, "steps": 1, "faults": 2, "overlapping": 1, "overlapped": 0, "skipped": 1}
    entry = seed_summary(3, [result], verdict)
    assert entry["line"].startswith("seed 3: safe PASS; 2 faults, 0/1 two-at-once steps overlapped; skipped: safe 1;")
    assert entry["runs"]["safe"]["skipped"] == ["network-cut: no proxied consumer"]


def test_without_an_analysis_a_seed_is_not_analysed_and_the_total_does_not_fail() -> None:
    """``--seeds`` with ``--no-analysis``: each run says so, and no run counts as PASS or FAIL."""
    result = RunResult(Path("r/safe"), unsafe=False)
    result.nemesis = {"seed": 4, "steps": 1, "faults": 2, "overlapping": 1, "overlapped": 1, "skipped": 0}
    entry = seed_summary(4, [result], None)
    assert entry["line"].startswith("seed 4: safe not analysed; 2 faults, 1/1 two-at-once steps overlapped;")
    assert entry["runs"]["safe"]["status"] == "not analysed"
    assert seeds_total([entry]) == {"line": "total: 1 seeds; not analysed", "safe_failed": False}
    errored = {"seed": 5, "runs": {}, "error": "x", "line": "seed 5: ERROR x"}
    assert seeds_total([entry, errored])["safe_failed"] is True


def test_a_slow_member_whose_fault_did_not_land_leaves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``consumer-kill-after-revoke`` starts a member working at half the rate records arrive; when a wait of the
    fault times out (under another fault), that member must leave, not stay behind for the rest of the run with a
    backlog that outlives the drain (seed 8 of a 20-seed run)."""
    signals: list[int] = []
    alive = [True]

    def signal_(sig: int) -> None:
        signals.append(sig)
        alive[0] = False

    proc = SimpleNamespace(pid=4242, alive=lambda: alive[0], signal=signal_, wait=lambda timeout: 0, tail=lambda n: "")
    victim = SimpleNamespace(proc=proc)
    workload = SimpleNamespace(rebalance="eager", static_group="g", rate=200, static_partitions=4)
    cluster = cast(
        "RunCluster",
        SimpleNamespace(workload=workload, members=[], fault_dir=tmp_path, start_consumer=lambda *a, **k: victim),
    )

    def never(condition: Callable[[], bool], timeout: float, what: str, **kw: object) -> None:
        raise ProcessError(f"timed out after {timeout:g} s waiting for {what}")

    monkeypatch.setattr(faults, "wait_until", never)
    with pytest.raises(ProcessError, match="stable with the slow member"):
        faults.consumer_kill_after_revoke(cluster, random.Random(1), lambda line: None)
    assert signals == [15], "the slow member was left running"
