#!/usr/bin/env bash
# Apply a component's patches, in the order of its series file, to an unpacked source tree.
# Usage: apply-patches.sh COMPONENT VERSION SOURCE_TREE PATCH_DIR
# A patch that does not apply stops the build, naming the patch and the component version.
set -euo pipefail

component=$1 version=$2 tree=$3 patch_dir=$4
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
