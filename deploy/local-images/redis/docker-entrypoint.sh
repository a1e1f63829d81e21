#!/bin/sh
# As the official image: runs as the redis user, and with no config file the server
# answers on every address (the official build turns protected mode off).
set -eu
if [ "${1:-}" = redis-server ]; then
  shift
  set -- redis-server --bind 0.0.0.0 --protected-mode no "$@"
  [ "$(id -u)" = 0 ] && exec setpriv --reuid=redis --regid=redis --init-groups "$@"
fi
exec "$@"
