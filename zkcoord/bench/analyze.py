"""The Spark analysis against a single-process pass in plain Python, on synthetic journals of 10^6 and 10^7 events.

    zkcoord bench analyze [--size small|medium|large] [--events 1000000,10000000] [--master local[2]] [--out FILE]
        [--dir DIR]

For each size it writes two synthetic runs (journals in the shape the real processes write: ``produce.batch`` and
``records.consumed`` ranges, commits, fetch intervals, rebalances with their commands, a coordinator failover,
faults): a clean one, and one with known violations (an ownership overlap, a gap, a clean duplicate, a deposed
coordinator's write, a stale command applied).  Then it times

* ``spark``: :func:`zkcoord.analysis.run_analysis` of both runs together (tables, verdict; no report), in local
  mode, with the JVM started and warmed up by one small analysis (both timed apart, not counted);
* ``python``: the same verdict counts computed by one Python process over the same files with the reference
  reader :func:`zkcoord.runtime.journal.read_journal` (:func:`zkcoord.bench.analyze_python.python_verdict`), run by
  run.

Both must agree on every count, and on the violations injected; the table goes to stdout, the rows to JSON.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from zkcoord.analysis.bench_tables import analyze_table
from zkcoord.bench.analyze_python import python_verdict
from zkcoord.bench.common import BenchError, envelope, write_document

PARTITIONS = 16
CONSUMERS = 4
BATCH = 100  # records per produce.batch / records.consumed
TICK_MS = 10
REBALANCE_EVERY = 400  # ticks
GROUP, TOPIC = "g", "bench"
#: S3-risk stays 0: the synthetic consumers journal no records.processed, so their commits are not judged
INJECTED = {"S1": 1, "S2": 1, "S3": BATCH, "S3-risk": 0, "S4": BATCH, "S5": 1, "S8": 0}
CORE = '{"v":1,"ts":%d,"mono":%d,"seq":%d,"role":"%s","pid":%d,"ev":"%s",'


class Writer:
    """One process's journal file, written in big chunks."""

    def __init__(self, journal: Path, role: str, pid: int) -> None:
        self.f = (journal / f"{role}.{pid}.jsonl").open("w", buffering=1 << 20)
        self.role, self.pid, self.seq, self.count = role, pid, 0, 0

    def emit(self, ts: int, ev: str, rest: str) -> None:
        self.seq += 1
        self.count += 1
        self.f.write(CORE % (ts, ts * 1000, self.seq, self.role, self.pid, ev) + rest + "}\n")


def _cid(i: int) -> str:
    return f"{GROUP}_bench-1000-{i:08x}"


G = f'"group":"{GROUP}"'


