#!/usr/bin/env bash
# A throwaway scale-out topology on this machine, for the tests and for
# developers: a PostgreSQL primary (wal_level=replica), streaming replicas
# made with `pg_basebackup -R`, and a PgBouncer in transaction pooling mode in
# front of the primary, with the settings docs/operations.md asks for and no
# more: pool_mode = transaction, ignore_startup_parameters = options, the
# auth setup, and the timeouts on the database role.
#
#   test/helpers/scale-topology.sh start DIR [SYNC [ASYNC]]  start it; prints the env to use
#   test/helpers/scale-topology.sh stop DIR                   stop everything under DIR and delete DIR
#
# SYNC replicas (default 1) apply every commit before it returns
# (synchronous_commit = remote_apply): the integration suite reads its writes
# anonymously at once, which the service promises only to their writer, so
# the suite reads from those. ASYNC replicas (default 1) are ordinary ones:
# the lag tests pause their replay. `start` writes DIR/env (shell `export`
# lines): TEST_DATABASE_URL (PgBouncer), TEST_DATABASE_LISTEN_URL (the primary,
# direct), TEST_DATABASE_READ_URL (the synchronous replicas), SCALE_PRIMARY_URL,
# SCALE_BOUNCER_URL and SCALE_ASYNC_REPLICA_URLS. PgBouncer 1.18 cannot follow
# named statements: the service must find that out by itself. Needs PostgreSQL 15's
# server binaries (Debian: postgresql-15) and pgbouncer (Debian: pgbouncer).
# PostgreSQL and PgBouncer refuse to run as root: under root they run as the
# `postgres` user.
set -euo pipefail

PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

wait_ready() { # wait_ready PORT
  for _ in $(seq 1 100); do
    "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$1" && return 0
    sleep 0.1
  done
  echo "nothing answers on port $1" >&2
  return 1
}

start() {
  local dir=$1 sync=${2:-1} async=${3:-1}
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
  chmod 755 "$dir"

  local primary_port
  primary_port=$(free_port)
  as_pg "$PG_BIN/initdb" -D "$dir/primary" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat >>"$dir/primary/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $primary_port
# Names its processes (postgres: primary: …), as the replicas' cluster_name does theirs.
cluster_name = primary
unix_socket_directories = '$dir'
wal_level = replica
max_wal_senders = 10
hot_standby_feedback = on
# Test data is disposable.
fsync = off
full_page_writes = off
EOF

  echo "host replication all 127.0.0.1/32 trust" >>"$dir/primary/pg_hba.conf"
  as_pg "$PG_BIN/pg_ctl" -D "$dir/primary" -l "$dir/primary.log" -w start >/dev/null
  wait_ready "$primary_port"
  # What the service's `options` would have set on each session (docs/operations.md).
  "$PG_BIN/psql" -q -h 127.0.0.1 -p "$primary_port" -U postgres -d postgres \
    -c "ALTER ROLE postgres SET statement_timeout = '10s'" \
    -c "ALTER ROLE postgres SET idle_in_transaction_session_timeout = '15s'" \
    -c "ALTER ROLE postgres SET jit = off"

  local sync_urls=() async_urls=() name port
  for name in $(seq -f 'sync%g' 1 "$sync") $(seq -f 'async%g' 1 "$async"); do
    port=$(free_port)
    as_pg "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres -D "$dir/$name" -R -X stream -c fast
    cat >>"$dir/$name/postgresql.conf" <<EOF
port = $port
# The walreceiver's application_name: synchronous_standby_names on the primary names it.
cluster_name = $name
hot_standby = on
# Long test queries must not be cancelled by the replay of vacuum's cleanup.
max_standby_streaming_delay = -1
EOF
    as_pg "$PG_BIN/pg_ctl" -D "$dir/$name" -l "$dir/$name.log" -w start >/dev/null
    wait_ready "$port"
    if [[ $name == sync* ]]; then sync_urls+=("postgres://postgres@127.0.0.1:$port/postgres"); else async_urls+=("postgres://postgres@127.0.0.1:$port/postgres"); fi
  done
  # Only now: a commit waiting for a standby that does not exist yet would wait forever.
  if [ "$sync" -gt 0 ]; then
    printf "synchronous_standby_names = 'ANY %s (%s)'\nsynchronous_commit = remote_apply\n" \
      "$sync" "$(seq -s, -f 'sync%g' 1 "$sync")" >>"$dir/primary/postgresql.conf"
  else
    echo "synchronous_commit = off" >>"$dir/primary/postgresql.conf"
  fi
  as_pg "$PG_BIN/pg_ctl" -D "$dir/primary" reload >/dev/null

  local bouncer_port
  bouncer_port=$(free_port)
  cat >"$dir/pgbouncer.ini" <<EOF
[databases]
; Every database (the tests create one per file) on the primary.
* = host=127.0.0.1 port=$primary_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir = $dir
pool_mode = transaction
; The service sends its timeouts in options; behind PgBouncer they are the role's.
ignore_startup_parameters = options
auth_type = trust
auth_file = $dir/userlist.txt
max_client_conn = 2000
default_pool_size = 40
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
  echo '"postgres" ""' >"$dir/userlist.txt"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir/pgbouncer.ini" "$dir/userlist.txt"
  as_pg pgbouncer -d "$dir/pgbouncer.ini"
  wait_ready "$bouncer_port"

  cat >"$dir/env" <<EOF
export TEST_DATABASE_URL=postgres://postgres@127.0.0.1:$bouncer_port/postgres
export TEST_DATABASE_LISTEN_URL=postgres://postgres@127.0.0.1:$primary_port/postgres
export TEST_DATABASE_READ_URL=$(IFS=,; echo "${sync_urls[*]}")
export SCALE_PRIMARY_URL=postgres://postgres@127.0.0.1:$primary_port/postgres
export SCALE_BOUNCER_URL=postgres://postgres@127.0.0.1:$bouncer_port/postgres
export SCALE_ASYNC_REPLICA_URLS=$(IFS=,; echo "${async_urls[*]}")
EOF
  cat "$dir/env"
}

stop() {
  local dir=$1
  [ -d "$dir" ] || return 0
  if [ -f "$dir/pgbouncer.pid" ]; then kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true; fi
  local data
  for data in "$dir"/sync* "$dir"/async* "$dir/primary"; do
    [ -f "$data/postmaster.pid" ] && as_pg "$PG_BIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
  done
  rm -rf "$dir"
}

case "${1:-}" in
  start) start "${2:?usage: $0 start DIR [SYNC [ASYNC]]}" "${3:-1}" "${4:-1}" ;;
  stop) stop "${2:?usage: $0 stop DIR}" ;;
  *) echo "usage: $0 start DIR [SYNC [ASYNC]] | stop DIR" >&2; exit 64 ;;
esac
