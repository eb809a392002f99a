#!/usr/bin/env bash
# Installs what the frontend build and tests need, on a fresh machine; idempotent.
# - Debian's chromium at /usr/bin/chromium (never a downloaded browser), when missing;
# - frontend/node_modules from frontend/package-lock.json (npm ci), when missing or stale.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "scripts/frontend.sh: installing Debian's chromium" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if ! command -v npm >/dev/null; then
  echo "scripts/frontend.sh: npm (Node.js 20+) is needed for the frontend tests" >&2
  exit 1
fi
STAMP="$ROOT/frontend/node_modules/.wur-lock-sha256"
WANT="$(sha256sum "$ROOT/frontend/package-lock.json" | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
  (cd "$ROOT/frontend" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$WANT" > "$STAMP"
fi
