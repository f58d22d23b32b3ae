#!/usr/bin/env bash
# Installs braid from the build tree into a temporary prefix, builds a tiny
# consumer with find_package(braid) / braid::braid, and runs it as a 3-rank
# job under the installed `braid run`. Usage: check_install.sh BUILD_DIR SRC_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d /tmp/braid_install_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$tmp/b" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/b" >/dev/null
out=$("$tmp/prefix/bin/braid" run -n 3 -- "$tmp/b/consumer")
echo "$out"
[ "$(echo "$out" | grep -c 'sum 6')" -eq 3 ]
