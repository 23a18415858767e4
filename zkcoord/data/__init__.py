"""The data plane: the partition log on disk (:mod:`~zkcoord.data.partlog`), the producer that appends to it, and
the topics' metadata in ZooKeeper.
"""
