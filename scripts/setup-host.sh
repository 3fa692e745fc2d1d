#!/usr/bin/env bash
# Prepare a Debian/Ubuntu build host, as root: the Docker engine, mmdebstrap (to bootstrap the
# base OS image without a registry), qemu-user-static with binfmt (to build other
# architectures), and torchstack's Python dependencies. Says what it does; skips what is there.
set -euo pipefail

say() { echo "setup-host: $*"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "setup-host: run as root (sudo $0)" >&2
    exit 1
fi

# Each package the toolkit's paths need, and how to tell it is here (a command, or dpkg's word):
#   the engine (docker.io, unless another Docker package provides dockerd);
#   bootstrapping the base image: mmdebstrap, Debian's archive keyring (Ubuntu lacks it), and
#     arch-test, which mmdebstrap needs for a foreign architecture (only "recommended", so
#     --no-install-recommends would leave it out);
#   emulated arm64, s390x (or x86_64) builds: qemu-user-static and binfmt-support;
#   fetching buildx and sources: curl, gpgv, xz-utils, ca-certificates;
#   the engine tests' second engine, which gets a bridge of its own: iproute2.
missing=()
installed() { dpkg-query -W -f '${Status}' "$1" 2> /dev/null | grep -q '^install ok installed$'; }
command -v dockerd > /dev/null || missing+=(docker.io)
for package in mmdebstrap debian-archive-keyring arch-test qemu-user-static binfmt-support \
    curl gpgv xz-utils ca-certificates iproute2; do
    installed "$package" || missing+=("$package")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
else
    say "the Docker engine, mmdebstrap, arch-test, qemu-user-static and binfmt-support are installed"
fi

# qemu for every architecture torchstack builds (torchstack/data/platforms.yaml) but this host's,
# registered with flag F so that it works inside containers.
if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
    say "mounting binfmt_misc"
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
foreign=()
for qemu in aarch64 s390x x86_64; do
    [[ $qemu == "$(uname -m)" ]] || foreign+=("$qemu")
done
for qemu in "${foreign[@]}"; do
    if ! grep -qx enabled "/proc/sys/fs/binfmt_misc/qemu-$qemu" 2> /dev/null; then
        say "registering qemu binfmt handlers (qemu-$qemu was not enabled)"
        update-binfmts --enable
        break
    fi
done
for qemu in "${foreign[@]}"; do
    grep -q '^flags: .*F' "/proc/sys/fs/binfmt_misc/qemu-$qemu" \
        || { echo "setup-host: qemu-$qemu is not registered with flag F; see update-binfmts --display qemu-$qemu" >&2; exit 1; }
done

# BuildKit's CLI plugin, for --builder buildx (compiler cache mounts, CA as a secret). Bookworm
# has no docker-buildx package: take trixie's, verified through the archive's signed InRelease.
install_buildx_from_trixie() {
    local arch archive=http://deb.debian.org/debian work
    arch=$(dpkg --print-architecture)
    work=$(mktemp -d)
    curl -fsSL "$archive/dists/trixie/InRelease" -o "$work/InRelease"
    gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg "$work/InRelease" 2> /dev/null
    curl -fsSL "$archive/dists/trixie/main/binary-$arch/Packages.xz" -o "$work/Packages.xz"
    grep -q "$(sha256sum "$work/Packages.xz" | cut -d' ' -f1) .* main/binary-$arch/Packages.xz\$" "$work/InRelease"
    xz -d "$work/Packages.xz"
    local filename sha
    filename=$(awk '/^Package: docker-buildx$/{f=1} f&&/^Filename:/{print $2; exit}' "$work/Packages")
    sha=$(awk '/^Package: docker-buildx$/{f=1} f&&/^SHA256:/{print $2; exit}' "$work/Packages")
    curl -fsSL "$archive/$filename" -o "$work/buildx.deb"
    echo "$sha  $work/buildx.deb" | sha256sum --check --quiet
    dpkg-deb -x "$work/buildx.deb" "$work/root"
    install -D -m 0755 "$work/root/usr/libexec/docker/cli-plugins/docker-buildx" /usr/libexec/docker/cli-plugins/docker-buildx
    rm -rf "$work"
}
if docker buildx version > /dev/null 2>&1; then
    say "docker buildx is installed"
elif apt-cache show docker-buildx > /dev/null 2>&1; then
    say "installing docker-buildx"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-buildx > /dev/null
else
    say "installing docker buildx from Debian trixie's docker-buildx package (signature and checksums verified)"
    install_buildx_from_trixie
fi

# A registry server for the tests of --push and `manifest` (they start their own, on loopback).
# Installed without starting or enabling the package's own service on port 5000.
if ! installed docker-registry; then
    say "installing docker-registry (for the tests; its own service stays off)"
    policy=/usr/sbin/policy-rc.d ours=
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod +x "$policy"
        ours=1
        trap 'rm -f "$policy"' EXIT
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-registry > /dev/null
    if [[ -n $ours ]]; then
        rm -f "$policy"
        trap - EXIT
    fi
    if command -v systemctl > /dev/null && systemctl is-system-running > /dev/null 2>&1; then
        systemctl disable --now docker-registry > /dev/null 2>&1 || true
    fi
fi

if docker info > /dev/null 2>&1; then
    say "the Docker engine is running"
else
    say "starting the Docker engine (log: /var/log/torchstack-dockerd.log)"
    if command -v systemctl > /dev/null && systemctl is-system-running > /dev/null 2>&1; then
        systemctl start docker
    else
        nohup dockerd > /var/log/torchstack-dockerd.log 2>&1 &
    fi
    for _ in $(seq 60); do
        docker info > /dev/null 2>&1 && break
        sleep 1
    done
    docker info > /dev/null 2>&1 || { echo "setup-host: the Docker engine did not start; see /var/log/torchstack-dockerd.log" >&2; exit 1; }
fi

say "installing torchstack and its Python dependencies (pip install -e .[dev])"
python3 -m pip install --quiet --disable-pip-version-check -e "$(dirname "$0")/..[dev]"
say "ready"
