#!/bin/sh
# Prints nginx's whole configuration for the edge cache in front of one service started without
# Compose (docs/operations.md, "The edge cache"): deploy/edge-standalone.conf.template, with
#   UPSTREAM  the service's address, host:port as it listens (127.0.0.1:3000 for `npm start`);
#   LISTEN    what nginx listens on, as nginx's `listen` takes it: 8080 if not given;
# and the path of deploy/edge-cache.conf beside this script, which the configuration includes (so the
# caching rules stay in that one file). Only sh and sed: what a Debian machine with its nginx has.
#
#   deploy/edge-standalone.sh 127.0.0.1:3000 > DIR/nginx.conf
#   nginx -p DIR -c nginx.conf
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 UPSTREAM [LISTEN] > DIR/nginx.conf   (e.g. $0 127.0.0.1:3000 8080)" >&2
  exit 2
fi
upstream=$1
listen=${2:-8080}
here=$(cd "$(dirname "$0")" && pwd -P)

# Each value becomes one word of a directive and a sed replacement: a space, `;`, `|`, `&` or quote
# would make another directive, or another replacement, of it.
for value in "$upstream" "$listen"; do
  case $value in
    '' | *[!]A-Za-z0-9._:/[-]*)
      echo "$0: not an address: '$value'" >&2
      exit 2
      ;;
  esac
done
case $here in
  *[\|\&\\\"]*)
    echo "$0: its folder's path holds | & \\ or \": move the checkout" >&2
    exit 2
    ;;
esac

sed -e "s|@UPSTREAM@|$upstream|" -e "s|@LISTEN@|$listen|" -e "s|@EDGE_CACHE_CONF@|$here/edge-cache.conf|" \
  "$here/edge-standalone.conf.template"
