#!/usr/bin/env bash
# Installs what the frontend build and tests need, on a fresh machine; idempotent.
# - frontend/node_modules from frontend/package-lock.json (npm ci), when missing or stale;
# - Debian's chromium at /usr/bin/chromium (never a downloaded browser), when missing.
# Without them tests/browser/test_frontend.py fails (it never skips).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
status=0

if command -v npm >/dev/null; then
  STAMP="$ROOT/frontend/node_modules/.wur-lock-sha256"
  WANT="$(sha256sum "$ROOT/frontend/package-lock.json" | cut -d' ' -f1)"
  if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    if (cd "$ROOT/frontend" && npm ci --no-audit --no-fund --loglevel=error); then
      echo "$WANT" > "$STAMP"
    else
      echo "scripts/frontend.sh: npm ci failed in frontend/" >&2
      status=1
    fi
  fi
else
  echo "scripts/frontend.sh: npm (Node.js 20+) is needed for the frontend tests" >&2
  status=1
fi

if [ ! -x /usr/bin/chromium ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "scripts/frontend.sh: installing Debian's chromium" >&2
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; }; then
    echo "scripts/frontend.sh: could not install chromium (apt-get install -y chromium)" >&2
    status=1
  fi
fi
exit $status
