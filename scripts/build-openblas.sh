#!/usr/bin/env bash
# Build OpenBLAS from its pinned source tarball and install it into PREFIX.
# Inputs: SOURCE VERSION PATCHES TREE PREFIX JOBS OPENBLAS_MAKE_FLAGS (make variables: TARGET, ...).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${TREE:?}" "${PREFIX:?}" "${JOBS:?}" "${OPENBLAS_MAKE_FLAGS:?}"
read -r -a make_flags <<< "$OPENBLAS_MAKE_FLAGS"
echo "torchstack: building OpenBLAS $VERSION with ${make_flags[*]} into $PREFIX"

tree=$TREE
"$(dirname "$0")/prepare-source.sh" openblas "$VERSION" "$SOURCE" "$tree" "$PATCHES"
# The library only (libs netlib shared): plain `make` also builds and runs the BLAS self-tests,
# which die of SIGILL when this host cannot run the target's instructions. CROSS=1 (in the
# flags) keeps any test run out of the install step and the LAPACK tests too.
make -C "$tree" -j"$JOBS" "${make_flags[@]}" libs netlib shared
make -C "$tree" "${make_flags[@]}" PREFIX="$PREFIX" install
mkdir -p "$PREFIX/share/torchstack"
echo "$OPENBLAS_MAKE_FLAGS" > "$PREFIX/share/torchstack/openblas-make-flags"
rm -rf "$tree"
