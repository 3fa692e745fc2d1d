#!/bin/sh
# The final image's entry point. It refuses to start on a CPU that lacks a feature the image's
# code was built to use (instead of dying of SIGILL later), greets an interactive user with what
# the image is and how it is set up, then runs the command. What it checks and says comes from
# the build: /opt/torchstack/entrypoint.conf. Runs in the image, not on the build host.
set -eu
# shellcheck source=/dev/null
. "$(dirname "$(readlink -f "$0")")/entrypoint.conf"

# Which of the features named in $1 the CPU description lacks. A description without the field
# this architecture lists its features in (an emulated CPU shows the host's) proves nothing: none.
cpu_lacks() {
    line=$(grep -m1 "^${TORCHSTACK_CPUINFO_FIELD}[[:space:]]*:" "${TORCHSTACK_CPUINFO:-/proc/cpuinfo}" 2> /dev/null) || return 0
    have=" ${line#*:} "
    for feature in $1; do
        case "$have" in *" $feature "*) ;; *) printf ' %s' "$feature" ;; esac
    done
}

if [ "${TORCHSTACK_SKIP_CPU_CHECK:-}" != 1 ]; then
    lacking=$(cpu_lacks "$TORCHSTACK_CPU_FEATURES")
    if [ -n "$lacking" ]; then
        echo "torchstack: this CPU lacks${lacking}, which this image uses (built for $TORCHSTACK_TARGET," \
            "$TORCHSTACK_FLAG): it would die of an illegal instruction. Run an image built for this CPU" \
            "(a generic one runs on any $TORCHSTACK_ARCH CPU), or set TORCHSTACK_SKIP_CPU_CHECK=1 to start anyway." >&2
        exit 1
    fi
fi

if [ -t 0 ] && [ -t 1 ]; then
    printf '%s\n' "$TORCHSTACK_BANNER" >&2
    for name in $TORCHSTACK_DEFAULTS; do
        eval "value=\${$name:-}"
        printf '  %s=%s\n' "$name" "${value:-(turned off)}" >&2
    done
    # What the backend's fast path wants from the CPU (the image runs without it), and what
    # this machine has, as the libraries that know it say (probe.py).
    if [ -n "$TORCHSTACK_CPU_WANTS" ]; then
        wanting=$(cpu_lacks "$TORCHSTACK_CPU_WANTS")
        if [ -n "$wanting" ]; then
            printf 'this CPU lacks%s: %s\n' "$wanting" "$TORCHSTACK_CPU_WANTS_WHY" >&2
        else
            printf 'this CPU has %s, which the backend wants\n' "$TORCHSTACK_CPU_WANTS" >&2
        fi
    fi
    # What the start-up hook every python3 here runs decided: threads within the CPU limit, and
    # where torch.compile keeps its kernels (scripts/torchstack_startup.py).
    python3 -m torchstack_startup >&2 || true
    if [ -n "$TORCHSTACK_PROBES" ]; then
        # shellcheck disable=SC2086 # one word per probe
        python3 "$(dirname "$(readlink -f "$0")")/probe.py" $TORCHSTACK_PROBES >&2 || true
    fi
fi
exec "$@"
