#!/usr/bin/env bash
# Validates docker-compose.yml and the Dockerfile offline (no Docker engine needed):
#   docker-compose config -q   (Debian's docker-compose 1.29, installed with apt if missing),
# with the repo's .env if there is one, with only POSTGRES_PASSWORD set (every other
# default), and with the scale profile (PgBouncer, replica); `docker compose` (v2) too
# when it is available. Compose 1.29 predates `depends_on: {required: false}` (Compose
# 2.20), which the api needs for the scale profile's services: it reads a copy without
# those lines, and the checks below look at them in the file itself. Then what the file
# promises (docs/operations.md), read from the resolved configuration:
#   - POSTGRES_PASSWORD has no default: without it, the file does not resolve, and says why;
#   - every image is pinned to an exact version (the api's own is built here);
#   - every long-running service has a healthcheck;
#   - the scale profile alone routes the api through PgBouncer and the replica, and the api
#     waits for both to be healthy;
#   - HOST=0.0.0.0 for the api, in Compose and in the image; the image's Node is pinned too;
#   - Compose's api and the image run the server as `npm run start:prod` does (its node flags);
#   - every variable passed to the service's own containers (api, migrate) is a setting that
#     `npm start -- --help` lists, or one their command reads itself: the service ignores a name it
#     does not know without a word (src/config.ts checks the values of the names it knows only).
set -euo pipefail

cd "$(dirname "$0")/.."
COMPOSE_FILE_PATH=docker-compose.yml

fail() { echo "check-compose: FAILED: $*" >&2; exit 1; }

[ -f "$COMPOSE_FILE_PATH" ] || fail "$COMPOSE_FILE_PATH not found in $(pwd)"
for f in deploy/nginx.conf deploy/edge-cache.conf deploy/api-proxy.conf; do
  [ -f "$f" ] || fail "$f (bind-mounted by service lb) is missing"
done

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

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
password_env="$work/password.env"
echo 'POSTGRES_PASSWORD=check0compose0password' >"$password_env"
empty_env="$work/empty.env"
: >"$empty_env"
# The same file without `required: false` (the only key Compose 1.29 does not know), beside the original so paths resolve alike.
v1_file="$(pwd)/.check-compose-v1.yml"
trap 'rm -rf "$work" "$v1_file"' EXIT
grep -vE '^\s+required: false\s*$' "$COMPOSE_FILE_PATH" >"$v1_file"

run_check() { # label, file, then the compose command and its arguments
  local label="$1" file="$2"; shift 2
  local out
  if ! out="$("$@" -f "$file" config -q 2>&1)"; then
    echo "$out" >&2
    fail "$label: '$* -f $file config -q' reported the errors above"
  fi
  # Surface warnings (e.g. unset variables) without failing.
  [ -z "$out" ] || echo "$out" >&2
  echo "check-compose: ok: $label"
}

if [ -f .env ]; then
  run_check "docker-compose with ./.env" "$v1_file" docker-compose
fi
run_check "docker-compose with POSTGRES_PASSWORD only (every other default)" "$v1_file" docker-compose --env-file "$password_env"
run_check "docker-compose --profile scale (PgBouncer, replica)" "$v1_file" docker-compose --profile scale --env-file "$password_env"

if docker compose version >/dev/null 2>&1; then
  if [ -f .env ]; then
    run_check "docker compose (v2) with ./.env" "$COMPOSE_FILE_PATH" docker compose
  fi
  run_check "docker compose (v2) with POSTGRES_PASSWORD only" "$COMPOSE_FILE_PATH" docker compose --env-file "$password_env"
  run_check "docker compose (v2) --profile scale" "$COMPOSE_FILE_PATH" docker compose --profile scale --env-file "$password_env"
fi

# No password, no stack: the file does not resolve, and the message names the variable.
if out="$(env -u POSTGRES_PASSWORD docker-compose --env-file "$empty_env" -f "$v1_file" config -q 2>&1)"; then
  fail "the stack resolves without POSTGRES_PASSWORD (a default password is back?)"
fi
grep -q 'POSTGRES_PASSWORD is required' <<<"$out" || { echo "$out" >&2; fail "without POSTGRES_PASSWORD the error does not say what to set"; }
echo "check-compose: ok: POSTGRES_PASSWORD is required, and the error says so"

# The settings the service knows, as its help lists them: "  NAME (default): what it does".
npm start --silent -- --help >"$work/help.txt" 2>&1 || { cat "$work/help.txt" >&2; fail "npm start -- --help failed"; }
sed -nE 's/^  ([A-Z][A-Z0-9_]*) \(.*$/\1/p' "$work/help.txt" >"$work/settings.txt"
[ -s "$work/settings.txt" ] || { cat "$work/help.txt" >&2; fail "npm start -- --help lists no settings"; }

