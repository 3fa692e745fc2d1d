#!/usr/bin/env bash
# Build the Arm Compute Library with scons and install its tree into PREFIX (ACL_ROOT_DIR).
# Inputs: SOURCE VERSION PATCHES TREE PREFIX ACL_SCONS_FLAGS.
set -euo pipefail

: "${SOURCE:?}" "${VERSION:?}" "${PATCHES:?}" "${TREE:?}" "${PREFIX:?}" "${ACL_SCONS_FLAGS:?}"
read -r -a scons_flags <<< "$ACL_SCONS_FLAGS"
echo "torchstack: building Arm Compute Library $VERSION with ${scons_flags[*]} into $PREFIX"

tree=$TREE
"$(dirname "$0")/prepare-source.sh" acl "$VERSION" "$SOURCE" "$tree" "$PATCHES"
(cd "$tree" && scons "${scons_flags[@]}")
mkdir -p "$PREFIX"
# The layout PyTorch's FindACL expects, as upstream's install_acl.sh copies it.
for part in arm_compute include utils support src build; do
    cp -r "$tree/$part" "$PREFIX/$part"
done
find "$PREFIX/build" -name '*.o' -delete
mkdir -p "$PREFIX/share/torchstack"
echo "$ACL_SCONS_FLAGS" > "$PREFIX/share/torchstack/acl-scons-flags"
rm -rf "$tree"
