#!/usr/bin/env bash
# Runs every test. Creates or updates the environment it needs first.
source "$(dirname "$0")/env.sh"
exec python -m pytest "$@"
