#!/bin/sh
# Writes pgbouncer.ini and userlist.txt from the variables edoburu/pgbouncer reads
# (those docker-compose.yml sets), then runs PgBouncer as the postgres user.
set -eu
: "${DB_HOST:?}" "${DB_USER:?}" "${DB_PASSWORD:?}"
ini=/etc/pgbouncer/pgbouncer.ini
cat >"$ini" <<INI
[databases]
${DB_NAME:-*} = host=${DB_HOST} port=${DB_PORT:-5432}
[pgbouncer]
listen_addr = ${LISTEN_ADDR:-0.0.0.0}
listen_port = ${LISTEN_PORT:-5432}
unix_socket_dir =
auth_type = ${AUTH_TYPE:-md5}
auth_file = /etc/pgbouncer/userlist.txt
pool_mode = ${POOL_MODE:-session}
max_client_conn = ${MAX_CLIENT_CONN:-100}
default_pool_size = ${DEFAULT_POOL_SIZE:-20}
max_prepared_statements = ${MAX_PREPARED_STATEMENTS:-0}
ignore_startup_parameters = ${IGNORE_STARTUP_PARAMETERS:-extra_float_digits}
admin_users = ${ADMIN_USERS:-postgres}
INI
printf '"%s" "%s"\n' "$DB_USER" "$DB_PASSWORD" >/etc/pgbouncer/userlist.txt
chown postgres:postgres "$ini" /etc/pgbouncer/userlist.txt
chmod 0600 /etc/pgbouncer/userlist.txt
echo "pgbouncer: ${DB_NAME:-*} -> ${DB_HOST}:${DB_PORT:-5432}, ${POOL_MODE:-session} pooling, auth ${AUTH_TYPE:-md5}"
[ "$(id -u)" = 0 ] && exec setpriv --reuid=postgres --regid=postgres --init-groups "$@"
exec "$@"
