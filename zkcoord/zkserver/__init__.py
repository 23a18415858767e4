"""The embedded Apache ZooKeeper: one server (:mod:`zkcoord.zkserver.server`), its settings and the ``zoo.cfg`` made
of them (:mod:`zkcoord.zkserver.config`), an ensemble of servers (:mod:`zkcoord.zkserver.ensemble`), and what all
need to find Java, pick ports and ask a server how it is (:mod:`zkcoord.zkserver.util`).  Runs the Debian package's
jars in a child JVM; no kazoo here (four-letter words go over a plain socket).  Imports only :mod:`zkcoord.errors`.
"""

from zkcoord.zkserver.config import QuorumPeer, ZkServerConfig
from zkcoord.zkserver.server import ZkServer, close_all
from zkcoord.zkserver.util import (
    LOOPBACK,
    POLL_INTERVAL_S,
    check_port_free,
    find_java,
    find_zookeeper_classpath,
    four_letter_word,
    free_port,
    free_ports,
    is_stopped,
    is_zookeeper_process,
    log_tail,
    mntr,
    server_mode,
    srvr,
    terminate_process,
    wait_for_exit,
)

__all__ = [
    "LOOPBACK",
    "POLL_INTERVAL_S",
    "QuorumPeer",
    "ZkServer",
    "ZkServerConfig",
    "check_port_free",
    "close_all",
    "find_java",
    "find_zookeeper_classpath",
    "four_letter_word",
    "free_port",
    "free_ports",
    "is_stopped",
    "is_zookeeper_process",
    "log_tail",
    "mntr",
    "server_mode",
    "srvr",
    "terminate_process",
    "wait_for_exit",
]
