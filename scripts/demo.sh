#!/usr/bin/env bash
# The main job on built-in defaults.
set -euo pipefail
BUILD=${1:-build}
exec "$BUILD/braid" bench -n 2 --op all --min-bytes 8 --max-bytes 16777216
