"""``docs/zookeeper-layout.md`` is a contract: every znode a live cluster writes is in it, with the documented kind.

The test reads the layout's trees out of the document itself, starts a real cluster (a broker hosting the
coordinator, an eager and an incremental coordinator group, the latter with a dynamic config set by ``zkcoord group
config``, a classic-protocol group, a Kafka 0.8 ``zk-client`` group and a group migrating from one to the other, a
producer, a checkpoint taken by ``zkcoord group checkpoint``), makes the coordinator leave a command unacknowledged in
the channel of a paused consumer (commands are otherwise deleted within milliseconds), and walks the whole tree:

* every znode matches one documented path (the most specific one, literal names before ``<placeholders>``);
* a documented ``ephemeral`` node has an ephemeral owner, a ``persistent`` one has none, a
  ``persistent-sequential`` one has none and ends in ZooKeeper's 10-digit sequence number;
* every documented leaf was seen, so a path the code stopped writing cannot linger in the document (a committed
  offset beyond the log's end makes a consumer write its reset record);
* every channel's data is empty or the name of a command (the last one its consumer acknowledged), and some
  channel records one;
* every key of every member registration (both protocols' ``ids/``) is one the document names for
  ``MemberRegistration``, and every coordinator consumer's registration publishes its ``max_poll_interval_ms``.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli import run_cli
from tests.integration.test_consumer_e2e import Run
from zkcoord.data.topics import TopicAdmin
from zkcoord.layout import paths
from zkcoord.layout.commands import decode_acknowledged
from zkcoord.layout.region import CompletedRecord
from zkcoord.layout.znodes import encode_int
from zkcoord.runtime.journal import read_journal
from zkcoord.testbed.procs import ChildProcess, wait_until
from zkcoord.zk import ZkClient

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "zookeeper-layout.md"
_TREE_LINE = re.compile(r"^(?P<indent>[│ ]*)[├└]── (?P<name>\S+)(?:\s+(?P<kind>ephemeral|persistent(?:-sequential)?))?")
_PLACEHOLDER = re.compile(r"<([^>]+)>")
_CHANNEL = re.compile(r"/consumers/groups/[^/]+/channel/[^/]+")
_MEMBER = re.compile(r"/consumers/(?:groups/)?[^/]+/ids/[^/]+")
_COORDINATOR_MEMBER = re.compile(r"/consumers/groups/[^/]+/ids/[^/]+")


@dataclass(frozen=True)
class Documented:
    """One path of the document's trees: a leaf with its kind, or a container (kind None)."""

    path: str
    kind: str | None

    @property
    def regex(self) -> re.Pattern[str]:
        out, pos = [], 0
        for m in _PLACEHOLDER.finditer(self.path):
            out.append(re.escape(self.path[pos : m.start()]))
            name = m.group(1)
            if "|" in name:
                out.append("(?:" + "|".join(re.escape(a) for a in name.split("|")) + ")")
            elif name == "seq":
                out.append(r"\d{10}")
            else:
                out.append(r"[^/]+")
            pos = m.end()
        out.append(re.escape(self.path[pos:]))
        return re.compile("".join(out))

    @property
    def specificity(self) -> int:
        """Literal characters: ``/consumers/coordinator`` is preferred over ``/consumers/<group>``."""
        return len(_PLACEHOLDER.sub("", self.path))


def documented_layout(text: str) -> list[Documented]:
    """Every path of every tree in the document's code blocks, containers included."""
    found: dict[str, Documented] = {}
    for block in re.findall(r"```\n(.*?)```", text, flags=re.S):
        lines = block.splitlines()
        if not lines or not lines[0].startswith("/"):
            continue
        root = lines[0].split()[0].rstrip("/")
        stack: list[str] = [root]  # stack[d] is the path of the last entry at depth d
        entries = [m for m in map(_TREE_LINE.match, lines[1:]) if m is not None]
        base = min((len(m.group("indent")) for m in entries), default=0)  # a tree may be indented under its root
        for m in entries:
            depth = (len(m.group("indent")) - base) // 4 + 1
            parent = stack[depth - 1]
            full = f"{parent}/{m.group('name')}"
            del stack[depth:]
            stack.append(full)
            # the parents a multi-segment name implies (``ids/<brokerId>`` implies ``ids``) are containers
            parts = m.group("name").split("/")
            for i in range(1, len(parts)):
                implied = f"{parent}/{'/'.join(parts[:i])}"
                found.setdefault(implied, Documented(implied, None))
            found[full] = Documented(full, m.group("kind"))
            for i in range(2, root.count("/") + 2):  # the block's root and its parents
                prefix = "/".join(root.split("/")[:i])
                found.setdefault(prefix, Documented(prefix, None))
    return list(found.values())


