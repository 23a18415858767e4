"""zkcoord: a ZooKeeper-based consumer-group coordinator (the 2012 Kafka design), its consumer and a testbed."""

__version__ = "0.1.0"
