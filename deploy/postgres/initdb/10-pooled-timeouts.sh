#!/bin/sh
# Sessions lent by PgBouncer in transaction mode do not get the service's own
# timeouts and jit = off (its options startup parameter is ignored there): they
# get these, the role's, equal to the service's defaults (PG_STATEMENT_TIMEOUT_MS,
# the fixed 15 s idle-in-transaction limit, and no JIT: src/db/pool.ts). Migrations clear statement_timeout for
# their own session. Runs once, on the first start of an empty volume.
set -e
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
ALTER ROLE "$POSTGRES_USER" SET statement_timeout = '10s';
ALTER ROLE "$POSTGRES_USER" SET idle_in_transaction_session_timeout = '15s';
ALTER ROLE "$POSTGRES_USER" SET jit = off;
SQL