class Synth:
    """A synthetic run: a producer, two brokers (a failover half-way), consumers, a rebalance every few seconds."""

    def __init__(self, run_dir: Path, violations: bool) -> None:
        journal = run_dir / "journal"
        journal.mkdir(parents=True)
        self.violations = violations
        self.producer = Writer(journal, "producer", 10)
        self.brokers = [Writer(journal, "broker-1", 11), Writer(journal, "broker-2", 12)]
        self.consumers = [Writer(journal, f"consumer-{i}", 20 + i) for i in range(CONSUMERS)]
        self.coord, self.epoch, self.generation = self.brokers[0], 1, 0
        self.owner: dict[int, int] = {}
        self.late_stop: tuple[int, int, int] | None = None
        self.stale_pending = False
        self.coord.emit(1_000_000, "coordinator.elected", '"broker":1,"epoch":1,"session":"0x1"')
        for i, c in enumerate(self.consumers):
            c.emit(1_000_001, "consumer.registered", f'{G},"consumer":"{_cid(i)}","pattern":"static",'
                   f'"subscription":{{"{TOPIC}":1}},"session":"0x2","registrations":1')  # fmt: skip

    def failover(self, ts: int) -> None:
        self.coord.emit(ts, "coordinator.resigned", f'"broker":1,"epoch":{self.epoch},"reason":"session lost"')
        self.epoch, self.coord = self.epoch + 1, self.brokers[1]
        self.coord.emit(ts + 1, "coordinator.elected", f'"broker":2,"epoch":{self.epoch},"session":"0x3"')
        self.producer.emit(ts + 1, "fault.injected", '"fault":"kill","target":"broker-1","detail":"SIGKILL"')
        if self.violations:  # the deposed coordinator still writes (S1); its command is applied late (S5)
            old = f'"option":"stop-fetcher","epoch":{self.epoch - 1},"generation":{self.generation}'
            self.brokers[0].emit(ts + 2, "command.sent", f'{G},"consumer":"{_cid(0)}",{old},"partitions":1')
            self.stale_pending = True

    def rebalance(self, ts: int, tick: int) -> None:
        self.generation += 1
        gen, epoch, coord = self.generation, self.epoch, self.coord
        target = {p: (p + gen) % CONSUMERS for p in range(PARTITIONS)}
        moved = sum(1 for p in target if self.owner.get(p) != target[p])
        members = json.dumps([_cid(i) for i in range(CONSUMERS)])
        coord.emit(ts, "rebalance.requested", f'{G},"trigger":"member change"')
        coord.emit(ts, "rebalance.started", f'{G},"generation":{gen},"epoch":{epoch},"attempt":0,"trigger":'
                   f'"member change","reason":"members changed","members":{members},"partitions":{PARTITIONS},'
                   '"assignor":"range"')  # fmt: skip
        for phase, option in ((1, "stop-fetcher"), (3, "start-fetcher")):
            for i, c in enumerate(self.consumers):
                cmd = f'{G},"consumer":"{_cid(i)}","option":"{option}","epoch":{epoch},"generation":{gen}'
                coord.emit(ts + phase, "command.sent", cmd + ',"partitions":4')
                c.emit(ts + phase, "command.applied", cmd + f',"name":"cmd-{gen}","partitions":4')
                mine = [p for p in range(PARTITIONS) if (self.owner.get(p) if phase == 1 else target[p]) == i]
                for p in mine:
                    self.fetch(ts + phase, tick, i, p, started=phase == 3)
                coord.emit(ts + phase, "command.acked", cmd + ',"latency_ms":1.0')
            if phase == 1:
                coord.emit(ts + 2, "rebalance.barrier", f'{G},"generation":{gen},"epoch":{epoch},"stop_ms":2.0')
        if self.stale_pending:  # consumer 1 applies the deposed epoch's older command after this one (S5)
            late = f'"option":"start-fetcher","epoch":{epoch - 1},"generation":{gen - 1}'
            self.consumers[1].emit(
                ts + 4, "command.applied", f'{G},"consumer":"{_cid(1)}","name":"x",{late},"partitions":0'
            )
            self.stale_pending = False
        coord.emit(ts + 4, "rebalance.completed", f'{G},"generation":{gen},"epoch":{epoch},"attempts":1,'
                   f'"latency_ms":4.0,"stop_ms":2.0,"start_ms":2.0,"members":{CONSUMERS},"partitions":{PARTITIONS},'
                   f'"moved":{moved}')  # fmt: skip
        self.owner = target

    def fetch(self, ts: int, tick: int, i: int, p: int, *, started: bool) -> None:
        c = self.consumers[i]
        where = f'{G},"consumer":"{_cid(i)}","thread":"{_cid(i)}-0","topic":"{TOPIC}","partition":{p}'
        if started:
            c.emit(ts, "fetch.started", where + f',"offset":{tick * BATCH},"generation":{self.generation}')
            return
        if self.violations and self.generation == 3 and p == 0:
            self.late_stop = (i, p, tick + 3)  # stops three ticks after the new owner started: an overlap (S2)
            return
        c.emit(ts, "offsets.committed", f'{G},"consumer":"{_cid(i)}","topic":"{TOPIC}","partition":{p},'
               f'"offset":{tick * BATCH}')  # fmt: skip
        c.emit(
            ts,
            "fetch.stopped",
            where + f',"offset":{tick * BATCH},"reason":"stop-fetcher","generation":{self.generation}',
        )

    def tick(self, ts: int, tick: int, ticks: int) -> None:
        if self.late_stop is not None and self.late_stop[2] == tick:
            i, p, _ = self.late_stop
            late = f'"topic":"{TOPIC}","partition":{p},"offset":0,"reason":"late","generation":3'
            self.consumers[i].emit(ts, "fetch.stopped", f'{G},"consumer":"{_cid(i)}","thread":"{_cid(i)}-0",{late}')
            self.late_stop = None
        for p in range(PARTITIONS):
            first, last = tick * BATCH, tick * BATCH + BATCH - 1
            rng = f'"topic":"{TOPIC}","partition":{p},"first":{first},"last":{last},"count":{BATCH}'
            self.producer.emit(ts, "produce.batch", rng + f',"bytes":{BATCH * 100}')
            i = self.owner[p]
            c = self.consumers[i]
            if self.violations and tick == ticks // 3 and p == 1:
                continue  # a gap: this range is never delivered (S3)
            deliver = f'{G},"consumer":"{_cid(i)}","thread":"{_cid(i)}-0",{rng}'
            c.emit(ts + 5, "records.consumed", deliver)
            if self.violations and tick == ticks // 4 and p == 2:
                c.emit(ts + 6, "records.consumed", deliver)  # delivered twice, cleanly (S4)
            if tick % 10 == p % 10 and tick % REBALANCE_EVERY:
                c.emit(ts + 7, "offsets.committed", f'{G},"consumer":"{_cid(i)}","topic":"{TOPIC}","partition":{p},'
                       f'"offset":{last + 1}')  # fmt: skip

    def close(self, ts: int) -> int:
        for i, c in enumerate(self.consumers):
            for p in [p for p, owner in self.owner.items() if owner == i]:
                c.emit(ts, "fetch.stopped", f'{G},"consumer":"{_cid(i)}","thread":"{_cid(i)}-0","topic":"{TOPIC}",'
                       f'"partition":{p},"offset":0,"reason":"closing","generation":{self.generation}')  # fmt: skip
            c.emit(ts + 1, "consumer.deregistered", f'{G},"consumer":"{_cid(i)}"')
        writers = [self.producer, *self.brokers, *self.consumers]
        for w in writers:
            w.f.close()
        return sum(w.count for w in writers)


