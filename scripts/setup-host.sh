#!/usr/bin/env bash
# Prepare a Debian or Ubuntu build host, as root: the container engine and BuildKit's CLI,
# mmdebstrap (to bootstrap the base OS image without a registry), qemu-user registered with
# binfmt_misc (to build other architectures), cosign and skopeo, and the toolkit itself in a virtual
# environment of its own, .venv in the checkout, made from the host's python3 (never installed into
# the distribution's Python: PEP 668). ./build.py runs in that venv by itself. Says what it does;
# skips what is there. Hosts: Debian 12 (bookworm), Debian 13 (trixie), Debian 14 (forky, testing),
# Ubuntu 24.04 (noble), Ubuntu 26.04 (resolute).
#   --engine docker (the default): the Docker engine (a Docker CE host's own packages are kept);
#   --engine podman: Podman and its API service instead, for a host without Docker;
#   --lazy: also SOCI's soci and containerd 2 (Debian forky's), with which --lazy soci indexes a
#     pushed image for nodes that start it before its pull ends;
#   --tests: also what the engine tests need besides the engine: a registry server, Podman (whose
#     service the tests start on sockets of their own), a current Docker engine (as Docker 29 runs
#     on a new install: images in containerd's store) that the tests start beside the host's, and
#     what --lazy installs, with FUSE (fuse3) for the tests' lazy node;
#   --toolkit-only: only the toolkit's venv (and python3-venv where the distribution splits it out).
set -euo pipefail

say() { echo "setup-host: $*"; }
usage="usage: $0 [--engine docker|podman] [--lazy] [--tests] [--toolkit-only]"

engine=docker tests='' lazy='' toolkit_only=''
while (($#)); do
    case $1 in
        --engine) engine=${2:-}; shift 2 || shift ;;
        --engine=*) engine=${1#--engine=}; shift ;;
        --tests) tests=1 lazy=1; shift ;;
        --lazy) lazy=1; shift ;;
        --toolkit-only) toolkit_only=1; shift ;;
        *) echo "setup-host: unknown argument $1 ($usage)" >&2; exit 2 ;;
    esac
done
[[ $engine == docker || $engine == podman ]] \
    || { echo "setup-host: --engine ${engine:-(none)}: valid: docker, podman" >&2; exit 2; }

if [[ $(id -u) -ne 0 ]]; then
    echo "setup-host: run as root (sudo $0)" >&2
    exit 1
fi

# The releases set-up knows, by /etc/os-release's ID and codename; each names its packages below.
# shellcheck source=/dev/null
release=$( (. /etc/os-release && echo "${ID:-}:${VERSION_CODENAME:-}") 2> /dev/null || true)
case $release in
    debian:bookworm | debian:trixie | debian:forky | ubuntu:noble | ubuntu:resolute) ;;
    *)
        # shellcheck source=/dev/null
        name=$( (. /etc/os-release && echo "${PRETTY_NAME:-}") 2> /dev/null || true)
        echo "setup-host: ${name:-this host (no /etc/os-release)} is not a release set-up knows: Debian 12 (bookworm), Debian 13 (trixie), Debian 14 (forky, testing), Ubuntu 24.04 (noble), Ubuntu 26.04 (resolute)" >&2
        exit 2
        ;;
esac

