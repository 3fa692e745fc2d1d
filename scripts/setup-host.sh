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

missing=()
command -v dockerd > /dev/null || missing+=(docker.io)
command -v mmdebstrap > /dev/null || missing+=(mmdebstrap)
[[ -e /usr/bin/qemu-aarch64-static ]] || missing+=(qemu-user-static)
command -v update-binfmts > /dev/null || missing+=(binfmt-support)
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
else
    say "docker.io, mmdebstrap, qemu-user-static and binfmt-support are installed"
fi

if ! mountpoint -q /proc/sys/fs/binfmt_misc; then
    say "mounting binfmt_misc"
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
    say "registering qemu binfmt handlers"
    update-binfmts --enable
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
