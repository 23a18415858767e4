"""``zkcoord analyze --master spark://...`` on a real Spark standalone cluster (a master and two workers started from
the installed PySpark, on 127.0.0.1): the same verdict as local mode, and one clear line when the executors cannot
read the journals (they run where a directory of the driver's is hidden, as on other hosts)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli import run_cli
from tests.spark.journals import clean_run, finish
from tests.spark.standalone import StandaloneCluster
from zkcoord.analysis import Verdict

pytestmark = pytest.mark.spark

#: A cold cluster analyses in tens of seconds on a quiet 2-core machine; a loaded one takes several times that.
ANALYZE_S = 400


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    base = tmp_path_factory.mktemp("standalone")
    hidden = base / "driver-only"
    hidden.mkdir()
    with StandaloneCluster(base, workers=2, hidden=hidden) as c:
        yield c


def _runs(verdict: dict[str, Any]) -> dict[str, Any]:
    """Each run's verdict by name (a run's order and the analysis' time and place may differ)."""
    return {r["run"]: r for r in verdict["runs"]}


def test_a_standalone_cluster_gives_the_local_verdict(
    cluster: StandaloneCluster, processed_runs_verdict: tuple[Path, Verdict], tmp_path: Path
) -> None:
    base, local = processed_runs_verdict  # the runs of tests/spark/journals.processed_runs, analysed on local[2]
    out = tmp_path / "out"
    result = run_cli(
        "analyze", str(base), "--master", cluster.url, "--out", str(out), "--json", "--no-report", "-q",
        env=cluster.env, timeout=ANALYZE_S,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr  # some of these runs FAIL, on purpose
    remote = json.loads(result.stdout)
    assert _runs(remote) == _runs(local.to_dict())
    state = cluster.state()
    assert state is not None
    # the work was done by the cluster's executors: the master ran the application, with both workers' cores
    apps = [a for a in state["completedapps"] if a["name"] == "zkcoord-analyze"]
    assert len(apps) == 1 and apps[0]["cores"] == 2, apps


def test_journals_the_executors_cannot_see_are_one_line(cluster: StandaloneCluster, tmp_path: Path) -> None:
    assert cluster.hidden is not None
    run = cluster.hidden / "run"
    finish(clean_run(run))
    try:
        result = run_cli(
            "analyze", str(run), "--master", cluster.url, "--out", str(tmp_path / "out"), "--no-report", "-q",
            env=cluster.env, timeout=ANALYZE_S,
        )  # fmt: skip
    finally:
        shutil.rmtree(run)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout == ""
    journal = run / "journal"
    assert result.stderr.startswith(f"Error: Spark's executors cannot read the journal {journal}/"), result.stderr
    assert "(it does not exist for them): the journals must be on storage every executor sees" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
