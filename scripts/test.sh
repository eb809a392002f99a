#!/usr/bin/env bash
# Runs every test. Creates or updates the environment it needs first.
source "$(dirname "$0")/env.sh"
bash "$ROOT/scripts/frontend.sh" || echo "scripts/frontend.sh failed: the frontend tests will fail" >&2
exec python -m pytest "$@"
