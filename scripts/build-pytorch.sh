#!/usr/bin/env bash
# Build the PyTorch wheel from its pinned release tarball (with submodules) with the backend's
# switches, the way PyTorch's own CI does; keep the source tree for the dev image.
# Inputs: SOURCE VERSION PATCHES VENV BUILD_REQUIREMENTS and PyTorch's own build variables
# (MAX_JOBS BLAS USE_MKLDNN USE_MKLDNN_ACL ACL_ROOT_DIR OpenBLAS_HOME PYTORCH_BUILD_VERSION ...).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${VENV:?}" "${BUILD_REQUIREMENTS:?}" "${MAX_JOBS:?}"
: "${PYTORCH_BUILD_VERSION:?}"
read -r -a requirements <<< "$BUILD_REQUIREMENTS"
tree=/opt/torchstack/src/pytorch
wheels=/opt/torchstack/wheels
echo "torchstack: building PyTorch $PYTORCH_BUILD_VERSION with MAX_JOBS=$MAX_JOBS BLAS=${BLAS:-} USE_MKLDNN=${USE_MKLDNN:-} USE_MKLDNN_ACL=${USE_MKLDNN_ACL:-}"

mkdir -p "$wheels"
"$(dirname "$0")/prepare-source.sh" torch "$VERSION" "$SOURCE" "$tree" "$PATCHES"
"$VENV/bin/pip" install --no-cache-dir "${requirements[@]}"
cd "$tree"
"$VENV/bin/python" -m pip wheel --no-build-isolation --no-deps --verbose --wheel-dir "$wheels" .