def registration_keys(text: str) -> set[str]:
    """The keys the document gives a member registration: its example's, and every ``"key"`` named in its table row
    and in the paragraph that describes registrations."""
    (row,) = [line for line in text.splitlines() if "| `MemberRegistration` |" in line]
    example = json.loads(re.findall(r"`(\{.*?\})`", row)[0])
    (paragraph,) = re.findall(r"^Member registrations:.*?(?:\n\n|\Z)", text, flags=re.S | re.M)
    return set(example) | set(re.findall(r'`"(\w+)"', row + paragraph))


def walk(zk: ZkClient, path: str = "/") -> Iterator[tuple[str, int]]:
    """``(path, ephemeral owner)`` of every znode under ``path``, ZooKeeper's own ``/zookeeper`` excluded."""
    for child in zk.get_children(path):
        full = f"{path.rstrip('/')}/{child}"
        if full == "/zookeeper":
            continue
        stat = zk.exists(full)
        if stat is None:  # deleted while walking (a command acknowledged, a member leaving)
            continue
        yield full, stat.ephemeralOwner
        yield from walk(zk, full)


def start_region(run: Run) -> list[ChildProcess]:
    """A driver and two members of a consistent region on group ``reg``; the second starts once the driver gave a
    first order, into the running region, so it requests a reset (requests/)."""
    ids = ["--zk", run.hosts, "--session-timeout", run.session, "--journal", str(run.journal)]
    driver = ChildProcess(
        ["region", "driver", "--group", "reg", "--region", "r1", "--members", "m1,m2", "--interval", "0.5", *ids],
        run.root / "region-driver.log",
    )
    run.stack.enter_context(driver)
    procs = [driver]
    for name in ("m1", "m2"):
        proc = ChildProcess(
            ["region", "member", "--group", "reg", "--topic", "t", "--region", "r1", "--member-name", name,
             "--store-dir", str(run.root / "store"), "--data-dir", str(run.data), *ids],
            run.root / f"region-{name}.log",
        )  # fmt: skip
        run.stack.enter_context(proc)
        procs.append(proc)
        wait_until(lambda: run.zk.exists(paths.region_control("reg")) is not None, 30, "a first region order")
    return procs


def wait_region(run: Run, procs: list[ChildProcess]) -> list[tuple[str, int]]:
    """Until m2 requested a reset and a checkpoint is complete (merges/<seqId>/<name> stays until retired); then the
    region's tree as walked, and its processes stopped (they load the machine during the timing-sensitive part)."""
    wait_until(lambda: run.zk.exists(paths.region_request("reg", "m2")) is not None, 30, "m2's reset request")

    def completed() -> bool:
        return any(e.event == "region.completed" for e in read_journal(run.journal))

    wait_until(completed, 60, "a complete region checkpoint", interval=0.25)
    seen = [(paths.group("reg"), 0), *walk(run.zk, paths.group("reg"))]
    # the driver records what it completed: region/completed names a checkpoint it journalled complete
    record = CompletedRecord.decode(run.zk.get(paths.region_completed("reg"))[0], paths.region_completed("reg"))
    done = [e.fields["checkpoint"] for e in read_journal(run.journal) if e.event == "region.completed"]
    assert record.seq in done, (record, done)
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(20)
    return seen


def test_the_documented_trees_parse() -> None:
    layout = {d.path: d.kind for d in documented_layout(DOC.read_text())}
    assert layout["/brokers/ids/<brokerId>"] == "ephemeral"
    assert layout["/consumers/coordinator_epoch"] == "persistent"
    assert layout["/consumers/<group>/owners/<topic>/<partition>"] == "ephemeral"
    assert layout["/consumers/groups/<group>"] is None
    assert layout["/consumers/groups/<group>/channel/<consumerId>"] == "persistent"
    assert any(kind == "persistent-sequential" for kind in layout.values())


@pytest.fixture
def run(zk_hosts: str, tmp_path: Path) -> Iterator[Run]:
    with ExitStack() as stack:
        yield Run(zk_hosts, tmp_path, stack)


#: documented znodes that only a deployment with ACLs writes
ONLY_WITH_ACLS = {"/config/acl"}