checkout=$(cd "$(dirname "$0")/.." && pwd)
installed() { dpkg-query -W -f '${Status}' "$1" 2> /dev/null | grep -q '^install ok installed$'; }
updated=''
apt_install() { # package...
    [[ -n $updated ]] || { apt-get update -qq; updated=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" > /dev/null
}

# The toolkit in .venv, made from the host's python3: Debian's and Ubuntu's (3.11, 3.12, 3.13) or
# one installed outside the distribution. A venv made by another Python is made anew.
setup_venv() {
    local python venv=$checkout/.venv found
    python=$(command -v python3) || { echo "setup-host: no python3 on PATH: apt-get install python3" >&2; exit 2; }
    found=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
        echo "setup-host: $python is Python $found; torchstack needs Python 3.10 or later" >&2
        exit 2
    fi
    if ! "$python" -c 'import ensurepip, venv' 2> /dev/null; then
        if [[ $python == /usr/bin/* ]]; then
            say "installing python3-venv and python$found-venv (the distribution keeps venv's pip apart)"
            apt_install python3-venv "python$found-venv" || true
        fi
        "$python" -c 'import ensurepip, venv' 2> /dev/null || {
            echo "setup-host: $python cannot make a virtual environment (no ensurepip): install python$found-venv (apt-get install python3-venv)" >&2
            exit 2
        }
    fi
    if [[ -x $venv/bin/python ]] \
        && [[ $("$venv/bin/python" -c 'import sys; print(sys.base_prefix, sys.version)' 2> /dev/null) == "$("$python" -c 'import sys; print(sys.base_prefix, sys.version)')" ]]; then
        say "the toolkit's venv is $venv (Python $found)"
    else
        say "making the toolkit's venv $venv from $python (Python $found)"
        rm -rf "$venv"
        "$python" -m venv "$venv" || { echo "setup-host: $python -m venv $venv failed (apt-get install python$found-venv)" >&2; exit 2; }
    fi
    say "installing torchstack and its Python dependencies into it (pip install -e .[dev])"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "${checkout}[dev]"
}

if [[ -n $toolkit_only ]]; then
    setup_venv
    say "ready: ./build.py runs in $checkout/.venv"
    exit 0
fi

# Each package the toolkit's paths need, and how to tell it is here (a command, or dpkg's word):
#   the engine: docker.io (Debian from trixie on splits its CLI out into docker-cli), unless another Docker
#     package provides dockerd (Docker CE's docker-ce, whose containerd.io carries its own runc);
#   bootstrapping the base image: mmdebstrap, Debian's archive keyring (Ubuntu lacks it), and
#     arch-test, which mmdebstrap needs for a foreign architecture (only "recommended", so
#     --no-install-recommends would leave it out);
#   emulated arm64, s390x (or x86_64) builds: qemu-user from Debian trixie (below), registered here;
#   fetching buildx and sources, reading Debian's signed suites (the security gate): curl, gpgv,
#     xz-utils, ca-certificates;
#   pushing zstd layers (--compression zstd): skopeo, which compresses each layer afresh;
#   Podman (--engine podman, and the tests of it): podman, with uidmap (newuidmap, for rootless
#     users) and a rootless container's network (unless it runs with --network none): passt
#     (pasta) for Podman 5 (Debian 13 and later, Ubuntu 26.04), which Podman 6 keeps, where
#     slirp4netns, which Podman 6 dropped, serves Podman 4 (Debian 12, Ubuntu 24.04); and runc (crun, which Podman prefers, cannot run on a host with hybrid cgroups) unless
#     Docker CE's containerd.io is here: it carries its own runc, and dpkg refuses a second one;
#   the tests (--tests): their own signed Debian archive (gpg), their second engines' bridges
#     (iproute2), a registry server (docker-registry, below), Podman, FUSE (fuse3: its
#     fusermount3) for the SOCI snapshotter of their lazy node, and for their registry that asks for
#     a login: its htpasswd file (apache2-utils: htpasswd -B, the bcrypt the registry reads) and a
#     real credential helper (golang-docker-credential-helpers' docker-credential-pass, with pass).
missing=()
wanted=(mmdebstrap debian-archive-keyring arch-test curl gpgv xz-utils ca-certificates skopeo)
if [[ $engine == docker ]] && ! command -v dockerd > /dev/null; then
    wanted+=(docker.io)
    [[ $release == debian:trixie || $release == debian:forky ]] && wanted+=(docker-cli)
fi
podman_wanted=''
[[ $engine == podman || -n $tests ]] && podman_wanted=1
[[ -n $tests ]] && wanted+=(gpg iproute2 fuse3 apache2-utils pass golang-docker-credential-helpers)
if [[ -n $podman_wanted ]]; then
    case $release in
        debian:bookworm | ubuntu:noble) wanted+=(podman uidmap slirp4netns) ;; # Podman 4.3, 4.9
        *) wanted+=(podman uidmap passt) ;;                                     # Podman 5
    esac
    if installed containerd.io; then
        say "Docker CE's containerd.io carries runc: Podman uses it (Debian's runc package would conflict)"
    else
        wanted+=(runc)
    fi
fi
for package in "${wanted[@]}"; do
    installed "$package" || missing+=("$package")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    apt_install "${missing[@]}"
else
    say "${wanted[*]} are installed"
fi

# A package of a Debian suite the host's release lacks (trixie's, forky's), verified through the
# suite's signed InRelease (the Packages index's checksum, then the package's): its .deb is written
# to $3. Checksums are read from what gpgv verified (--output), not from the file as fetched. gpgv
# checks the signature, not the Release's Valid-Until: forky's (testing's) may be past on a mirror
# (this one's said 2026-11-06 on 2026-11-28), and its signature by Debian's archive keys is still checked.
fetch_from() { # suite package destination
    local arch archive=http://deb.debian.org/debian work filename sha
    arch=$(dpkg --print-architecture)
    work=$(mktemp -d)
    curl -fsSL "$archive/dists/$1/InRelease" -o "$work/InRelease"
    gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg --output "$work/Release" "$work/InRelease" 2> /dev/null
    curl -fsSL "$archive/dists/$1/main/binary-$arch/Packages.xz" -o "$work/Packages.xz"
    grep -q "$(sha256sum "$work/Packages.xz" | cut -d' ' -f1) .* main/binary-$arch/Packages.xz\$" "$work/Release"
    xz -d "$work/Packages.xz"
    filename=$(awk -v p="Package: $2" '$0==p{f=1} f&&/^Filename:/{print $2; exit}' "$work/Packages")
    sha=$(awk -v p="Package: $2" '$0==p{f=1} f&&/^SHA256:/{print $2; exit}' "$work/Packages")
    curl -fsSL "$archive/$filename" -o "$3"
    echo "$sha  $3" | sha256sum --check --quiet
    rm -rf "$work"
}
fetch_from_trixie() { fetch_from trixie "$@"; } # package destination

# qemu for every architecture torchstack builds (torchstack/data/platforms.yaml) but this host's:
# Debian trixie's qemu-user (10.0, statically linked, no dependencies), which runs emulated Python
# 3 to 5 times faster than bookworm's qemu-user-static 7.2 (benchmarks/results/qemu.json). Its
# binaries go to QEMU_DIR, and each is registered with binfmt_misc as trixie registers it (flag F:
# the kernel opens the interpreter once, so it works inside containers), replacing an entry of the
# same name that names another interpreter (a distribution's qemu-user-static).
QEMU_DIR=/usr/local/lib/torchstack/qemu
QEMU_VERSION_WANTED="1:10.0"
install_qemu_from_trixie() {
    local work qemu
    work=$(mktemp -d)
    fetch_from_trixie qemu-user "$work/qemu.deb"
    dpkg-deb -x "$work/qemu.deb" "$work/root"
    mkdir -p "$QEMU_DIR"
    for qemu in "${foreign[@]}"; do
        install -m 0755 "$work/root/usr/bin/qemu-$qemu" "$QEMU_DIR/$qemu-binfmt-P" # the -binfmt-P name: argv[0] preserved
        cp "$work/root/usr/share/qemu/binfmt.d/qemu-$qemu.conf" "$QEMU_DIR/qemu-$qemu.conf"
    done
    dpkg-deb -f "$work/qemu.deb" Version > "$QEMU_DIR/version"
    rm -rf "$work"
}

register_qemu() { # arch
    local entry=/proc/sys/fs/binfmt_misc/qemu-$1 interpreter=$QEMU_DIR/$1-binfmt-P line
    if grep -qx "interpreter $interpreter" "$entry" 2> /dev/null && grep -qx enabled "$entry"; then
        return 0
    fi
    [[ -e $entry ]] && echo -1 > "$entry" # another interpreter's entry of the same name
    line=$(sed "s|:/usr/libexec/qemu-binfmt/$1-binfmt-P:|:$interpreter:|" "$QEMU_DIR/qemu-$1.conf")
    [[ $line == *":$interpreter:"* ]] || { echo "setup-host: unexpected binfmt line in $QEMU_DIR/qemu-$1.conf" >&2; exit 1; }
    printf '%s' "$line" > /proc/sys/fs/binfmt_misc/register
    say "registered qemu-$1 ($interpreter) with binfmt_misc"
}

# BuildKit's CLI plugin, for --builder buildx (compiler cache mounts, CA as a secret). Bookworm
# has no docker-buildx package: take trixie's binary (the package's dependencies are Docker's own).
install_buildx_from_trixie() {
    local work
    work=$(mktemp -d)
    fetch_from_trixie docker-buildx "$work/buildx.deb"
    dpkg-deb -x "$work/buildx.deb" "$work/root"
    install -D -m 0755 "$work/root/usr/libexec/docker/cli-plugins/docker-buildx" /usr/libexec/docker/cli-plugins/docker-buildx
    rm -rf "$work"
}

# Podman, as this host lets it run (every setting written says why; none is needed on RHEL):
# - its default open-files and processes limits for containers (nofile 1048576) exceed this
#   host's hard limits, which it cannot raise without CAP_SYS_RESOURCE: runc then refuses every
#   container ("error setting rlimit"). Containers get the host's hard limits instead.
# - with hybrid cgroups (v1 with a v2 "unified" tree) crun cannot run containers: runc can.
# - without a usable fuse-overlayfs a rootless user's storage falls back to vfs, a full copy of
#   the image per layer; kernels from 5.13 on mount overlay for rootless users themselves.
configure_podman() {
    local dropin=/etc/containers/containers.conf.d/torchstack.conf settings=() nofile nproc pid_max
    nofile=$(ulimit -Hn) nproc=$(ulimit -Hu) pid_max=$(cat /proc/sys/kernel/pid_max)
    [[ $nproc == unlimited || $nproc -gt $pid_max ]] && nproc=$pid_max
    if [[ $nofile != unlimited && $nofile -lt 1048576 ]]; then
        settings+=("[containers]" "# this host's hard limits: Podman's defaults (nofile=1048576) exceed them, and runc refuses"
            "default_ulimits = [\"nofile=$nofile:$nofile\", \"nproc=$nproc:$nproc\"]")
    fi
    if [[ -d /sys/fs/cgroup/unified ]] && command -v runc > /dev/null; then
        settings+=("[engine]" "# hybrid cgroups here, where crun cannot run containers" "runtime = \"runc\"")
    fi
    if ((${#settings[@]})); then
        mkdir -p "${dropin%/*}"
        printf '%s\n' "# written by torchstack's scripts/setup-host.sh" "${settings[@]}" > "$dropin.new"
        if ! cmp -s "$dropin.new" "$dropin"; then
            mv "$dropin.new" "$dropin"
            say "Podman: $dropin sets what this host needs (container limits at the host's hard limits; runc with hybrid cgroups)"
        else
            rm "$dropin.new"
        fi
    fi
    if [[ ! -e /etc/containers/storage.conf ]] && [[ $(uname -r | awk -F. '{print ($1 > 5 || ($1 == 5 && $2 >= 13))}') == 1 ]]; then
        printf '%s\n' "# written by torchstack's scripts/setup-host.sh: rootless users mount overlay themselves" \
            "# (kernel 5.13 and later) instead of falling back to vfs; root's folders are Podman's defaults" \
            "[storage]" 'driver = "overlay"' 'runroot = "/run/containers/storage"' \
            'graphroot = "/var/lib/containers/storage"' > /etc/containers/storage.conf
        say "Podman: /etc/containers/storage.conf gives rootless users overlay storage, not vfs"
    fi
}
if [[ -n $podman_wanted ]]; then
    configure_podman
fi

foreign=()
for qemu in aarch64 s390x x86_64; do
    [[ $qemu == "$(uname -m)" ]] || foreign+=("$qemu")
done
qemu_installed() {
    local qemu
    [[ $(cat "$QEMU_DIR/version" 2> /dev/null) == "$QEMU_VERSION_WANTED"* ]] || return 1
    for qemu in "${foreign[@]}"; do [[ -x $QEMU_DIR/$qemu-binfmt-P ]] || return 1; done
}
if qemu_installed; then
    say "qemu-user $(cat "$QEMU_DIR/version") is installed in $QEMU_DIR"
else
    say "installing qemu-user from Debian trixie's package into $QEMU_DIR (signature and checksums verified)"
    install_qemu_from_trixie
fi
if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
    say "mounting binfmt_misc"
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
for qemu in "${foreign[@]}"; do
    register_qemu "$qemu"
done

# cosign, for --sign, `manifest --sign` and `verify` (signatures and attestations, with no
# transparency log): the distribution's package where it has one (trixie); bookworm has none:
# trixie's, which needs only libc6 2.34.
if command -v cosign > /dev/null; then
    say "cosign is installed"
elif apt-cache show cosign > /dev/null 2>&1; then
    say "installing cosign"
    apt_install cosign
else
    say "installing cosign from Debian trixie's cosign package (signature and checksums verified)"
    work=$(mktemp -d)
    fetch_from_trixie cosign "$work/cosign.deb"
    dpkg -i "$work/cosign.deb" > /dev/null
    rm -rf "$work"
fi

if [[ $engine == podman ]]; then
    socket=/run/podman/podman.sock
    if curl -fsS --unix-socket "$socket" http://podman/_ping > /dev/null 2>&1; then
        say "Podman's API service answers on $socket"
    else
        say "starting Podman's API service on $socket (log: /var/log/torchstack-podman.log)"
        if command -v systemctl > /dev/null && systemctl is-system-running > /dev/null 2>&1; then
            systemctl enable --now podman.socket
        else
            mkdir -p "${socket%/*}"
            nohup podman system service --time=0 "unix://$socket" > /var/log/torchstack-podman.log 2>&1 &
        fi
        for _ in $(seq 60); do
            curl -fsS --unix-socket "$socket" http://podman/_ping > /dev/null 2>&1 && break
            sleep 1
        done
        curl -fsS --unix-socket "$socket" http://podman/_ping > /dev/null 2>&1 \
            || { echo "setup-host: Podman's API service did not start; see /var/log/torchstack-podman.log" >&2; exit 1; }
    fi
else
    if docker buildx version > /dev/null 2>&1; then
        say "docker buildx is installed"
    elif apt-cache show docker-buildx > /dev/null 2>&1; then
        say "installing docker-buildx"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-buildx > /dev/null
    else
        say "installing docker buildx from Debian trixie's docker-buildx package (signature and checksums verified)"
        install_buildx_from_trixie
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

fi

if [[ -n $tests ]]; then
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
        apt_install docker-registry
        if [[ -n $ours ]]; then
            rm -f "$policy"
            trap - EXIT
        fi
        if command -v systemctl > /dev/null && systemctl is-system-running > /dev/null 2>&1; then
            systemctl disable --now docker-registry > /dev/null 2>&1 || true
        fi
    fi

    # The tests' current Docker engine, as Docker 29 runs on a new install (upstream's default since
    # 29.0): images in containerd's image store, clients below API 1.44 refused. Debian forky's
    # packages stand in for it, on every host whatever its own engine (Debian 13's Docker 26 keeps
    # images in overlay2, as does a Docker CE upgraded from before 29): docker.io 28.5.2 (dockerd,
    # docker-proxy), docker-cli 28.5.2 (the tests' client of it: Debian 12's 20.10 speaks API 1.41)
    # and containerd 2.1.9 with its runc shim (dockerd starts it as its child, from PATH), which need
    # only libc6 2.34, unpacked into CURRENT_DOCKER. forky's runc needs libc6 2.38: the host's runs
    # the containers. The tests start it on a socket, data root and bridge of their own; not a
    # service: nothing starts it. It builds with BuildKit, so trixie's dockerd, which the tests took
    # before where the host's was older than Docker 23, is needed no longer: its folder is removed.
    CURRENT_DOCKER=/usr/local/lib/torchstack/docker-containerd
    current_installed() {
        local binary
        [[ -s $CURRENT_DOCKER/version ]] || return 1 # written last: the folder is whole
        for binary in dockerd docker containerd containerd-shim-runc-v2; do [[ -x $CURRENT_DOCKER/$binary ]] || return 1; done
    }
    if current_installed; then
        say "the tests' current Docker engine is in $CURRENT_DOCKER ($(paste -sd' ' "$CURRENT_DOCKER/version"))"
    else
        say "installing Debian forky's dockerd, docker CLI and containerd into $CURRENT_DOCKER for the tests (signature and checksums verified)"
        work=$(mktemp -d)
        for package in docker.io docker-cli containerd; do
            fetch_from forky "$package" "$work/$package.deb"
            dpkg-deb -x "$work/$package.deb" "$work/root"
            echo "$package $(dpkg-deb -f "$work/$package.deb" Version)" >> "$work/version"
        done
        rm -rf "$CURRENT_DOCKER"
        mkdir -p "$CURRENT_DOCKER"
        for binary in sbin/dockerd bin/docker bin/containerd bin/containerd-shim-runc-v2; do
            install -m 0755 "$work/root/usr/$binary" "$CURRENT_DOCKER/"
        done
        [[ -e $work/root/usr/sbin/docker-proxy ]] && install -m 0755 "$work/root/usr/sbin/docker-proxy" "$CURRENT_DOCKER/"
        mv "$work/version" "$CURRENT_DOCKER/version"
        rm -rf "$work"
    fi
    if [[ -d /usr/local/lib/torchstack/docker ]]; then
        say "removing /usr/local/lib/torchstack/docker (trixie's dockerd, the tests' former current engine)"
        rm -rf /usr/local/lib/torchstack/docker
    fi
fi

# The tests sign and verify with cosign 3 beside the host's cosign (2.5 on Debian 12 and 13): Debian
# forky's cosign 3.1.1, which needs only libc6 2.34, into a folder of its own that the tests put first
# on PATH. Not the host's cosign: ./build.py uses the cosign first on PATH, whichever it is.
COSIGN3_DIR=/usr/local/lib/torchstack/cosign3
if [[ -n $tests ]]; then
    if [[ -s $COSIGN3_DIR/version && -x $COSIGN3_DIR/cosign ]]; then
        say "the tests' cosign 3 is in $COSIGN3_DIR ($(cat "$COSIGN3_DIR/version"))"
    else
        say "installing Debian forky's cosign into $COSIGN3_DIR for the tests (signature and checksums verified)"
        work=$(mktemp -d)
        fetch_from forky cosign "$work/cosign.deb"
        dpkg-deb -x "$work/cosign.deb" "$work/root"
        rm -rf "$COSIGN3_DIR"
        mkdir -p "$COSIGN3_DIR"
        install -m 0755 "$work/root/usr/bin/cosign" "$COSIGN3_DIR/"
        echo "cosign $(dpkg-deb -f "$work/cosign.deb" Version)" > "$COSIGN3_DIR/version" # last: the folder is whole
        rm -rf "$work"
    fi
fi

# --lazy soci's tools: Debian forky's soci-snapshotter 0.4.1 (soci, which makes and pushes an index,
# and soci-snapshotter-grpc, a node's snapshotter, which the tests run) and containerd 2.1.9
# (containerd, ctr, its runc shim), into LAZY_DIR, where the toolkit looks first. They need only
# libc6 2.34. The index is made in a containerd of the toolkit's own, never the host's.
LAZY_DIR=/usr/local/lib/torchstack/soci
if [[ -n $lazy ]]; then
    if [[ -s $LAZY_DIR/version ]]; then
        say "SOCI's tools are in $LAZY_DIR ($(paste -sd' ' "$LAZY_DIR/version"))"
    else
        say "installing Debian forky's soci-snapshotter and containerd into $LAZY_DIR for --lazy soci (signature and checksums verified)"
        work=$(mktemp -d)
        for package in soci-snapshotter containerd; do
            fetch_from forky "$package" "$work/$package.deb"
            dpkg-deb -x "$work/$package.deb" "$work/root"
            echo "$package $(dpkg-deb -f "$work/$package.deb" Version)" >> "$work/version"
        done
        rm -rf "$LAZY_DIR"
        mkdir -p "$LAZY_DIR"
        for binary in soci soci-snapshotter-grpc containerd ctr containerd-shim-runc-v2; do
            install -m 0755 "$work/root/usr/bin/$binary" "$LAZY_DIR/"
        done
        mv "$work/version" "$LAZY_DIR/version" # last: the folder is whole
        rm -rf "$work"
    fi
fi

setup_venv
say "ready: ./build.py runs in $checkout/.venv"
