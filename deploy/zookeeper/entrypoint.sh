#!/bin/sh
# Write /conf/zoo.cfg and /data/myid from the official image's variables, then run the server in the foreground
# (PID 1's signals reach the JVM: `docker stop` is a clean stop, `docker kill` a crash).
set -eu
: "${ZOO_MY_ID:=1}"
{
  echo "dataDir=/data"
  echo "dataLogDir=/datalog"
  echo "tickTime=${ZOO_TICK_TIME:-2000}"
  echo "initLimit=${ZOO_INIT_LIMIT:-5}"
  echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
  echo "clientPort=2181"
  echo "maxClientCnxns=0"
  echo "admin.enableServer=false"
  echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
  # Listen on every address of the container, whatever its own name resolves to (as the official image does).
  echo "quorumListenOnAllIPs=true"
  # A peer's election port that drops packets costs cnxTimeout per attempt (5 s by default).
  echo "cnxTimeout=${ZOO_CNX_TIMEOUT:-1000}"
  for server in ${ZOO_SERVERS:-}; do echo "$server"; done
} > /conf/zoo.cfg
echo "$ZOO_MY_ID" > /data/myid
exec java -Xmx${ZOO_HEAP_MB:-256}m -XX:+UseSerialGC -XX:-UsePerfData \
  -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain /conf/zoo.cfg
