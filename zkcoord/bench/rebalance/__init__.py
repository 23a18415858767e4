"""``zkcoord bench rebalance``: the same membership changes under each consumer protocol, against the ZooKeeper floor.

* :mod:`~zkcoord.bench.rebalance.run`: the driver (:class:`~zkcoord.bench.rebalance.run.RebalanceBench`), which
  returns the JSON document;
* :mod:`~zkcoord.bench.rebalance.worker`: the worker process (``python -m zkcoord.bench.rebalance.worker``) that
  hosts many consumers of one protocol and adds or removes them on the driver's command;
* :mod:`~zkcoord.bench.rebalance.environment`: the run's directories, ZooKeeper, broker, topics and workers;
* :mod:`~zkcoord.bench.rebalance.waits`: the journals read into per-group trackers, and the waits on them;
* :mod:`~zkcoord.bench.rebalance.cluster`: the broker and worker processes of a run, and their CPU time;
* :mod:`~zkcoord.bench.rebalance.config`: what a run runs (:class:`~zkcoord.bench.rebalance.config.BenchConfig`);
* :mod:`~zkcoord.bench.rebalance.measures`: the results of a run and the arithmetic that makes them;
* :mod:`~zkcoord.bench.rebalance.timeline`: the journal, read incrementally, as per-group ownership state, and the
  pure measurements of one membership change (latency, stop-the-world, gaps, conflicts);
* :mod:`~zkcoord.bench.rebalance.zkfloor`: the ZooKeeper floor and the server's request counters (``mntr``);
* :mod:`~zkcoord.bench.rebalance.report`: the table.
"""
