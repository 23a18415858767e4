"""The zkcoord consumer client: registers in its group, obeys the coordinator's command channel, fetches.

The package holds the client the coordinator commands (docs/architecture.md).  It builds on the shared pieces in
:mod:`zkcoord` (the ZooKeeper boundary, the znode codecs and the partition log reader).
"""
