"""Image names: the release tag, with what sets two builds apart in it, here or in a registry."""

from __future__ import annotations

import re
from datetime import datetime

from torchstack.base.errors import UsageProblem
from torchstack.request.plan import RELEASE_STAGE, Plan, StagePlan

_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_RELEASE = re.compile(r"r(\d\d)\.(0[1-9]|1[0-2])")
_REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


def default_release(now: datetime) -> str:
    return f"r{now:%y}.{now:%m}"


def check_release(release: str) -> str:
    if not _RELEASE.fullmatch(release):
        raise UsageProblem(f"--release {release!r}: expected rYY.MM, for example r26.11")
    return release


def check_repository(repository: str) -> str:
    first, _, rest = repository.partition("/")
    # A leading registry host (with a dot, a port or "localhost") may precede the path.
    path = rest if rest and (("." in first) or (":" in first) or first == "localhost") else repository
    if not _REPOSITORY.fullmatch(path):
        raise UsageProblem(f"--repository {repository!r}: not a valid image name (lowercase, digits, . _ - /)")
    return repository


def check_tag(tag: str) -> str:
    if not _TAG.fullmatch(tag):
        raise UsageProblem(f"--tag {tag!r}: a Docker tag is 1-128 of A-Z a-z 0-9 _ . - and cannot start with . or -")
    return tag


def tag_safe(text: str) -> str:
    """A version such as 2.13.0+cpu as a tag part: anything a tag cannot hold becomes '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)


def tag_version(version: str) -> str:
    """A torch version as the tag names it. Every image here is a CPU build, so PyTorch's `+cpu`
    local label is left out (it stays in the labels and the build-info): `-cpu-` next to the
    backend would read as part of it. Any other local label tells two builds apart and is kept,
    joined with a dot so it stays with the version: 2.13.0+git1a2b -> 2.13.0.git1a2b."""
    public, _, local = version.partition("+")
    return tag_safe(public if local in ("", "cpu") else f"{public}.{local}")


def release_tag(release: str, torch_version: str, backend: str, variants: tuple[str, ...] = ()) -> str:
    """r<yy>.<mm>-torch-<ver>-<backend>[-<variant>...]: e.g. r26.11-torch-2.13.0-onednn-acl.

    Variants name what sets this build apart from the default one of the same backend:
    a non-generic target, the architecture when the backend has several, and every
    component not compiled from its pinned source (e.g. torch.wheel, openblas.distro).
    """
    tag = "-".join([release, "torch", tag_version(torch_version), backend, *variants])
    if len(tag) > 128:  # many plugins or variants: Docker stops at 128 characters
        raise UsageProblem(f"the release tag {tag} is {len(tag)} characters, more than Docker's 128: name the image with --tag")
    return check_tag(tag)


def check_registry(registry: str, option: str = "--registry") -> str:
    """HOST[:PORT][/NAMESPACE], where HOST names a registry (a dot, a port, or localhost)."""
    host, _, namespace = registry.strip("/").partition("/")
    looks_like_host = "." in host or ":" in host or host == "localhost"
    if not looks_like_host or (namespace and not re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*", namespace)):
        raise UsageProblem(f"{option} {registry!r}: expected HOST[:PORT]/NAMESPACE, for example ghcr.io/acme or localhost:5000/ml")
    return registry.strip("/")


def remote_name(registry: str, local: str) -> str:
    """The name `local` (repository:tag, without a registry) gets in `registry`."""
    name = f"{registry}/{local}"
    check_repository(name.rpartition(":")[0])
    return name


def pushed_as(plan: Plan, stage: StagePlan) -> str:
    """The local name under which --push sends a stage's image, and so the name another host's
    --cache-from looks for: its own, but for the final stage the release image's (the final
    stage plus its SBOM layer: every step of the final stage is in it)."""
    return plan.final_image if stage.name == RELEASE_STAGE else stage.image


def wanted(plan: Plan, registry: str | None, push_stages: bool, checked: bool) -> list[tuple[str, str]]:
    """(local name, name in the registry) of each image a build with --push sends: the release
    image (or the top stage, when the build stops earlier), and with --push-stages the OS image
    bootstrapped here and every stage image under its content name, so that another host's build
    with --cache-from starts from them."""
    if not registry:
        raise UsageProblem("--push needs --registry HOST[:PORT]/NAMESPACE, for example --registry ghcr.io/acme")
    if not checked:
        raise UsageProblem("--push sends only checked images: drop --no-test")
    registry = check_registry(registry)
    names = []
    if push_stages:
        names += [plan.base_image] if plan.base_is_bootstrapped else []
        names += [pushed_as(plan, stage) for stage in plan.stages]
    names.append(plan.top_image)  # a build that stops early: its top stage under the release tag too
    return [(name, remote_name(registry, name)) for name in dict.fromkeys(names)]
