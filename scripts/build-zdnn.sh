#!/usr/bin/env bash
# Build IBM zDNN (s390x only) with autoconf and install it into PREFIX.
# Inputs: SOURCE VERSION PATCHES TREE PREFIX JOBS ZDNN_CFLAGS (appended after zDNN's own -march=z14,
# so the target's -march wins).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${TREE:?}" "${PREFIX:?}" "${JOBS:?}" "${ZDNN_CFLAGS:?}"
echo "torchstack: building zDNN $VERSION with $ZDNN_CFLAGS into $PREFIX"

tree=$TREE
"$(dirname "$0")/prepare-source.sh" zdnn "$VERSION" "$SOURCE" "$tree" "$PATCHES"
cd "$tree"
autoreconf .
CFLAGS="$ZDNN_CFLAGS" CXXFLAGS="$ZDNN_CFLAGS" ./configure --prefix="$PREFIX"
make -j"$JOBS" build
make install
mkdir -p "$PREFIX/share/torchstack"
echo "$ZDNN_CFLAGS" > "$PREFIX/share/torchstack/zdnn-cflags"
cd /
rm -rf "$tree"
