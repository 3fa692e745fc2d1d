#!/usr/bin/env bash
# Build the PyTorch wheel from its pinned release tarball (with submodules) with the backend's
# switches (PyTorch's own setup.py variables; the full list is in the build's RUN line), then
# keep the patched sources, without the build tree, for the dev image.
# Inputs: SOURCE VERSION PATCHES TREE VENV BUILD_REQUIREMENTS WHEELS KEEP_SOURCE and PyTorch's own
# build variables (MAX_JOBS BLAS USE_MKLDNN USE_MKLDNN_ACL ACL_ROOT_DIR OpenBLAS_HOME USE_CCACHE ...).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${TREE:?}" "${VENV:?}" "${BUILD_REQUIREMENTS:?}" "${MAX_JOBS:?}"
: "${PYTORCH_BUILD_VERSION:?}" "${WHEELS:?}" "${KEEP_SOURCE:?}"
read -r -a requirements <<< "$BUILD_REQUIREMENTS"
echo "torchstack: building PyTorch $PYTORCH_BUILD_VERSION with MAX_JOBS=$MAX_JOBS BLAS=${BLAS:-} USE_MKLDNN=${USE_MKLDNN:-} USE_MKLDNN_ACL=${USE_MKLDNN_ACL:-}"

mkdir -p "$WHEELS"
"$(dirname "$0")/prepare-source.sh" torch "$VERSION" "$SOURCE" "$TREE" "$PATCHES"
"$VENV/bin/pip" install --no-cache-dir "${requirements[@]}"
# --check-build-dependencies: our pinned build requirements must satisfy torch's own
# [build-system] requires; if they drift apart, the build stops here and says which.
(cd "$TREE" && "$VENV/bin/python" -m pip wheel --no-build-isolation --check-build-dependencies --no-deps --verbose \
    --wheel-dir "$WHEELS" .)
# The dev image keeps the sources as they were compiled (tarball plus patches), not the
# multi-gigabyte build tree: unpack them again where the image keeps them.
"$(dirname "$0")/prepare-source.sh" torch "$VERSION" "$SOURCE" "$KEEP_SOURCE" "$PATCHES"
rm -rf "$TREE"
