"""Runs across hosts: network namespaces made by the run (:mod:`.cluster`) or the Compose deployment's containers
(:mod:`.compose`), with partitions that drop packets between them (:mod:`.net`) and the faults of :mod:`.faults`."""
