#!/usr/bin/env bash
# Runs every test. Creates or updates the environment it needs first: the frontend's
# (scripts/frontend.sh: npm, chromium) in the background while scripts/env.sh makes the
# Python one, so that a fresh machine waits for the longer of the two, not for both.
FRONTEND_SH="$(cd "$(dirname "$0")" && pwd)/frontend.sh"
# in a process group of its own (setsid), so that one kill reaches its npm or apt-get too
setsid bash "$FRONTEND_SH" &
FRONTEND=$!
trap 'kill -- -"$FRONTEND" 2>/dev/null' EXIT  # env.sh failed: stop the frontend's install too
source "$(dirname "$0")/env.sh"
wait "$FRONTEND" || echo "scripts/frontend.sh failed: the frontend tests will fail" >&2
trap - EXIT
exec python -m pytest "$@"