# What the resolved configuration (scale profile: every service) promises. python3-yaml
# comes with Debian's docker-compose.
env -u POSTGRES_PASSWORD docker-compose --profile scale --env-file "$password_env" -f "$v1_file" config >"$work/resolved.yml"
python3 - "$work/resolved.yml" "$COMPOSE_FILE_PATH" Dockerfile "$work/settings.txt" <<'PY' || fail "see the problems above"
import json, re, sys, yaml
from urllib.parse import urlsplit

resolved = yaml.safe_load(open(sys.argv[1]))["services"]
original = yaml.safe_load(open(sys.argv[2]))["services"]
dockerfile = open(sys.argv[3]).read()
settings = set(open(sys.argv[4]).read().split())
problems = []
# major.minor.patch; PostgreSQL (10 and later) numbers its releases major.minor.
EXACT = re.compile(r"^[^:]+:v?\d+\.\d+\.\d+(-[A-Za-z0-9.-]+)?(@sha256:[0-9a-f]{64})?$|^postgres:\d+\.\d+(-[a-z0-9]+)?$")

for name, service in resolved.items():
    if "build" not in service and not EXACT.search(service.get("image", "")):
        problems.append(f"{name}: image {service.get('image')!r} is not pinned to an exact version")
    one_shot = service.get("restart") == "no"
    check = service.get("healthcheck") or {}
    if not one_shot and (not check.get("test") or check.get("disable")):
        problems.append(f"{name}: a long-running service without a healthcheck")

for use in re.findall(r"\$\{POSTGRES_PASSWORD[^}]*\}", open(sys.argv[2]).read()):
    if not use.startswith("${POSTGRES_PASSWORD:?"):
        problems.append(f"{use}: POSTGRES_PASSWORD used with a default or without the required check")

for name in ("pgbouncer", "db-replica"):
    if original.get(name, {}).get("profiles") != ["scale"]:
        problems.append(f"{name}: not in the scale profile")

api, api_file = resolved["api"], original["api"]
env = api.get("environment") or {}
if env.get("HOST") != "0.0.0.0":
    problems.append("api: HOST is not 0.0.0.0")
for dependency in ("pgbouncer", "db-replica"):
    wanted = {"condition": "service_healthy", "required": False}
    if (api_file.get("depends_on") or {}).get(dependency) != wanted:
        problems.append(f"api: does not wait for {dependency} to be healthy when the scale profile is up (required: false)")
routes = {"pgbouncer": ("POOLED_DATABASE_URL", "DATABASE_URL"), "db-replica": ("REPLICA_DATABASE_URL", "DATABASE_READ_URL")}
command = " ".join(api.get("command") or [])
for host, (source, target) in routes.items():
    if urlsplit(str(env.get(source, ""))).hostname != host:
        problems.append(f"api: {source} does not point at {host}")
    if not re.search(rf"getent hosts {host} >/dev/null; then export {target}=\"\$\$?{source}\"", command):
        problems.append(f"api: with {host} up, {target} is not taken from {source}")
start_prod = json.load(open("package.json"))["scripts"]["start:prod"].split()
if start_prod[:2] != ["exec", "node"] or start_prod[-1] != "dist/src/server.js":
    problems.append("package.json: start:prod is not `exec node [flags] dist/src/server.js`")
if not command.rstrip().endswith(" ".join(start_prod)):
    problems.append(f"api: the command does not end with start:prod's `{' '.join(start_prod)}`")
cmd = [json.loads(line[4:]) for line in dockerfile.splitlines() if line.startswith("CMD [")]
if not cmd or cmd[-1] != start_prod[1:]:
    problems.append(f"Dockerfile: CMD is not start:prod's {json.dumps(start_prod[1:])}")

# Read by Node.js and libraries, not a setting of the service (the image sets it too).
NOT_SETTINGS = {"NODE_ENV"}
for name, service in resolved.items():
    # The service's own image (api, migrate); the others are configured by their images' variables.
    if "build" not in service:
        continue
    own_command = " ".join(service.get("command") or [])
    for variable in sorted(service.get("environment") or {}):
        if variable in settings or variable in NOT_SETTINGS:
            continue
        # POOLED_DATABASE_URL and the like: what the container's command reads to set a setting.
        if re.search(rf"\$\$?\{{?{variable}\b", own_command):
            continue
        problems.append(f"{name}: passes {variable}, which is no setting of the service (npm start -- --help)")

if not re.search(r"^ARG NODE_IMAGE=node:\d+\.\d+\.\d+-[a-z]+-slim$", dockerfile, re.M):
    problems.append("Dockerfile: NODE_IMAGE is not pinned to an exact Node version")
if not re.search(r"^\s+HOST=0\.0\.0\.0", dockerfile, re.M):
    problems.append("Dockerfile: HOST=0.0.0.0 is not set")

for problem in problems:
    print(f"check-compose: {problem}", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
echo "check-compose: ok: exact images, healthchecks, the scale profile's routing, HOST, only settings passed to the service"

echo "check-compose: $COMPOSE_FILE_PATH is valid"