def test_every_znode_a_live_cluster_writes_is_documented_with_its_kind(run: Run) -> None:
    layout = documented_layout(DOC.read_text())
    run.broker()
    TopicAdmin(run.zk).create("t", 4)
    producer = run.producer("t", 2_000, 2_000)
    run.consumer("eager", "t")
    run.consumer("incr", "t", extra=("--rebalance", "incremental"))
    configured = run_cli("group", "config", "set", "incr", "assignor=uniform", "--zk", run.hosts)
    assert configured.returncode == 0, configured.stderr
    run.consumer("old", "t", extra=("--protocol", "zk-client"))
    run.consumer("mig", "t", extra=("--protocol", "zk-client"))
    run.consumer("mig", "t", extra=("--migrating",))
    # A committed offset beyond the log's end: the consumer resets it and records the reset under resets/.
    run.zk.create(paths.offset("reset", "t", 0), encode_int(999_999_999), makepath=True)
    run.consumer("reset", "t")
    run.consumer("kip", "t", extra=("--protocol", "consumer", "--instance-id", "i1"))  # KIP-848's records, instances/
    run.consumer("cls", "t", extra=("--protocol", "classic", "--assignors", "roundrobin,range"))  # classic/
    paused = run.consumer("eager", "t")
    run.wait_members("eager", 2)
    run.wait_members("incr", 1)
    run.wait_members("mig", 1)
    run.wait_members("kip", 1)
    run.wait_members("cls", 1)
    region = start_region(run)  # a consistent region's tree: region/... (after the groups above settled: load)
    assert producer.wait(60) == 0
    for group in ("eager", "incr", "old", "mig", "reset", "kip", "cls"):
        run.wait_consumed_all(group, {"t"})
    region_seen = wait_region(run, region)
    checkpointed = run_cli("group", "checkpoint", "eager", "cp", "--zk", run.hosts)  # an operator's checkpoints/
    assert checkpointed.returncode == 0, checkpointed.stderr

    # A paused member cannot acknowledge, so the stop-fetcher of the next rebalance stays in its channel.
    paused_id = next(
        e.fields["consumer"]
        for e in read_journal(run.journal)
        if e.event == "consumer.registered" and e.pid == paused.pid and e.fields.get("group") == "eager"
    )
    paused.signal(signal.SIGSTOP)
    try:
        run.consumer("eager", "t")
        paused_channel = paths.channel("eager", paused_id)

        def command_pending() -> bool:
            # In the paused member's own channel: one in another member's may be acknowledged before the walk.
            return any(name.startswith(paths.COMMAND_PREFIX) for name in run.zk.get_children(paused_channel))

        wait_until(command_pending, 30, "a command left in the paused member's channel")
        seen = list(walk(run.zk))
        seen += [z for z in region_seen if z[0] not in {path for path, _ in seen}]
    finally:
        paused.signal(signal.SIGCONT)

    unmatched, wrong_kind, matched = [], [], set()
    for path, owner in seen:
        candidates = [d for d in layout if d.regex.fullmatch(path)]
        if not candidates:
            unmatched.append(path)
            continue
        doc = max(candidates, key=lambda d: d.specificity)
        matched.add(doc.path)
        name = path.rsplit("/", 1)[1]
        ok = {
            None: owner == 0,
            "persistent": owner == 0,
            "ephemeral": owner != 0,
            "persistent-sequential": owner == 0 and re.search(r"\d{10}$", name) is not None,
        }[doc.kind]
        if not ok:
            wrong_kind.append(f"{path} (documented as {doc.path}, {doc.kind or 'container'}; owner {owner:#x})")
    assert unmatched == [], f"znodes the layout does not document: {unmatched}"
    assert wrong_kind == [], f"znodes of another kind than documented: {wrong_kind}"
    # /config/acl exists only in a tree secured by `zkcoord zk secure` (tests/hostile/test_acl.py reads it there);
    # this cluster runs without credentials, as a deployment without ACLs does.
    never_seen = sorted(
        d.path for d in layout if d.kind is not None and d.path not in matched and d.path not in ONLY_WITH_ACLS
    )
    assert never_seen == [], f"documented znodes no part of the cluster wrote: {never_seen}"

    # A channel's data is the name of the last command its consumer acknowledged, or empty (none yet).
    channels = [path for path, _ in seen if _CHANNEL.fullmatch(path)]
    records = {path: decode_acknowledged(run.zk.get(path)[0], path) for path in channels}  # raises if malformed
    assert any(record is not None for record in records.values()), f"no channel records an acknowledgement: {records}"

    # Every key a live member registration carries is documented; every coordinator consumer publishes its interval.
    documented = registration_keys(DOC.read_text())
    members = [path for path, _ in seen if _MEMBER.fullmatch(path) and run.zk.exists(path) is not None]
    registrations = {path: json.loads(run.zk.get(path)[0]) for path in members}
    undocumented = {path: sorted(set(reg) - documented) for path, reg in registrations.items() if set(reg) - documented}
    assert undocumented == {}, f"registration keys the layout does not document: {undocumented}"
    silent = [
        p for p, reg in registrations.items() if _COORDINATOR_MEMBER.fullmatch(p) and "max_poll_interval_ms" not in reg
    ]
    assert silent == [], f"coordinator consumers that publish no poll interval: {silent}"
