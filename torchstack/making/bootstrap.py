"""The base OS image, made here from the Debian archive with mmdebstrap: no registry needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from torchstack.base.errors import BuildFailed, ToolkitError
from torchstack.base.layout import APT_LEFTOVERS
from torchstack.base.reproducible import FILE_EPOCH, set_times
from torchstack.engines.buildjob import BuildJob
from torchstack.engines.engine import Builder
from torchstack.making.archive import DEBIAN_KEYRING
from torchstack.request.plan import Plan

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
APT_CACHE = ("/var/cache/apt/*.bin", "/var/cache/apt/archives/*.deb")  # what mmdebstrap's own apt cleanup removes
DOCKERFILE = """FROM scratch
ADD rootfs.tar /
CMD ["bash"]
"""


def ensure_base_image(builder: Builder, plan: Plan, force: bool = False, scratch: Path | None = None) -> str:
    """The plan's base OS image: present, pulled (a user's --base-image), or bootstrapped here
    (the caller has made sure, with prerequisites.require, that this host can) from the plan's
    suites, as Debian's own images are: the release, its -updates and -security suites, which its
    apt sources keep naming. `scratch`: where the root file system is made (the run's private
    folder, which the next run removes if this one is killed)."""
    image, engine = plan.base_image, builder.engine
    if not force and engine.has_image(image):
        return image
    if not plan.base_is_bootstrapped:
        problem = engine.pull(image, platform=plan.platform)
        if problem is None:
            return image
        raise ToolkitError(
            f"base image {image} is not here and cannot be pulled ({problem}); "
            "leave out --base-image to bootstrap Debian from its archive instead"
        )
    with tempfile.TemporaryDirectory(prefix="torchstack-rootfs-", dir=scratch) as work:
        _mmdebstrap(plan, Path(work) / "rootfs.tar")
        _load(builder, plan, Path(work))
    return image


def _mmdebstrap(plan: Plan, rootfs: Path) -> None:
    """The plan's Debian, minbase, as a tarball: the same for the same package versions, its files no
    newer than the time every later step gives its own (reproducible.FILE_EPOCH), so that no step's
    clamp touches them."""
    command = [
        "mmdebstrap",
        "--variant=minbase",
        f"--architectures={plan.arch.debian}",
        "--quiet",
        *(f"--dpkgopt={option}" for option in SLIM_DPKG_OPTIONS),
        *(f"--aptopt={option}" for option in SLIM_APT_OPTIONS),
        *(f"--keyring={k}" for k in ((DEBIAN_KEYRING, plan.apt.keyring) if plan.apt.keyring else ())),
        # apt's own cleanup would make its lists' lock again: this hook cleans instead, as each stage's steps do.
        "--skip=cleanup/apt",
        "--customize-hook=rm -rf " + " ".join(f'"$1"{path}' for path in (*APT_LEFTOVERS, *APT_CACHE)),
        *_trusting(plan, rootfs.parent),
        plan.distribution.name,
        str(rootfs),
        *(suite.line for suite in plan.apt.suites),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "SOURCE_DATE_EPOCH": str(FILE_EPOCH)})
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolkitError(f"mmdebstrap {plan.distribution.name} {plan.arch.debian} failed: {last}")


def _trusting(plan: Plan, work: Path) -> tuple[str, ...]:
    """mmdebstrap's hooks that leave the site's key (--archive-keyring) where apt in the image reads it:
    mmdebstrap's own --keyring serves its bootstrap alone, and every stage's apt-get update needs the key."""
    name = plan.apt.keyring_name
    if not name:
        return ()
    shutil.copyfile(plan.apt.keyring, work / name)  # a path without spaces: mmdebstrap's upload splits on them
    inside = f"/etc/apt/trusted.gpg.d/{name}"
    return (f"--customize-hook=upload {work / name} {inside}", f'--customize-hook=chmod 644 "$1{inside}"')


def _load(builder: Builder, plan: Plan, work: Path) -> None:
    """The tarball in `work` as the plan's base image, dated FILE_EPOCH as its files (the same
    tarball, the same image), by the builder that builds the stages."""
    (work / "Dockerfile").write_text(DOCKERFILE)
    labels = {
        "org.opencontainers.image.title": f"Debian {plan.distribution.name} minbase ({plan.arch.debian})",
        "org.opencontainers.image.source": plan.apt.suites[0].url,
        "io.torchstack.apt-suites": " ".join(suite.name for suite in plan.apt.suites),
    }
    failed = f"loading the bootstrapped {plan.distribution.name} rootfs failed"
    set_times(work)
    job = BuildJob(work, plan.base_image, plan.platform, labels, "os", work, image_date=FILE_EPOCH, file_date=FILE_EPOCH)
    try:
        builder.build(job)
    except BuildFailed as exc:
        raise ToolkitError(f"{failed}: {str(exc).splitlines()[0]}") from None
