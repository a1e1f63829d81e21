#!/bin/sh
# Sessions lent by PgBouncer in transaction mode do not get the service's own
# timeouts (its options startup parameter is ignored there): they get these,
# the role's, equal to the service's defaults (PG_STATEMENT_TIMEOUT_MS and the
# fixed 15 s idle-in-transaction limit). Migrations clear statement_timeout for
# their own session. Runs once, on the first start of an empty volume.
set -e
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<SQL
ALTER ROLE "$POSTGRES_USER" SET statement_timeout = '10s';
ALTER ROLE "$POSTGRES_USER" SET idle_in_transaction_session_timeout = '15s';
SQL
