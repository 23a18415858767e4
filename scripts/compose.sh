#!/usr/bin/env bash
# The Compose deployment on this machine, with nothing pulled from an image registry.
#
#   scripts/compose.sh engine   install Debian's docker.io and docker-compose if missing; start dockerd if not running
#   scripts/compose.sh images   build the three local images, each only when its inputs changed (label inputs=<hash>)
#   scripts/compose.sh up       engine + images, then start compose.yaml's services with deploy/compose.local.yaml
#   scripts/compose.sh down     stop and remove every container, the network and the volumes
#   scripts/compose.sh ps|logs  docker-compose ps / logs of the project
#
# The images: zkcoord-base:bookworm (debootstrap --variant=minbase from Debian's mirror, then `docker import`),
# zkcoord-zookeeper:local (Debian's `zookeeper` on it: deploy/zookeeper/) and zkcoord:local (this repository's
# Dockerfile on it).  Needs root (or sudo) for apt-get, dockerd and debootstrap.  See docs/deployment.md.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PROJECT=${COMPOSE_PROJECT_NAME:-zkcoord}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
STATE=${ZKCOORD_COMPOSE_STATE:-/var/lib/zkcoord-compose}
# Every service but prometheus, whose official image cannot be built from Debian's packages here.
SERVICES=(zk1 zk2 zk3 broker1 broker2 broker3 topic-init producer consumer-billing consumer-audit)
export DOCKER_BUILDKIT=0  # the classic builder: Debian's engine has no buildx plugin

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    echo "compose: need root (or sudo) for the engine" >&2; exit 1
  fi
fi
say() { echo "compose: $*"; }

engine() {
  local need=()
  command -v docker >/dev/null 2>&1 || need+=(docker.io)
  command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  if [ ${#need[@]} -gt 0 ]; then
    say "installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  if "${sudo[@]}" docker info >/dev/null 2>&1; then return; fi
  # No init system runs services here (a container, CI): start the daemon ourselves, in the background.
  "${sudo[@]}" mkdir -p "$STATE"
  say "starting dockerd (log: $STATE/dockerd.log)"
  "${sudo[@]}" sh -c "nohup dockerd >'$STATE/dockerd.log' 2>&1 &"
  for _ in $(seq 1 60); do
    if "${sudo[@]}" docker info >/dev/null 2>&1; then return; fi
    sleep 0.5
  done
  echo "compose: dockerd did not start within 30 s; see $STATE/dockerd.log" >&2
  tail -n 20 "$STATE/dockerd.log" >&2 || true
  exit 1
}

# The hash of an image's inputs: the files given, plus any extra words (a base image's id, a mirror).
inputs_hash() { { cat "$@" 2>/dev/null; echo "${EXTRA:-}"; } | sha256sum | cut -c1-16; }
label_of() { "${sudo[@]}" docker image inspect -f '{{index .Config.Labels "org.zkcoord.inputs"}}' "$1" 2>/dev/null || true; }
image_id() { "${sudo[@]}" docker image inspect -f '{{.Id}}' "$1"; }

build_base() {
  local want
  want=$(EXTRA="bookworm minbase $MIRROR" inputs_hash /dev/null)
  if [ "$(label_of zkcoord-base:bookworm)" = "$want" ]; then say "zkcoord-base:bookworm is up to date"; return; fi
  local dir
  dir=$(mktemp -d /var/tmp/zkcoord-rootfs.XXXXXX)
  say "debootstrap --variant=minbase bookworm (a few minutes)"
  "${sudo[@]}" debootstrap --variant=minbase bookworm "$dir" "$MIRROR" >"$dir.log" 2>&1 \
    || { tail -n 20 "$dir.log" >&2; exit 1; }
  # No recommends and no caches in the images built on it.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    | "${sudo[@]}" tee "$dir/etc/apt/apt.conf.d/90zkcoord" >/dev/null
  "${sudo[@]}" rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
  "${sudo[@]}" tar -C "$dir" -c . | "${sudo[@]}" docker import \
    -c "LABEL org.zkcoord.inputs=$want" -c 'CMD ["/bin/bash"]' - zkcoord-base:bookworm >/dev/null
  "${sudo[@]}" rm -rf "$dir" "$dir.log"
  say "built zkcoord-base:bookworm"
}

build_image() {  # tag, dockerfile, context, input files..., then optional -- docker build options
  local tag=$1 dockerfile=$2 context=$3; shift 3
  local files=() opts=()
  while [ $# -gt 0 ] && [ "$1" != "--build-arg" ]; do files+=("$1"); shift; done
  opts=("$@")
  local want
  want=$(EXTRA="$(image_id zkcoord-base:bookworm)" inputs_hash "$dockerfile" "${files[@]}")
  if [ "$(label_of "$tag")" = "$want" ]; then say "$tag is up to date"; return; fi
  say "building $tag"
  "${sudo[@]}" docker build -q -f "$dockerfile" --build-arg BASE=zkcoord-base:bookworm "${opts[@]}" \
    --label "org.zkcoord.inputs=$want" -t "$tag" "$context" >/dev/null
  say "built $tag"
}

images() {
  build_base
  build_image zkcoord-zookeeper:local deploy/zookeeper/Dockerfile deploy/zookeeper deploy/zookeeper/entrypoint.sh
  local sources
  mapfile -t sources < <(git ls-files -co --exclude-standard setup.cfg pyproject.toml README.md 'zkcoord/**' | sort)
  local want
  want=$(EXTRA="$(image_id zkcoord-base:bookworm)" inputs_hash Dockerfile "${sources[@]}")
  if [ "$(label_of zkcoord:local)" = "$want" ]; then say "zkcoord:local is up to date"; return; fi
  # The wheels of zkcoord and its dependencies, fetched here with the host's own PyPI access (its proxy, its CA
  # certificates: a container's pip may trust neither); the image installs from them alone.
  say "building the wheels (.wheels/)"
  rm -rf .wheels
  local pip=(python3 -m pip)
  if ! python3 -m pip --version >/dev/null 2>&1; then  # Debian's python3 has no pip unless python3-pip is in
    [ -x "$STATE/pip/bin/pip" ] || { "${sudo[@]}" mkdir -p "$STATE"; "${sudo[@]}" python3 -m venv "$STATE/pip"; }
    pip=("$STATE/pip/bin/pip")
  fi
  "${pip[@]}" wheel -q --disable-pip-version-check --wheel-dir .wheels . >/dev/null
  build_image zkcoord:local Dockerfile . "${sources[@]}" \
    --build-arg "PIP_OPTIONS=--no-index --find-links /src/.wheels zkcoord"
}

dc() { "${sudo[@]}" docker-compose -p "$PROJECT" -f compose.yaml -f deploy/compose.local.yaml "$@"; }

case "${1:-}" in
  engine) engine ;;
  images) engine; images ;;
  up)
    engine; images
    dc up -d --no-build "${SERVICES[@]}"
    say "up: $(dc ps --services --filter status=running | wc -l) services running; 'scripts/compose.sh down' removes them"
    ;;
  down) engine; dc down -v --remove-orphans ;;
  ps) dc ps ;;
  logs) shift; dc logs "$@" ;;
  *) echo "usage: scripts/compose.sh engine|images|up|down|ps|logs [service]" >&2; exit 2 ;;
esac