def generate(run_dir: Path, events: int, violations: bool) -> int:
    """Write a synthetic run of about ``events`` events; return the exact number written."""
    synth = Synth(run_dir, violations)
    ticks = max(events // (2 * PARTITIONS + PARTITIONS // 10 + 1), 2 * REBALANCE_EVERY + 10)
    for tick in range(ticks):
        ts = 1_000_100 + tick * TICK_MS
        if tick == ticks // 2:
            synth.failover(ts)
        if tick % REBALANCE_EVERY == 0:
            synth.rebalance(ts, tick)
        synth.tick(ts, tick, ticks)
    return synth.close(1_000_100 + ticks * TICK_MS + 100)


# --- the benchmark -------------------------------------------------------------------------------------------------


@dataclass
class Row:
    events: int
    runs: int
    journal_mb: float
    generate_s: float
    spark_s: float
    python_s: float
    spark_events_per_s: float
    python_events_per_s: float
    counts_agree: bool
    injected_found: bool
    #: Spark reading, parsing and grouping the same journals by event type (:func:`floor`), in the same session
    floor_s: float = 0.0
    #: the driver JVM's largest heap: a journal bigger than it cannot be held in memory at once
    jvm_heap_mb: float = 0.0
    #: CPU seconds of the Spark JVM (every thread: driver, executors, JIT, GC) for the floor and for the analysis,
    #: and of the Python pass: figures that a loaded machine inflates far less than the wall-clock times
    floor_jvm_cpu_s: float | None = None
    spark_jvm_cpu_s: float | None = None
    python_cpu_s: float = 0.0
    #: Spark jobs and stages the analysis ran (the status tracker: each job is a plan planned and scheduled)
    spark_jobs: int = 0
    spark_stages: int = 0
    #: the 1-minute load average when this size started
    load_avg: float = 0.0


def floor(spark: Any, runs: list[Path]) -> float:
    """Seconds Spark needs to read the journals of ``runs``, parse every line with the analysis' schema and group
    the events by type: the floor of any analysis of them on this Spark.

    Every parsed field goes into a checksum, so that Spark cannot leave a field unparsed.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415
    from pyspark.sql import types as T  # noqa: PLC0415

    from zkcoord.analysis.schema import EVENT_SCHEMA  # noqa: PLC0415

    started = time.perf_counter()
    text = spark.read.text([str(f) for run in runs for f in sorted((run / "journal").glob("*.jsonl"))])
    e = text.select(F.from_json("value", EVENT_SCHEMA).alias("e")).select("e.*")
    # Spark does not hash maps (subscription, S8's states): their size stands in
    maps = [f.name for f in e.schema.fields if isinstance(f.dataType, T.MapType)]
    flat = [c for c in e.columns if c not in maps]
    e.groupBy("ev").agg(F.count(F.lit(1)), F.sum(F.hash(*flat)), *[F.sum(F.size(m)) for m in maps]).collect()
    return time.perf_counter() - started


def jvm_cpu_s(spark: Any) -> float | None:
    """CPU seconds (user and system) the session's JVM has used so far, from ``/proc`` (None where there is none, or
    when this process did not launch the JVM)."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _jobs_and_stages(spark: Any) -> tuple[set[int], int]:
    """The ids of the jobs Spark knows (not in a job group), and the number of their stages."""
    tracker = spark.sparkContext.statusTracker()
    ids = set(tracker.getJobIdsForGroup())
    stages = sum(len(info.stageIds) for i in ids if (info := tracker.getJobInfo(i)) is not None)
    return ids, stages


