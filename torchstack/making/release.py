"""The release image made current before its tag: its Debian suites' upgrades, its records read from it, the security gate.

The final stage's image is built once per content and kept by the engine's cache. What the archive
published since then reaches the release as one more layer on it: the installed packages the
suites hold newer, at those versions. The same list gives the same layer (so a rebuild that
changes nothing gives the same image), and nothing compiled runs again. Then the build-info
and SBOM are written from what the image holds, and no tag is given while the -security suite
has a newer version of an installed package.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from torchstack.base import layout, reproducible, sharing, state
from torchstack.base.errors import ToolkitError
from torchstack.engines.buildjob import BuildJob, BuildResult
from torchstack.engines.engine import BuildRun, Engine
from torchstack.making import archive, sbom
from torchstack.making.render import records_dockerfile, refresh_context
from torchstack.registries import registry
from torchstack.request.plan import Plan

# What the release holds, as one digest: its build-info and every package with its version, Debian's
# and Python's (sbom.inventory). Equal for two builds that ship the same, whatever their files' times.
CONTENT_LABEL = "io.torchstack.content"


class SecurityUpdatesPending(ToolkitError):
    """The release gate: an installed package has a newer version in the -security suite."""


def refresh(build: BuildRun, plan: Plan, image: str) -> tuple[str, list[archive.Upgrade]]:
    """The final stage's `image` with what the plan's suites hold newer (one layer), and those
    upgrades; `image` itself with --no-security-updates or a --base-image of the user's."""
    found = build.engine.image(image)
    if not plan.apt.updates or not plan.base_is_bootstrapped:
        return found.id, []
    try:
        upgrades = archive.newer(archive.installed(build.engine, found.id), plan.apt.suites, plan.arch.debian, plan.apt.keyring)
    except archive.ArchiveUnreachable as exc:
        raise ToolkitError(f"the Debian suites could not be read to bring the image up to date ({exc}); no tag was applied") from None
    context = build.contexts / "refresh"
    with _buildable(build, found.id) as base:
        refresh_context(plan, base, [f"{u.package}={u.available}" for u in upgrades], context)
        result = _build_layer(build, plan, context, {}, reproducible.FILE_EPOCH)
    if upgrades:
        build.note(
            f"torchstack: {archive.describe(upgrades, 'its suites')}: upgraded in the image's last layer"
            + (" (from the engine's cache)" if result.cached else "")
        )
    return result.image_id, upgrades


@contextlib.contextmanager
def _buildable(build: BuildRun, image_id: str) -> Iterator[str]:
    """A name to build FROM the image `image_id`: the ID itself where the builder reads IDs; for
    BuildKit, which reads an ID as a registry's name, a tag of this run's own, removed after the build."""
    if build.builder.builds_from_ids:
        yield image_id
        return
    name = sharing.work_tag()
    build.engine.tag(image_id, name)
    try:
        yield name
    finally:
        build.engine.remove_image(name)


def _build_layer(build: BuildRun, plan: Plan, context: Path, labels: dict[str, str], dated: int) -> BuildResult:
    """One layer on an image of this engine (the context's Dockerfile names it, _buildable), untagged,
    dated by the plan's SOURCE_DATE_EPOCH where the builder takes it (BuildKit), by `dated` where it
    stamps the files' times too (Podman: the refresh's is FILE_EPOCH, as the stages', which its cache
    ignores); named after its context folder in errors."""
    job = BuildJob(
        context,
        None,
        plan.platform,
        labels,
        context.name,
        build.log_path,
        image_date=plan.source_date_epoch,
        file_date=dated,
    )
    return build.builder.build(job)


def gate(engine: Engine, plan: Plan, image: str) -> str:
    """The release gate: no installed package of `image` has a newer version in the plan's
    -security suite, read now. Refuses (no tag) when one has, or when the suite cannot be read."""
    if not plan.apt.updates or not plan.base_is_bootstrapped:
        why = "--no-security-updates" if not plan.apt.updates else "--base-image: its apt sources are its own"
        return f"not checked ({why})"
    suites = plan.apt.security
    try:
        pending = archive.newer(archive.installed(engine, image), suites, plan.arch.debian, plan.apt.keyring)
    except archive.ArchiveUnreachable as exc:
        raise ToolkitError(f"security updates not checked: {exc}; the release tag was not applied") from None
    names = ", ".join(s.name for s in suites)
    if pending:
        raise SecurityUpdatesPending(f"{archive.describe(pending, names)}; the release tag was not applied")
    return f"none pending in {names}"


