"""Every benchmark, one way to run it: ``zkcoord bench <name> [--size small|medium|large]`` (docs/benchmarks.md).

* :mod:`zkcoord.bench.partlog`: ``zkcoord bench partlog``, partition-log appends and reads against plain file I/O;
* :mod:`zkcoord.bench.consumer`: ``zkcoord bench consumer``, one consumer's records/s against the raw log read, and
  rebalance latency with every consumer in one process;
* :mod:`zkcoord.bench.rebalance`: ``zkcoord bench rebalance``, rebalance latency of each consumer protocol with
  every consumer a real ZooKeeper session in worker processes, against a ZooKeeper floor taken in the same run;
* :mod:`zkcoord.bench.analyze`: ``zkcoord bench analyze``, the Spark analysis against one Python process
  (:mod:`zkcoord.bench.analyze_python`) on synthetic journals;
* :mod:`zkcoord.bench.scale`: ``zkcoord bench scale``, the coordinator with many groups and sessions, and its
  failovers at that size;
* :mod:`zkcoord.bench.common`: the results directory, the sizes, the JSON envelope and :class:`BenchError`.

Every benchmark writes one JSON document (``"schema": 1, "benchmark": NAME``) that ``zkcoord analyze --bench FILE``
tabulates and plots.
"""