def _cpu_delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else round(after - before, 1)


def bench(size: int, base: Path, master: str, spark: Any) -> Row:
    from zkcoord.analysis import run_analysis  # noqa: PLC0415  # PySpark only when measuring

    started = time.perf_counter()
    half = size // 2
    written = generate(base / "clean", half, violations=False) + generate(base / "violations", half, violations=True)
    generate_s = time.perf_counter() - started
    mb = sum(f.stat().st_size for f in base.glob("*/journal/*.jsonl")) / 1e6
    print(f"  {written} events, {mb:.0f} MB generated in {generate_s:.1f} s", file=sys.stderr)
    load_avg = os.getloadavg()[0]
    cpu_0 = jvm_cpu_s(spark)
    floor_s = floor(spark, [base / "clean", base / "violations"])
    cpu_1 = jvm_cpu_s(spark)
    print(
        f"  floor (Spark parsing and grouping by event type): {floor_s:.1f} s, JVM CPU {_cpu_delta(cpu_0, cpu_1)} s",
        file=sys.stderr,
    )
    jobs_before, stages_before = _jobs_and_stages(spark)
    started = time.perf_counter()
    verdict = run_analysis([base / "clean", base / "violations"], base / "out", master, report=False, spark=spark)
    spark_s = time.perf_counter() - started
    spark_cpu = _cpu_delta(cpu_1, jvm_cpu_s(spark))
    jobs_after, stages_after = _jobs_and_stages(spark)
    jobs = len(jobs_after - jobs_before)
    stages = stages_after - stages_before
    print(
        f"  spark: {spark_s:.1f} s ({spark_s / floor_s:.1f}x the floor), JVM CPU {spark_cpu} s, {jobs} jobs, "
        f"{stages} stages",
        file=sys.stderr,
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    py = {name: python_verdict(base / name / "journal") for name in ("clean", "violations")}
    python_s, python_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(f"  python: {python_s:.1f} s, CPU {python_cpu:.1f} s", file=sys.stderr)
    sp = {r.run: {p.key: p.count for p in r.properties} for r in verdict.runs}
    if sp != py:
        print(f"  MISMATCH spark={sp} python={py}", file=sys.stderr)
    return Row(
        events=written,
        runs=2,
        journal_mb=round(mb, 1),
        generate_s=round(generate_s, 2),
        spark_s=round(spark_s, 2),
        python_s=round(python_s, 2),
        spark_events_per_s=round(written / spark_s),
        python_events_per_s=round(written / python_s),
        counts_agree=sp == py,
        injected_found=sp.get("violations") == INJECTED and sp.get("clean") == dict.fromkeys(INJECTED, 0),
        floor_s=round(floor_s, 2),
        jvm_heap_mb=round(spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() / 1e6),
        floor_jvm_cpu_s=_cpu_delta(cpu_0, cpu_1),
        spark_jvm_cpu_s=spark_cpu,
        python_cpu_s=round(python_cpu, 1),
        spark_jobs=jobs,
        spark_stages=stages,
        load_avg=round(load_avg, 2),
    )


def bench_analyze(
    sizes: tuple[int, ...], out: Path, master: str = "local[2]", scratch: Path | None = None
) -> dict[str, Any]:
    """Run the benchmark in this thread (a local SparkSession), print its table, write ``out``, return the document.

    :raises BenchError: PySpark is not installed (the ``spark`` extra), a size below 10 000 events, or the two
        analyses disagreed or missed an injected violation (after the document is written: it shows which).
    """
    if not sizes or any(size < 10_000 for size in sizes):
        raise BenchError(f"--events must be sizes of at least 10000 events, got {', '.join(map(str, sizes))}")
    try:
        from zkcoord.analysis import run_analysis  # noqa: PLC0415  # PySpark only when measuring
        from zkcoord.analysis.session import get_spark  # noqa: PLC0415
    except ImportError as e:
        raise BenchError(f"the analyze benchmark needs PySpark (pip install 'zkcoord[spark]'): {e}") from e

    started = time.perf_counter()
    spark, _ = get_spark(master)
    spark.range(1).collect()
    startup_s = time.perf_counter() - started
    # A first, small analysis warms the JVM up (class loading, code generation, JIT), as any second run would be.
    warm = Path(tempfile.mkdtemp(prefix="zkcoord-analyze-warmup-", dir=scratch))
    started = time.perf_counter()
    generate(warm / "run", 30_000, violations=True)
    run_analysis([warm / "run"], warm / "out", master, report=False, spark=spark)
    floor(spark, [warm / "run"])
    warmup_s = time.perf_counter() - started
    shutil.rmtree(warm, ignore_errors=True)
    rows = []
    for size in sizes:
        print(f"{size} events:", file=sys.stderr)
        work = Path(tempfile.mkdtemp(prefix="zkcoord-analyze-bench-", dir=scratch))
        try:
            rows.append(bench(size, work, master, spark))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    version = spark.version
    spark.stop()
    print(
        f"Spark {version} {master}, {os.cpu_count()} cores; not counted: JVM start-up {startup_s:.1f} s, "
        f"warm-up analysis {warmup_s:.1f} s"
    )
    print(analyze_table([asdict(r) for r in rows]))
    meta = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "master": master,
        "spark": version,
        "jvm_startup_s": round(startup_s, 2),
        "warmup_s": round(warmup_s, 2),
        "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
    }
    document = envelope("analyze", {**meta, "rows": [asdict(r) for r in rows]})
    write_document(out, document)
    print(f"\nwrote {out}")
    if not all(r.counts_agree and r.injected_found for r in rows):
        raise BenchError(f"Spark and the Python pass disagree, or an injected violation was missed: see {out}")
    return document
