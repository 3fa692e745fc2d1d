#!/usr/bin/env bash
# Build numpy from its pinned source distribution against the image's OpenBLAS, into VENV (made here
# where it is not yet).
# Inputs: SOURCE VERSION PATCHES TREE VENV JOBS CFLAGS CXXFLAGS PKG_CONFIG_PATH NUMPY_SETUP_ARGS
#         PIP_INSTALLER (the pip to install first; it stays), BUILD_REQUIREMENTS (pinned meson-python,
#         meson, ninja, cython).
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${TREE:?}" "${VENV:?}" "${JOBS:?}" "${CFLAGS:?}" "${NUMPY_SETUP_ARGS:?}"
: "${BUILD_REQUIREMENTS:?}" "${PKG_CONFIG_PATH?}"
read -r -a requirements <<< "$BUILD_REQUIREMENTS"
read -r -a setup_args <<< "$NUMPY_SETUP_ARGS"
echo "torchstack: building numpy $VERSION with CFLAGS='$CFLAGS' and ${setup_args[*]}"

# GCC 12 (Debian bookworm's) warns falsely about the AVX-512 intrinsics of its own headers wherever
# numpy's x86-simd-sort C++ uses them (GCC bug 105593, fixed in GCC 13): some 19,000 warnings, half a
# million lines and 70 MB of build log on x86_64. Warning options change no generated code.
export CXXFLAGS="${CXXFLAGS:-} -Wno-maybe-uninitialized -Wno-uninitialized"

tree=$TREE
[[ -x $VENV/bin/python3 ]] || python3 -m venv "$VENV"
"$(dirname "$0")/prepare-source.sh" numpy "$VERSION" "$SOURCE" "$tree" "$PATCHES"
if [[ -n ${PIP_INSTALLER:-} ]]; then
    # On its own first: a pip that hands every repeated --config-settings key to the build.
    "$VENV/bin/pip" install --no-cache-dir "$PIP_INSTALLER"
fi
"$VENV/bin/pip" install --no-cache-dir "${requirements[@]}"
config=(--config-settings=compile-args=-j"$JOBS" --config-settings=build-dir=/tmp/torchstack-build/numpy)
for arg in "${setup_args[@]}"; do
    config+=(--config-settings=setup-args="$arg")
done
"$VENV/bin/pip" install --no-cache-dir --no-build-isolation --check-build-dependencies "${config[@]}" "$tree"
"$VENV/bin/pip" uninstall --yes "${requirements[@]%%==*}"
rm -rf "$tree" /tmp/torchstack-build/numpy
