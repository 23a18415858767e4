"""Benchmarks run from the command line (``zkcoord bench ...``); see ``docs/benchmarks.md``.

* :mod:`zkcoord.bench.rebalance`: ``zkcoord bench rebalance``, the same membership changes under each consumer
  protocol (``coordinator``; ``incremental``, the coordinator with every member asking for incremental rebalances;
  and the legacy ``zk-client``), with every consumer a real ZooKeeper session, measured from the run's journals and
  ZooKeeper's own counters against a ZooKeeper floor taken in the same run.
* :mod:`zkcoord.bench.worker`: the worker process (``python -m zkcoord.bench.worker``) that hosts many consumers of
  one protocol and adds or removes them on the driver's command.
* :mod:`zkcoord.bench.config`: what a run runs (:class:`~zkcoord.bench.config.BenchConfig`).
* :mod:`zkcoord.bench.measures`: the results of a run and the arithmetic that makes them.
* :mod:`zkcoord.bench.timeline`: the journal, read incrementally, as per-group ownership state; and the pure
  measurements of one membership change (latency, stop-the-world, gaps, conflicts).
* :mod:`zkcoord.bench.zkfloor`: the ZooKeeper floor (a write's round trip, a write seen through a watch) and the
  server's request counters (``mntr``).
* :mod:`zkcoord.bench.report`: the table and the JSON document.
"""
