#!/usr/bin/env bash
# Build OpenBLAS from its pinned source tarball and install it into PREFIX.
# Inputs: SOURCE VERSION PATCHES PREFIX JOBS OPENBLAS_MAKE_FLAGS (make variables: TARGET, ...).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${PREFIX:?}" "${JOBS:?}" "${OPENBLAS_MAKE_FLAGS:?}"
read -r -a make_flags <<< "$OPENBLAS_MAKE_FLAGS"
echo "torchstack: building OpenBLAS $VERSION with ${make_flags[*]} into $PREFIX"

# A fixed path, so that compiler-cache keys (absolute paths in arguments) repeat across builds.
tree=/tmp/torchstack-src/openblas
rm -rf "$tree" && mkdir -p "$tree"
tar -xzf "$SOURCE" -C "$tree" --strip-components=1
"$(dirname "$0")/apply-patches.sh" openblas "$VERSION" "$tree" "$PATCHES"
make -C "$tree" -j"$JOBS" "${make_flags[@]}"
make -C "$tree" "${make_flags[@]}" PREFIX="$PREFIX" install
mkdir -p "$PREFIX/share/torchstack"
echo "$OPENBLAS_MAKE_FLAGS" > "$PREFIX/share/torchstack/openblas-make-flags"
rm -rf "$tree"
