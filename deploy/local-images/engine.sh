#!/usr/bin/env bash
# Makes a Docker engine answer on this machine and `docker compose` be Compose v2:
#   - Debian's docker.io (the engine) with apt-get, if dockerd is missing;
#   - dockerd started in the background (log: /var/log/dockerd-stack.log) if none answers;
#   - Compose v2 (and buildx) from Debian 13's packages: `apt-get download` from a trixie
#     sources list kept under the cache folder, unpacked with `dpkg -x`, linked as CLI plugins.
# Needs root. Prints what it did; exits non-zero if the engine cannot be had. apt waits up to
# 5 min for the dpkg lock (another apt on the machine is not a failure).
# Source it (functions) or run it.
set -euo pipefail
STACK_CACHE=${STACK_CACHE:-/var/cache/posts-api-stack}

log() { echo "engine: $*"; }

ensure_engine() {
  if docker info >/dev/null 2>&1; then log "a Docker engine answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"; return 0; fi
  [ "$(id -u)" -eq 0 ] || { log "no engine answers and we are not root"; return 1; }
  if ! command -v dockerd >/dev/null; then
    log "installing Debian's docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends docker.io iptables >/tmp/stack-apt.log 2>&1 \
      || { apt-get -o DPkg::Lock::Timeout=300 update -qq >>/tmp/stack-apt.log 2>&1 && apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends docker.io iptables >>/tmp/stack-apt.log 2>&1; } \
      || { tail -5 /tmp/stack-apt.log; log "could not install docker.io"; return 1; }
  fi
  # A dockerd killed with its session leaves its pid file, and a new one refuses to start.
  local pid
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then rm -f /var/run/docker.pid; fi
  log "starting dockerd"
  nohup dockerd --host=unix:///var/run/docker.sock >>/var/log/dockerd-stack.log 2>&1 &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && { log "dockerd answers"; return 0; }; sleep 1; done
  tail -5 /var/log/dockerd-stack.log; log "dockerd did not answer within 60 s"; return 1
}

ensure_compose() {
  local plugins=/usr/local/lib/docker/cli-plugins
  if docker compose version 2>/dev/null | grep -qE 'version v?2\.'; then return 0; fi
  local root="$STACK_CACHE/compose-root" apt="$STACK_CACHE/apt"
  if [ ! -x "$root/usr/libexec/docker/cli-plugins/docker-compose" ]; then
    log "downloading Compose v2 and buildx from Debian 13 (trixie)"
    mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$STACK_CACHE/debs"
    echo 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main' >"$apt/sources.list"
    local o=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt" -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root)
    apt-get "${o[@]}" update -qq >/dev/null
    (cd "$STACK_CACHE/debs" && apt-get "${o[@]}" download docker-compose docker-buildx >/dev/null)
    for deb in "$STACK_CACHE"/debs/docker-compose_*.deb "$STACK_CACHE"/debs/docker-buildx_*.deb; do dpkg -x "$deb" "$root"; done
  fi
  mkdir -p "$plugins"
  ln -sf "$root/usr/libexec/docker/cli-plugins/docker-compose" "$root/usr/libexec/docker/cli-plugins/docker-buildx" "$plugins/"
  docker compose version
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then ensure_engine && ensure_compose; fi
