#!/usr/bin/env bash
# Unpack a component's verified source archive into a fresh tree, then apply the component's
# patches in the order of its series file.
# Usage: prepare-source.sh COMPONENT VERSION ARCHIVE SOURCE_TREE PATCH_DIR
# Callers pass a fixed SOURCE_TREE, so that compiler-cache keys (absolute paths in compiler
# arguments) repeat from one build to the next. A patch that does not apply stops the build,
# naming the patch and the component version.
set -euo pipefail

component=$1 version=$2 archive=$3 tree=$4 patch_dir=$5
rm -rf "$tree" && mkdir -p "$tree"
tar -xzf "$archive" -C "$tree" --strip-components=1
series="$patch_dir/series"
if [[ ! -f "$series" ]]; then
    echo "torchstack: no patches for $component $version"
    exit 0
fi
while read -r patch _; do
    [[ -z "$patch" || "$patch" == \#* ]] && continue
    if ! patch --directory="$tree" --strip=1 --forward --batch --dry-run --silent < "$patch_dir/$patch" > /dev/null; then
        echo "torchstack: patch $patch does not apply to $component $version" >&2
        exit 1
    fi
    patch --directory="$tree" --strip=1 --forward --batch --silent < "$patch_dir/$patch"
    echo "torchstack: applied $patch to $component $version"
done < "$series"
