#!/bin/bash
# What the stack relies on from the official image's entry point: POSTGRES_USER/PASSWORD/DB,
# /docker-entrypoint-initdb.d (*.sh, *.sql) on the first start of an empty PGDATA, run by a
# server on the unix socket only, then the real server listening on every address.
set -euo pipefail
if [ "${1:-}" = postgres ] || [ "${1#-}" != "${1:-}" ]; then
  [ "${1:-}" = postgres ] || set -- postgres "$@"
  if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA"; chown postgres:postgres "$PGDATA"; chmod 0700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
  fi
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}"
    export POSTGRES_USER="${POSTGRES_USER:-postgres}" POSTGRES_DB="${POSTGRES_DB:-${POSTGRES_USER:-postgres}}"
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
      --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
    echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
    printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/var/run/postgresql" -w start >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
      psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -qc "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
      case "$f" in
        *.sh) echo "initdb: running $f"; if [ -x "$f" ]; then "$f"; else . "$f"; fi ;;
        *.sql) echo "initdb: running $f"; psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -f "$f" ;;
      esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "initdb: done; starting the server"
  fi
fi
exec "$@"
