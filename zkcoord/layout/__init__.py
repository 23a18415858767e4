"""The ZooKeeper layout as a contract (``docs/zookeeper-layout.md``): the paths of both trees (this design's
:mod:`~zkcoord.layout.paths` and Kafka 0.8's :mod:`~zkcoord.layout.legacy_paths`), the names they hold, and the codec
of every znode (:mod:`~zkcoord.layout.znodes`).  Pure: no I/O.
"""
