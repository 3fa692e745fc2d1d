"""The base OS image, made here from the Debian archive with mmdebstrap: no registry needed."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import docker

from torchstack.archive import DEBIAN_KEYRING
from torchstack.engine import image_exists
from torchstack.errors import ToolkitError
from torchstack.plan import Plan

# As Debian's own slim images: no manuals, translations or documentation, but the licences.
SLIM_DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/info/*",
)
# As Debian's own container images too: no translated package descriptions in apt's indexes. They
# stay in the image's apt configuration (mmdebstrap's 99mmdebstrap), so every stage's
# `apt-get update` fetches and parses about 40% less (the Translation-en index of bookworm's main
# is 32 MB beside its 49 MB package list; under qemu an update then takes 11 s of CPU, not 16).
SLIM_APT_OPTIONS = ('Acquire::Languages "none"',)
DOCKERFILE = """FROM scratch
ADD rootfs.tar /
CMD ["bash"]
"""


def ensure_base_image(client: docker.DockerClient, plan: Plan, force: bool = False) -> str:
    """The plan's base OS image: present, pulled (a user's --base-image), or bootstrapped here
    (the caller has made sure, with prerequisites.require, that this host can) from the plan's
    suites, as Debian's own images are: the release, its -updates and -security suites, which its
    apt sources keep naming."""
    image = plan.base_image
    if not force and image_exists(client, image):
        return image
    if not plan.base_is_bootstrapped:
        try:
            client.images.pull(image, platform=plan.platform)
            return image
        except docker.errors.APIError as exc:
            raise ToolkitError(
                f"base image {image} is not here and cannot be pulled ({exc.explanation or exc}); "
                "leave out --base-image to bootstrap Debian from its archive instead"
            ) from None
    distribution = plan.distribution
    with tempfile.TemporaryDirectory(prefix="torchstack-rootfs-") as work:
        rootfs = Path(work) / "rootfs.tar"
        command = [
            "mmdebstrap",
            "--variant=minbase",
            f"--architectures={plan.arch.debian}",
            "--quiet",
            *(f"--dpkgopt={option}" for option in SLIM_DPKG_OPTIONS),
            *(f"--aptopt={option}" for option in SLIM_APT_OPTIONS),
            *(f"--keyring={k}" for k in ((DEBIAN_KEYRING, plan.apt.keyring) if plan.apt.keyring else ())),
            distribution.name,
            str(rootfs),
            *(suite.line for suite in plan.apt.suites),
        ]
        # A fixed SOURCE_DATE_EPOCH makes the tarball reproducible for the same package versions.
        env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "1704067200")}
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise ToolkitError(f"mmdebstrap {distribution.name} {plan.arch.debian} failed: {last}")
        (Path(work) / "Dockerfile").write_text(DOCKERFILE)
        labels = {
            "org.opencontainers.image.title": f"Debian {distribution.name} minbase ({plan.arch.debian})",
            "org.opencontainers.image.source": plan.apt.suites[0].url,
            "io.torchstack.apt-suites": " ".join(suite.name for suite in plan.apt.suites),
        }
        for chunk in client.api.build(path=work, tag=image, platform=plan.platform, labels=labels, rm=True, decode=True):
            if "error" in chunk:
                raise ToolkitError(f"loading the bootstrapped {distribution.name} rootfs failed: {chunk['error'].strip()}")
    return image
