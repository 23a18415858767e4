"""The multi-host scenario: every process on its own host (a network namespace made by the run), partitions that drop
packets between hosts, the ensemble's leader killed; the verdict from the shared journal.

The verdict is the single-process reader's (``zkcoord.bench.analyze_python``, which ``tests/spark`` keeps in
agreement with ``zkcoord analyze``): the same S1-S5 counts without starting Spark, so the run stays within the suite's
budget; as ``zkcoord analyze``'s PASS, it needs every line usable.  Needs root, ``ip``, ``nsenter`` and
``iptables``: it is skipped, saying why, only where they are missing.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.ledger import Ledger
from zkcoord.bench.analyze_python import python_analysis
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.multihost import net
from zkcoord.testbed.multihost.cluster import HOSTS_WORKLOAD, run_hosts
from zkcoord.testbed.multihost.faults import HOST_FAULTS
from zkcoord.testbed.procs import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(net.missing() is not None, reason=f"no hosts can be made here: {net.missing()}"),
]

#: a one-connection-at-a-time TCP server on port 7000 that answers "ok"
SERVER = (
    "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
    "s.bind(('0.0.0.0', 7000)); s.listen(8)\n"
    "while True:\n c, _ = s.accept(); c.sendall(b'ok'); c.close()"
)
CLIENT = (
    "import socket, sys\n"
    "try:\n socket.create_connection((sys.argv[1], 7000), timeout=1.5).recv(2); print('ok')\n"
    "except TimeoutError: print('timeout')\n"
    "except OSError as e: print(type(e).__name__)"
)


def _connect(host: net.Host, target: net.Host) -> str:
    out = subprocess.run([*host.enter, sys.executable, "-c", CLIENT, target.ip], capture_output=True, text=True,
                         timeout=20, check=True)  # fmt: skip
    return out.stdout.strip()


def test_a_partition_drops_packets_both_ways_and_heals() -> None:
    lab = net.NetLab()
    try:
        a, b, c = lab.add("a"), lab.add("b"), lab.add("c")
        server = subprocess.Popen([*a.enter, sys.executable, "-c", SERVER])
        try:
            wait_until(lambda: _connect(b, a) == "ok", 10, "the server on host a to accept", interval=0.1)
            net.drop_between([a], [b])
            # Dropped, not refused: the client hears nothing and times out, from either side; c is not cut.
            assert _connect(b, a) == "timeout"
            assert _connect(c, a) == "ok"
            # a's own connections to b vanish too (no listener on b: a refusal would say ConnectionRefusedError)
            assert _connect(a, b) == "timeout"
            assert _connect(a, c) == "ConnectionRefusedError"
            net.heal([a])
            assert _connect(b, a) == "ok"
        finally:
            server.kill()
            server.wait()
    finally:
        lab.close()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"zkc{lab.tag}-" not in namespaces
    with pytest.raises(OSError):
        socket.if_nametoindex(lab.bridge)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_partitions_between_hosts_keep_every_property_and_lose_nothing(tmp_path: Path) -> None:
    run = tmp_path / "hosts"
    lines: list[str] = []
    result = run_hosts(run, say=lines.append)
    assert [d.split(":")[0] for d in result.done] == list(HOST_FAULTS), lines
    journal = run / "journal"
    events = sorted(read_journal(journal), key=lambda e: (e.ts_ms, e.pid, e.seq))
    faults = Counter(e.fields["fault"] for e in events if e.event == "fault.injected")
    assert faults["partition"] == 3 and faults["partition-healed"] == 3 and faults["zk-leader-kill"] == 1, faults
    # The coordinator cut off lost its term to a broker of the majority side.
    [cut] = [
        e for e in events
        if e.event == "fault.injected" and e.fields["fault"] == "partition" and e.fields["target"].startswith("broker-")
    ]  # fmt: skip
    elected = [e for e in events if e.event == "coordinator.elected"]
    assert any(e.ts_ms > cut.ts_ms for e in elected), "no coordinator elected after the cut"
    # 3 brokers, 4 consumers, 2 producers at least (each on a host of its own)
    assert len({(e.role, e.pid) for e in events if e.event == "process.started"}) >= 3 + 4 + 2
    verdict = python_analysis(journal)
    assert verdict.counts == dict.fromkeys(("S1", "S2", "S3", "S3-risk", "S4", "S5", "S8"), 0), verdict.counts
    assert verdict.unusable == 0, "lines the verdict could not use: its zeros prove nothing"
    w = HOSTS_WORKLOAD
    for group, topics in ((w.static_group, {w.static_topic}), (w.wildcard_group, set(w.wildcard_topics))):
        ledger = Ledger.read(journal, group)
        assert ledger.total_produced(topics) > 0 and not ledger.missing(topics), group