def confirmed(info: dict, found: dict) -> dict:
    """The build-info with each component's version as the image holds it: Debian's packages by
    dpkg, Python distributions by the venv's metadata; what was compiled into a prefix keeps the
    version of its pinned source."""
    debian = {package: version for package, version, *_ in found["debian"]}
    python = {re.sub(r"[-_.]+", "-", name).lower(): version for name, version, _ in found["python"]}
    components = {}
    for name, component in info["components"].items():
        component = dict(component)
        if component["method"] == "distro":
            component["debian_packages"] = {p: debian.get(p) for p in component.get("packages", ())}
            component["version"] = next(iter(component["debian_packages"].values()), None)
        elif name in python:
            component["version"] = python[name]
        components[name] = component
    return {**info, "components": components}


def add_records(build: BuildRun, plan: Plan, image: str) -> tuple[str, Path]:
    """`image` with its records as one more layer: the build-info (label and file) with the
    versions it holds, its SBOM (sbom.SBOM), and the digest of both (CONTENT_LABEL). The release
    image's ID, untagged until its checks pass, and the SBOM's copy next to the build log. Made
    once per image ID; the layer comes from the engine's cache when nothing changed."""
    context = build.contexts / "sbom"
    found = build.engine.image(image)
    # Dated by the plan: an image ID of Podman's, dated FILE_EPOCH, is made for many SOURCE_DATE_EPOCHs.
    # The engine's kind and image store go into its build-info: another store makes other layers of the
    # same steps, so a rebuild must run on the same one (rebuild.py).
    made_by = build.engine.layers_made_by()
    key = "-".join([found.id.removeprefix("sha256:"), str(plan.source_date_epoch), made_by["kind"], made_by["store"]])
    cached = state.state_dir() / "sbom" / f"{key}-records.json"
    if cached.is_file():
        info, text, content = json.loads(cached.read_text()).values()
    else:
        inventory = sbom.inventory(build.engine, found.id, plan.platform)
        info = {**confirmed(json.loads(found.labels[sbom.BUILD_INFO_LABEL]), inventory), "engine": made_by}
        text = sbom.document(inventory, info, datetime.fromtimestamp(plan.source_date_epoch, timezone.utc))
        content = "sha256:" + hashlib.sha256(json.dumps({"info": info, "inventory": inventory}, sort_keys=True).encode()).hexdigest()
        sbom.write(json.dumps({"info": info, "sbom": text, "content": content}), cached)
    described = sbom.summary(text)
    context.mkdir(parents=True, exist_ok=True)
    (context / "records").mkdir(exist_ok=True)
    (context / "records" / "sbom.cdx.json").write_text(text)
    (context / "records" / "build-info.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    labels = {sbom.BUILD_INFO_LABEL: json.dumps(info, sort_keys=True), CONTENT_LABEL: content}
    with _buildable(build, found.id) as base:
        (context / "Dockerfile").write_text(records_dockerfile(plan, base, sbom.SBOM))
        reproducible.set_times(context)
        result = _build_layer(build, plan, context, labels, plan.source_date_epoch)
    path = sbom.write(text, build.log_path.with_suffix(".sbom.cdx.json"))
    build.note(
        f"torchstack: SBOM ({described['format']}: {described['python_packages']} Python packages, "
        f"{described['debian_packages']} Debian packages) at {sbom.SBOM} in the image, and {path}"
    )
    return result.image_id, path


def published(remote: str, content: str | None) -> str | None:
    """The digest of the registry's `remote` tag where it is a release with this content
    (CONTENT_LABEL), else None: a rebuild that changed nothing, which is neither pushed nor signed
    again. The content, not the image ID: a new CI runner installs the same packages again into files
    of other times. The digest is the manifest's that was read: the tag read again could name another."""
    reference = registry.parse(remote)
    try:
        where = registry.Registry(reference.host)
        digest, manifest = where.manifest(reference)
        labels = where.config(reference.repository, manifest).get("config", {}).get("Labels") or {} if "config" in manifest else {}
    except registry.RegistryProblem:
        return None
    return digest if content is not None and labels.get(CONTENT_LABEL) == content else None


def probe(engine: Engine, plan: Plan, image: str) -> dict:
    """What the checked image finds at run time on this machine (scripts/probe.py): KleidiAI in
    torch, NNPA through libzdnn. {} when the plan names no probe."""
    if not plan.probe_args:
        return {}
    entrypoint = ["python3", f"{layout.TOOLKIT_DIR}/probe.py", "--json"]
    out = engine.output_of(image, list(plan.probe_args), entrypoint=entrypoint, platform=plan.platform, network_mode="none")
    return json.loads(out.decode().strip().splitlines()[-1])
