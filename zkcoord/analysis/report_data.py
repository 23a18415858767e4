"""The rows the report's figures need, per run, as Spark hands them over (:meth:`ReportData.collect`): small and
aggregated (at most :data:`MAX_ROWS` of each kind per run); everything after is plain Python."""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

#: Rows of each kind collected per run for the plots.
MAX_ROWS = 20_000


@dataclass
class ReportData:
    """The rows the plots need, per run."""

    first_ts: dict[str, int] = field(default_factory=dict)
    intervals: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    overlaps: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    rebalances: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    faults: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    progress: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    #: the commands of the violations' zooms (``commands`` table: when applied, stale or not)
    commands: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def collect(cls, frames: dict[str, DataFrame], first_ts: dict[str, int]) -> ReportData:
        """Collect the plot rows in one Spark job.

        ``frames`` maps ``intervals``, ``overlaps``, ``rebalances``, ``faults``, ``progress`` and, optionally,
        ``commands`` to their tables.
        """
        data = cls(first_ts=dict(first_ts))
        intervals = frames["intervals"]
        wanted = ["run", "group", "topic", "partition", "consumer", "start_ts", "end_ts"]
        limited = {
            "intervals": intervals.select(*wanted, *(["generation"] if "generation" in intervals.columns else [])),
            "overlaps": frames["overlaps"],
            "rebalances": frames["rebalances"].select("run", "latency_ms", "stw_ms", "outcome"),
            "faults": frames["faults"],
            "progress": frames["progress"],
        }
        if "commands" in frames:
            limited["commands"] = (
                frames["commands"]
                .where(F.col("applied_ts").isNotNull())
                .select("run", "group", "consumer", "name", "option", "epoch", "generation", "applied_ts", "stale")
            )
        parts = []
        for kind, df in limited.items():
            rank = F.row_number().over(Window.partitionBy("run").orderBy(*df.columns))
            parts.append(
                df.withColumn("_n", rank)
                .where(F.col("_n") <= MAX_ROWS)
                .select(F.lit(kind).alias("kind"), "run", F.to_json(F.struct(*df.columns)).alias("row"))
            )
        # to_json leaves a null column out of its object: every row gets every column of its table back, None
        # where null (a consumer-protocol rebalance finished by a successor coordinator has no latency, say).
        columns = {kind: dict.fromkeys(df.columns) for kind, df in limited.items()}
        for row in functools.reduce(DataFrame.unionByName, parts).collect():
            target: dict[str, list[dict[str, Any]]] = getattr(data, row["kind"])
            target[row["run"]].append(columns[row["kind"]] | json.loads(row["row"]))
        for rows in data.progress.values():
            rows.sort(key=lambda r: r["bucket"])
        return data
