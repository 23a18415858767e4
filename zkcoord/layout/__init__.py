"""The ZooKeeper layout as a contract (``docs/zookeeper-layout.md``): the paths of both trees (this design's
:mod:`~zkcoord.layout.paths` and Kafka 0.8's :mod:`~zkcoord.layout.legacy_paths`), the names they hold (and
:mod:`~zkcoord.layout.topic_regex`, the dialect of the regexes a subscription holds), and the codec
of every znode (:mod:`~zkcoord.layout.znodes`, the shared format, and the records in
:mod:`~zkcoord.layout.registrations`, :mod:`~zkcoord.layout.commands`, :mod:`~zkcoord.layout.group_state`,
:mod:`~zkcoord.layout.kip848`, with :mod:`~zkcoord.layout.partition_set`, the set of partitions they hold).
Pure: no I/O.  Imports no other layer but :mod:`zkcoord.errors`.
"""
