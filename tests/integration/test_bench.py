"""``zkcoord bench rebalance`` end to end on a small configuration, its JSON document, its errors; and the pure
measurements it is built on (the ownership replay and the settle condition), on hand-made journal events."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from zkcoord.bench.rebalance.timeline import Event, GroupTracker, expected_owners, outage
from zkcoord.cli.analyze_cmd import analyze
from zkcoord.cli.bench_cmd import bench

pytestmark = pytest.mark.integration

CHANGE_KEYS = {
    "protocol",
    "kind",
    "trial",
    "group",
    "consumer",
    "members_before",
    "members_after",
    "partitions",
    "completed",
    "latency_ms",
    "from_command_ms",
    "stw_ms",
    "gap_ms",
    "unfetched_partition_ms",
    "attempts",
    "conflicts",
    "retries",
    "aborted",
    "failures",
    "rejected",
    "reopened",
    "zk_requests",
    "zk_reads",
    "zk_writes",
    "zk_requests_raw",
    "zk_packets_raw",
    "zk_window_s",
    "zk_background_per_s",
    "cpu_ms",
    "start_ts",
    "trigger_ts",
    "done_ts",
    "breakdown_ms",
    "mode",
    "commanded",
    "moved_partitions",
    "stopped_partitions",
    "acks",
    "member_steps",
    "leader_compute_ms",
    "sync_wait_ms",
    "zk_requests_by_role",
}
SUMMARY_KEYS = {
    "protocol",
    "kind",
    "consumers",
    "partitions",
    "groups",
    "trials",
    "changes",
    "completed",
    "formed",
    "latency_ms",
    "stw_ms",
    "gap_ms",
    "unfetched_partition_ms_p50",
    "zk_requests_per_rebalance",
    "zk_reads_per_rebalance",
    "zk_writes_per_rebalance",
    "attempts",
    "conflicts",
    "retries",
    "aborted",
    "failures",
    "rejected",
    "reopened",
    "cpu_ms_p50",
    "window_ms_p50",
    "from_command_ms_p50",
    "x_floor_watch",
    "x_floor_write",
    "x_floor_idle",
    "legacy_backoff_s",
    "breakdown_ms_p50",
    "commanded_p50",
    "moved_partitions_p50",
    "stopped_partitions_p50",
    "acks_p50",
    "member_steps_p50",
    "leader_compute_ms_p50",
    "sync_wait_ms_p50",
    "zk_requests_by_role_p50",
}
STATS_KEYS = {"n", "p50", "p95", "max", "mean"}
PROTOCOLS = ["coordinator", "incremental", "consumer", "zk-client"]
RATIOS = (
    "legacy_over_coordinator",
    "legacy_over_incremental",
    "coordinator_over_incremental",
    "legacy_over_consumer",
    "incremental_over_consumer",
    "classic_over_coordinator",
)
COMPARISON_KEYS = {f"{kind}_{ratio}" for kind in ("join", "leave") for ratio in RATIOS}


def _bench_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "ZKCOORD_HOME": str(tmp_path / "home")}


@pytest.mark.timeout(150)
def test_small_run_of_every_protocol_settles_every_change(zk_hosts: str, tmp_path: Path) -> None:
    """The default protocols: coordinator, incremental, consumer, zk-client.  The incremental assertions (the mode
    of its rebalances, fewer partitions stopped than the eager coordinator's) need the coordinator's incremental
    rebalances; the consumer ones (KIP-848's epochs, its end at the group written stable) the consumer protocol's
    engine."""
    out = tmp_path / "rebalance.json"
    result = CliRunner().invoke(
        bench,
        [
            "rebalance",
            "--consumers",
            "4",
            "--partitions",
            "16",
            "--trials",
            "1",
            "--legacy-backoff",
            "0.2",
            "--session-timeout",
            "4",
            "--zk",
            zk_hosts,
            "--run-dir",
            str(tmp_path / "run"),
            "--out",
            str(out),
        ],
        catch_exceptions=False,
        env={"ZKCOORD_HOME": str(tmp_path / "home")},
    )
    assert result.exit_code == 0, result.output
    assert "p50 ms" in result.output and "x floor" in result.output  # the table
    doc: dict[str, Any] = json.loads(out.read_text())

    assert doc["schema"] == 1 and doc["benchmark"] == "rebalance"
    assert doc["config"]["protocols"] == PROTOCOLS
    assert doc["config"]["legacy_backoff_s"] == 0.2
    floor = doc["floor"]["quiet"]
    assert floor["samples"] > 0 and floor["write_ms"]["p50"] > 0 and floor["watch_ms"]["p50"] > 0
    # A server it did not start (--zk): its CPU time is not known; the client's is.
    assert floor["server_cpu_ms_per_watched_write"] is None and floor["client_cpu_ms_per_watched_write"] > 0
    assert floor["server_cpu_ms_per_read"] is None and floor["client_cpu_ms_per_read"] > 0
    assert [p["protocol"] for p in doc["protocols"]] == PROTOCOLS
    for run in doc["protocols"]:
        assert run["formed"], run
        assert run["error"] is None
        assert run["floor_loaded"]["watch_ms"]["p50"] > 0
        assert run["formation"]["attempts"] >= 1

    assert {(r["protocol"], r["kind"]) for r in doc["summary"]} == {
        (p, k) for p in PROTOCOLS for k in ("join", "leave")
    }
    for row in doc["summary"]:
        assert set(row) == SUMMARY_KEYS, set(row) ^ SUMMARY_KEYS
        assert row["changes"] == row["completed"] == 1, row
        assert set(row["latency_ms"]) == STATS_KEYS
        assert row["latency_ms"]["p50"] > 0
        assert row["stw_ms"]["p50"] >= 0 and row["gap_ms"]["p50"] > 0
        assert row["zk_requests_per_rebalance"] > 0
        assert row["x_floor_watch"] > 0 and row["x_floor_write"] > 0
        assert row["attempts"] >= 1
        assert row["failures"] == 0 and row["rejected"] == 0
        # No "zookeeper": the run used an existing one (--zk), whose CPU time counts under "others".
        assert set(row["cpu_ms_p50"]) == {"broker", "workers", "driver", "others", "kernel"}
    assert set(doc["comparison"]) == COMPARISON_KEYS
    assert doc["comparison"]["join_legacy_over_coordinator"] > 0
    assert doc["comparison"]["join_legacy_over_incremental"] > 0
    assert (
        doc["comparison"]["join_legacy_over_consumer"] > 0 and doc["comparison"]["join_incremental_over_consumer"] > 0
    )
    assert doc["config"]["scenarios"] == ["join-leave"] and doc["rolling_restart"] is None

    changes = doc["changes"]
    assert len(changes) == 8
    for change in changes:
        assert set(change) == CHANGE_KEYS, set(change) ^ CHANGE_KEYS
        assert change["completed"] is True
        assert change["latency_ms"] > 0
        assert change["start_ts"] <= change["trigger_ts"] <= change["done_ts"]
        assert change["from_command_ms"] >= change["latency_ms"]
        assert change["members_after"] == change["members_before"] + (1 if change["kind"] == "join" else -1)
        assert change["zk_requests"] > 0 and change["zk_writes"] > 0
    coordinator_join = next(c for c in changes if c["protocol"] == "coordinator" and c["kind"] == "join")
    steps = coordinator_join["breakdown_ms"]
    # "requested" is None when the coordinator journalled the join's request before the bench's trigger time
    # (the joiner registers as it starts; seen once under load); the steps after it are always there.
    order = [steps[k] for k in ("requested", "started", "barrier", "start_applied_last") if steps[k] is not None]
    assert None not in (steps["started"], steps["barrier"], steps["start_applied_last"]), steps
    assert order == sorted(order), steps
    incremental_join = next(c for c in changes if c["protocol"] == "incremental" and c["kind"] == "join")
    assert set(incremental_join["breakdown_ms"]) == set(steps)
    assert coordinator_join["commanded"] == coordinator_join["members_after"]  # eager: every member
    for change in changes:
        coordinated = change["protocol"] != "zk-client"
        assert (change["commanded"] is not None) == coordinated, change
        assert (change["stopped_partitions"] is not None) == coordinated, change
        if change["protocol"] == "incremental":
            # Formed by an eager first rebalance; each change after it moves only what changes owner.
            assert change["mode"] == "incremental", change
            assert change["stopped_partitions"] < change["partitions"], change
            assert 0 < change["moved_partitions"] < change["partitions"], change
    for change in (c for c in changes if c["protocol"] == "consumer"):
        # KIP-848: one group epoch per change, ended by the group written stable after every member fetched.
        assert change["mode"] == "consumer" and change["attempts"] == 1, change
        assert change["aborted"] == 0, change  # the engine's abort of an epoch that had completed is not counted
        steps = change["breakdown_ms"]
        assert steps["started"] <= steps["fetching"] <= steps["completed"] == change["latency_ms"], change
        assert change["member_steps"] > 0 and change["acks"] > 0, change
        assert 0 < change["moved_partitions"] < change["partitions"], change
    for change in changes:
        roles = change["zk_requests_by_role"]
        assert roles["coordinator"] is not None and roles["members"] is not None, change
        if change["kind"] == "join":  # its own new session: its connect and registration at least
            assert roles["subject"] is not None and roles["subject"] >= 2, change
    # The journals of the run are kept with --run-dir: every worker, the broker.
    roles = {p.name.split(".")[0] for p in (tmp_path / "run" / "journal").glob("*.jsonl")}
    assert {"broker-1", "consumer-bench0"} <= roles

    # zkcoord analyze plots the JSON: the protocols side by side.
    plotted = CliRunner().invoke(analyze, ["--bench", str(out), "--out", str(tmp_path / "plots")])
    assert plotted.exit_code == 0, plotted.output
    assert "coordinator join" in plotted.output and "zk-client   leave" in plotted.output
    assert "incremental join" in plotted.output and "consumer    leave" in plotted.output
    page = (tmp_path / "plots" / "bench.html").read_text()
    for name in ("latency", "stw", "requests", "steps"):
        assert f"bench-{name}.png" in page
        assert (tmp_path / "plots" / f"bench-{name}.png").stat().st_size > 1000


@pytest.mark.timeout(120)
def test_rolling_restart_of_static_members_moves_no_partition(zk_hosts: str, tmp_path: Path) -> None:
    """--scenario rolling-restart alone: the consumer protocol only; every static member closed and started again
    with its instance id takes its partitions back, nobody else is disturbed, and no partition is unfetched for
    anywhere near the session timeout."""
    out = tmp_path / "rolling.json"
    args = ["rebalance", "--scenario", "rolling-restart", "--consumers", "3", "--partitions", "6"]
    args += ["--session-timeout", "4", "--zk", zk_hosts, "--out", str(out)]
    result = CliRunner().invoke(bench, args, catch_exceptions=False, env={"ZKCOORD_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    assert "Rolling restart (consumer protocol, static members)" in result.output
    doc: dict[str, Any] = json.loads(out.read_text())
    assert doc["config"]["protocols"] == ["consumer"] and doc["config"]["scenarios"] == ["rolling-restart"]
    assert doc["summary"] == [] and doc["changes"] == []  # no join-leave trials
    rolling = doc["rolling_restart"]
    assert rolling["formed"] and rolling["static_hold_s"] > rolling["session_timeout_s"]
    summary = rolling["summary"]
    assert summary["restarts"] == summary["completed"] == summary["replaced"] == 3, summary
    assert summary["no_partition_moved"] and summary["moved_partitions"] == 0, summary
    assert summary["epoch_bumps"] == 0 and summary["disturbed"] == 0, summary
    assert summary["gap_under_session_timeout"] is True and summary["stw_ms_max"] == 0, summary
    restarts = rolling["restarts"]
    assert sorted(r["instance_id"] for r in restarts) == ["i000", "i001", "i002"]
    for r in restarts:
        assert r["consumer"] != r["previous"] and r["partitions_after"] == r["partitions_before"] == 2, r
        # The restarted member's partitions were not fetched between its close and its successor's start.
        assert 0 < r["gap_ms"] <= r["stable_ms"] and r["back_ms"] <= r["stable_ms"], r
        assert r["closed_ms"] > 0 and r["started_ms"] > 0 and r["zk_requests"] > 0, r
        assert r["zk_requests_by_role"]["coordinator"] is not None, r
    plotted = CliRunner().invoke(analyze, ["--bench", str(out), "--out", str(tmp_path / "plots")])
    assert plotted.exit_code == 0, plotted.output


@pytest.mark.timeout(120)
def test_subprocess_run_with_its_own_zookeeper(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from zkcoord.cli.bench_cmd import bench; bench()",
            "rebalance",
            "--protocol",
            "coordinator",
            "--consumers",
            "2",
            "--partitions",
            "4",
            "--trials",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=110,
        env=_bench_env(tmp_path),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "[coordinator] trial 1/1 join" in proc.stderr  # progress while it runs
    doc = json.loads(out.read_text())
    assert doc["meta"]["zookeeper"]["started"] is True
    assert [r["completed"] for r in doc["summary"]] == [1, 1]
    assert all(r["cpu_ms_p50"]["zookeeper"] is not None for r in doc["summary"])
    # Its own server: the CPU time a watched write costs it is measured, and reported.
    floor = doc["floor"]["quiet"]
    assert floor["server_cpu_ms_per_watched_write"] > 0 and floor["client_cpu_ms_per_watched_write"] > 0
    assert floor["server_cpu_ms_per_read"] > 0 and floor["client_cpu_ms_per_read"] > 0
    assert "CPU time per watched write" in proc.stdout


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--zk", "127.0.0.1:1", "--consumers", "1", "--partitions", "1"], 1, "127.0.0.1:1"),
        (["--consumers", "0"], 2, "--consumers"),
        (["--protocol", "kafka"], 2, "--protocol"),
        (["--scenario", "restart"], 2, "--scenario"),
        (["--scenario", "rolling-restart", "--protocol", "incremental"], 1, "add --protocol consumer"),
        (["--scenario", "rolling-restart", "--consumers", "4", "--restarts", "5"], 1, "--restarts must be within"),
        (["--restarts", "2"], 1, "--restarts needs --scenario rolling-restart"),
    ],
)
def test_errors_are_one_line_and_non_zero(tmp_path: Path, args: list[str], status: int, message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from zkcoord.cli.bench_cmd import bench; bench()", "rebalance", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=_bench_env(tmp_path),
        check=False,
    )
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and message in errors[0], proc.stderr


# --- the measurements, on hand-made events -------------------------------------------------------------------------


_SEQ = itertools.count(1)


def _ev(ts: int, ev: str, **fields: Any) -> Event:
    return Event(ts, 1, next(_SEQ), ev, {"group": "g", **fields})


def _fetch(ts: int, started: bool, consumer: str, partition: int) -> Event:
    ev = "fetch.started" if started else "fetch.stopped"
    return _ev(ts, ev, consumer=consumer, thread=f"{consumer}-0", topic="t", partition=partition)


def test_outage_measures_stop_the_world_and_gaps() -> None:
    initial = [{("a", "a-0")}, {("b", "b-0")}]
    events = [
        _fetch(100, False, "a", 0),  # partition 0 unfetched from 100
        _fetch(110, False, "b", 1),  # nothing fetched from 110 ...
        _fetch(150, True, "b", 0),  # ... to 150
        _fetch(170, True, "a", 1),
    ]
    lost = outage(initial, events, "t", start_ms=90, end_ms=200)
    assert (lost.stw_ms, lost.gap_ms, lost.unfetched_ms) == (40, 60, 50 + 60)
    # No instant without any partition: no stop-the-world, only gaps.
    staggered = [_fetch(100, False, "a", 0), _fetch(105, True, "b", 0), _fetch(110, False, "b", 1)]
    staggered.append(_fetch(120, True, "a", 1))
    lost = outage(initial, staggered, "t", start_ms=90, end_ms=200)
    assert (lost.stw_ms, lost.gap_ms) == (0, 10)


def test_tracker_settles_at_the_event_that_completes_the_new_assignment() -> None:
    legacy = GroupTracker("g", "zk-client", "t", 2)
    a, b = "g_h-1-aaaaaaaa", "g_h-1-bbbbbbbb"
    owners = expected_owners([a, b], "t", 2)
    assert owners == [f"{a}-0", f"{b}-0"]
    legacy.set_members([a])
    for e in [
        _fetch(1, True, a, 0),
        _fetch(1, True, a, 1),
        _ev(2, "legacy.rebalance.completed", consumer=a, members=1),
    ]:
        legacy.apply(e)
    assert legacy.settled()
    legacy.set_members([a, b])
    legacy.arm()
    steps = [
        _fetch(10, False, a, 0),
        _fetch(10, False, a, 1),
        _fetch(12, True, a, 0),
        _ev(13, "legacy.rebalance.completed", consumer=a, members=2),
        _ev(14, "legacy.rebalance.conflict", consumer=b, partition=1),
        _fetch(30, True, b, 1),
    ]
    for e in steps:
        legacy.apply(e)
        assert legacy.settled_at is None
    done = _ev(31, "legacy.rebalance.completed", consumer=b, members=2)
    legacy.apply(done)
    assert legacy.settled_at is done and legacy.settled()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ('{"benchmark": "other", "schema": 1}', "is not a 'zkcoord bench' result"),
        ('{"benchmark": "rebalance", "schema": 2}', "schema 2 is not supported"),
        ('{"benchmark": "rebalance", "schema": 1, "summary": []}', "field 'changes' is missing"),
    ],
)
def test_analyze_refuses_what_is_not_a_bench_result_in_one_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    result = CliRunner().invoke(analyze, ["--bench", str(path), "--out", str(tmp_path / "plots")])
    assert result.exit_code == 1
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "plots").exists()
