#!/usr/bin/env bash
# Trains a small model twice (two learning rates), then serves the WUR tab on 127.0.0.1.
source "$(dirname "$0")/env.sh"
exec python examples/demo.py "$@"
