#!/usr/bin/env bash
# Validates docker-compose.yml offline (no Docker engine needed):
#   docker-compose config -q   (Debian's docker-compose, installed with apt if missing)
# once with the repo's .env if there is one, once with an empty env file
# (all defaults), once more with the scale profile (PgBouncer, replica). Also uses `docker compose` (v2 plugin) when it is available.
set -euo pipefail

cd "$(dirname "$0")/.."
COMPOSE_FILE_PATH=docker-compose.yml

fail() { echo "check-compose: FAILED: $*" >&2; exit 1; }

[ -f "$COMPOSE_FILE_PATH" ] || fail "$COMPOSE_FILE_PATH not found in $(pwd)"
[ -f deploy/nginx.conf ] || fail "deploy/nginx.conf (bind-mounted by service lb) is missing"

if ! command -v docker-compose >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || fail "docker-compose is not installed and we are not root (no sudo) to apt-get install it"
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  # --no-install-recommends: skip docker.io (the engine), which is not needed to validate.
  install_cmd=($SUDO apt-get install -y -qq --no-install-recommends docker-compose)
  echo "check-compose: installing docker-compose with apt-get..."
  if ! "${install_cmd[@]}" >/tmp/check-compose-apt.log 2>&1; then
    echo "check-compose: install failed, running apt-get update and retrying..."
    $SUDO apt-get update -qq >>/tmp/check-compose-apt.log 2>&1 \
      || { cat /tmp/check-compose-apt.log >&2; fail "apt-get update failed"; }
    "${install_cmd[@]}" >>/tmp/check-compose-apt.log 2>&1 \
      || { cat /tmp/check-compose-apt.log >&2; fail "could not install docker-compose with apt-get"; }
  fi
  command -v docker-compose >/dev/null 2>&1 || fail "docker-compose still not on PATH after install"
fi

empty_env="$(mktemp)"
trap 'rm -f "$empty_env"' EXIT

run_check() { # label, then the compose command and its arguments
  local label="$1"; shift
  local out
  if ! out="$("$@" -f "$COMPOSE_FILE_PATH" config -q 2>&1)"; then
    echo "$out" >&2
    fail "$label: '$* -f $COMPOSE_FILE_PATH config -q' reported the errors above"
  fi
  # Surface warnings (e.g. unset variables) without failing.
  [ -z "$out" ] || echo "$out" >&2
  echo "check-compose: ok: $label"
}

if [ -f .env ]; then
  run_check "docker-compose with ./.env" docker-compose
fi
run_check "docker-compose with defaults (empty env file)" docker-compose --env-file "$empty_env"
run_check "docker-compose --profile scale (PgBouncer, replica)" docker-compose --profile scale --env-file "$empty_env"

if docker compose version >/dev/null 2>&1; then
  if [ -f .env ]; then
    run_check "docker compose (v2) with ./.env" docker compose
  fi
  run_check "docker compose (v2) with defaults" docker compose --env-file "$empty_env"
  run_check "docker compose (v2) --profile scale" docker compose --profile scale --env-file "$empty_env"
fi

echo "check-compose: $COMPOSE_FILE_PATH is valid"
