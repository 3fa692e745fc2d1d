#!/usr/bin/env bash
# Build OpenBLAS from its pinned source tarball and install it into PREFIX.
# Inputs: SOURCE VERSION PATCHES PREFIX JOBS OPENBLAS_MAKE_FLAGS (make variables: TARGET, ...).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${PREFIX:?}" "${JOBS:?}" "${OPENBLAS_MAKE_FLAGS:?}"
read -r -a make_flags <<< "$OPENBLAS_MAKE_FLAGS"
echo "torchstack: building OpenBLAS $VERSION with ${make_flags[*]} into $PREFIX"

tree=/tmp/torchstack-src/openblas
"$(dirname "$0")/prepare-source.sh" openblas "$VERSION" "$SOURCE" "$tree" "$PATCHES"
make -C "$tree" -j"$JOBS" "${make_flags[@]}"
make -C "$tree" "${make_flags[@]}" PREFIX="$PREFIX" install
mkdir -p "$PREFIX/share/torchstack"
echo "$OPENBLAS_MAKE_FLAGS" > "$PREFIX/share/torchstack/openblas-make-flags"
rm -rf "$tree"
