#!/usr/bin/env bash
# Install the system packages zkcoord needs, if missing: a Java runtime, Apache ZooKeeper (Debian's `zookeeper`
# package), Python's venv module, a headless browser (Debian's `chromium`: a test loads the analysis report in it) and,
# as root, iproute2 and iptables for the multi-host scenario's hosts.  The Compose deployment's engine is installed by
# scripts/compose.sh (`make compose-up`), not here.
# Idempotent: does nothing (and no apt-get update) when all are present.
set -euo pipefail

need=()
command -v java >/dev/null 2>&1 || [ -x "${JAVA_HOME:-/nonexistent}/bin/java" ] || need+=(default-jre-headless)
if [ -z "${ZOOKEEPER_HOME:-}" ] && [ ! -f /usr/share/java/zookeeper.jar ]; then need+=(zookeeper); fi
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# The multi-host scenario's hosts (tests/integration/test_multihost.py): network namespaces, veths, iptables DROP.
if [ "$(id -u)" -eq 0 ]; then
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
fi

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing Debian packages: ${need[*]}"
sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    echo "setup: need root (or sudo) to install: ${need[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "setup: installed ${need[*]}"
