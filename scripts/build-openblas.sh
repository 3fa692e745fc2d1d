#!/usr/bin/env bash
# Build OpenBLAS from its pinned source tarball and install it into PREFIX.
# Inputs: SOURCE VERSION PATCHES TREE PREFIX JOBS OPENBLAS_MAKE_FLAGS (make variables: TARGET, ...).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${TREE:?}" "${PREFIX:?}" "${JOBS:?}" "${OPENBLAS_MAKE_FLAGS:?}"
read -r -a make_flags <<< "$OPENBLAS_MAKE_FLAGS"
echo "torchstack: building OpenBLAS $VERSION with ${make_flags[*]} into $PREFIX"

tree=$TREE
"$(dirname "$0")/prepare-source.sh" openblas "$VERSION" "$SOURCE" "$tree" "$PATCHES"
# The library only (libs, netlib, shared): plain `make` also builds and runs the BLAS self-tests,
# which die of SIGILL when this host cannot run the target's instructions. CROSS=1 (in the
# flags) keeps any test run out of the install step and the LAPACK tests too.
# One goal per make: GNU make 4.4 and newer (trixie) builds command-line goals in parallel, and
# libs and netlib then write the same static library at once (OpenBLAS#3899, spack#38631).
# MAKE_NB_JOBS=0: without it getarch gives its sub-makes -j<every core of the host>, past JOBS
# (the memory bound); 0 leaves them on this make's own job slots (as Julia's build does).
for goal in libs netlib shared; do
    make -C "$tree" -j"$JOBS" MAKE_NB_JOBS=0 "${make_flags[@]}" "$goal"
done
make -C "$tree" MAKE_NB_JOBS=0 "${make_flags[@]}" PREFIX="$PREFIX" install
mkdir -p "$PREFIX/share/torchstack"
echo "$OPENBLAS_MAKE_FLAGS" > "$PREFIX/share/torchstack/openblas-make-flags"
rm -rf "$tree"
