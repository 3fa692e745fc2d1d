"""A request turned into a plan, with the catalog's data."""

from __future__ import annotations

import dataclasses
import shlex
from datetime import datetime, timezone

from torchstack.base import reproducible
from torchstack.base.errors import UsageProblem
from torchstack.catalog import torch_choice
from torchstack.catalog.model import Catalog, Distribution, Stage
from torchstack.catalog.recipes import RecipeInputs, exports_of, pip_requirements, script_inputs
from torchstack.engines.connection import mounts_in_steps
from torchstack.request import host, tags
from torchstack.request.metadata import stage_image, tag_variants, toolkit_revision
from torchstack.request.plan import (
    RELEASE_STAGE,
    AppRequirements,
    AptSources,
    ComponentPlan,
    Payload,
    Plan,
    Request,
    ShippedLibraries,
    Snapshot,
    StagePlan,
    Suite,
)
from torchstack.request.selection import Selection, select

GIB_PER_TORCH_JOB = 3.0
GIB_PER_JOB = 1.0
SNAPSHOT_ARCHIVE = "http://snapshot.debian.org"  # Debian's archive at any time since 2005; apt checks its signatures


def _jobs(asked: int | None, mem: float, methods: dict[str, str]) -> tuple[int, int, str]:
    """Parallel compile jobs, and for PyTorch's: --jobs, else this host's cores; never more than
    memory allows (GIB_PER_JOB, GIB_PER_TORCH_JOB a job), --jobs included: an out-of-memory kill
    an hour into a build costs more than fewer jobs. The note says what memory took off --jobs."""
    cpu_count = asked or host.cores()
    jobs, torch_jobs = (host.default_jobs(per_job, cpu_count, mem) for per_job in (GIB_PER_JOB, GIB_PER_TORCH_JOB))
    compiles_torch = methods.get("torch", "source") == "source"
    cut = []
    if compiles_torch and torch_jobs < cpu_count:
        cut.append(f"{torch_jobs} for PyTorch ({GIB_PER_TORCH_JOB:g} GiB a job)")
    if jobs < cpu_count:
        cut.append(f"{jobs} for the others ({GIB_PER_JOB:g} GiB a job)")
    note = f"--jobs {asked} is more than {mem:.1f} GiB of memory allows: {', '.join(cut)}" if asked and cut else ""
    return jobs, torch_jobs, note


def make_plan(catalog: Catalog, request: Request) -> Plan:
    now = request.now or datetime.now(timezone.utc)
    this_host = host.host_arch()
    selection = select(catalog, request, this_host)

    release = tags.check_release(request.release or tags.default_release(now))
    repository = tags.check_repository(request.repository)
    app = AppRequirements.read(request.requirements) if request.requirements else None
    if app and selection.stage != RELEASE_STAGE:
        raise UsageProblem(f"--requirements installs into the final image: it needs --build-type full, not {selection.stage}")
    variants = (*tag_variants(catalog, selection, request), *([app.tag_variant] if app else []))
    release_tag = (
        tags.check_tag(request.tag) if request.tag else tags.release_tag(release, selection.torch_version, selection.backend.name, variants)
    )

    if request.source_date_epoch is not None:
        epoch, epoch_origin = request.source_date_epoch, "given"
    else:
        epoch, epoch_origin = reproducible.source_date_epoch(toolkit_revision())
    jobs, torch_jobs, jobs_note = _jobs(request.jobs, request.memory_gib or host.memory_gib(), selection.methods)
    components = _component_plans(catalog, selection, {**request.versions, "torch": selection.torch_version}, jobs, torch_jobs)
    apt = _apt_sources(selection.distribution, request, now)
    base_image = request.base_image or _os_image(selection, apt)
    stages = _stage_plans(catalog, selection.stage, components, base_image, f"{repository}-{{stage}}:{release_tag}")

    plan = Plan(
        arch=selection.arch,
        distribution=selection.distribution,
        distribution_note=selection.distribution_note,
        backend=selection.backend,
        target=selection.target,
        target_note=selection.target_note,
        host_arch=this_host,
        release=release,
        torch_version=selection.torch_version,
        torch_note=selection.torch_note,
        release_tag=release_tag,
        repository=repository,
        build_type=selection.stage,
        jobs=jobs,
        torch_jobs=torch_jobs,
        jobs_note=jobs_note,
        base_image=base_image,
        base_is_bootstrapped=request.base_image is None,
        builder=selection.builder,
        runtime=selection.runtime,
        torch_wheel=selection.torch_wheel,
        torch_wheel_file=selection.torch_wheel_file,
        components=components,
        apt=apt,
        stages=stages,
        payload=_payload(selection, components),
        plugins=selection.plugins,
        requirements=app,
        source_date_epoch=epoch,
        epoch_origin=epoch_origin,
    )
    return _named_by_content(catalog, plan)


def _named_by_content(catalog: Catalog, plan: Plan) -> Plan:
    """Each earlier stage's image named by what it holds (metadata.stage_image), parents first, so
    that a child's identity includes its parent's. The release stage keeps its release name."""
    images: dict[str, str] = {}
    stages = []
    for stage in plan.stages:
        parent = catalog.stage(stage.name).parent
        stage = dataclasses.replace(
            stage,
            parent_image=images[parent] if parent else stage.parent_image,
            copies={name: images[name] for name in stage.copies},
        )
        if stage.name != RELEASE_STAGE:
            stage = dataclasses.replace(stage, image=stage_image(plan, stage))
        images[stage.name] = stage.image
        stages.append(stage)
    return dataclasses.replace(plan, stages=tuple(stages))


def _version(component, asked: str | None, torch_version: str, method: str) -> str:
    """The version to build: the one asked for, else the default; for a component compiled at the
    version paired with torch (its pins name torch lines), that one, and no other."""
    if method != "source" or not component.pairs_with_torch:
        return asked or component.default_version
    paired = component.paired_with(torch_version)
    pairs = "; ".join(f"{p.version} for torch {', '.join(p.torch)}" for p in component.versions if p.torch)
    if paired is None:
        raise UsageProblem(
            f"no pinned {component.name} pairs with torch {torch_version} (pinned: {pairs}): "
            "add the version upstream builds it with to torchstack/data/components.yaml"
        )
    if asked and asked != paired.version:
        raise UsageProblem(
            f"{component.name} {asked} does not pair with torch {torch_version}: upstream builds it with "
            f"{component.name} {paired.version} ({paired.torch_from}); pinned: {pairs}"
        )
    return paired.version


def _component_plans(
    catalog: Catalog, selection: Selection, versions: dict[str, str], jobs: int, torch_jobs: int
) -> tuple[ComponentPlan, ...]:
    """Each component the backend needs, in its order: version, source or alternative, script inputs."""
    prefixes: dict[str, str | None] = {}
    for name, method in selection.methods.items():
        component = catalog.components[name]
        alternative = component.alternatives.get(method)
        prefixes[name] = alternative.prefix if alternative and alternative.prefix else component.prefix
    return tuple(
        _component_plan(catalog, selection, name, method, versions, jobs, torch_jobs, prefixes)
        for name, method in selection.methods.items()
    )


def _buildable_version(component, given: str | None, selection: Selection, method: str):
    """The component's version and, when compiled, its pinned source: refused where it cannot be built."""
    name = component.name
    version = _version(component, given, selection.torch_version, method)
    source = component.source(version) if method == "source" else None
    if method == "source" and source is None:
        pinned = ", ".join(p.version for p in component.versions)
        raise UsageProblem(
            f"{name} {version} has no pinned, checksummed source (torchstack/data/components.yaml); "
            f"pinned: {pinned}" + ("; or use --torch-from wheel" if name == "torch" else "")
        )
    tuning = getattr(selection.target, component.tuning) if component.tuning else None
    problem = component.refuses(version, tuple(str(v) for v in tuning.model_dump().values()) if tuning else ())
    if method == "source" and problem:
        raise UsageProblem(problem)
    return version, source


def _component_plan(
    catalog: Catalog,
    selection: Selection,
    name: str,
    method: str,
    versions: dict[str, str],
    jobs: int,
    torch_jobs: int,
    prefixes: dict[str, str | None],
) -> ComponentPlan:
    """One component's part: its version (refused where it cannot be built), its script inputs, what ships."""
    component = catalog.components[name]
    version, source = _buildable_version(component, versions.get(name), selection, method)
    pins = torch_choice.catalogued(catalog, selection.torch_version).runtime_requirements if name == "torch" else ()
    prefix = prefixes[name]
    compiled = method == "source"
    alternative = component.alternatives.get(method)
    inputs = RecipeInputs(
        component=component,
        method=method,
        version=version,
        prefix=prefix,
        source=source,
        target=selection.target,
        arch=selection.arch,
        backend=selection.backend,
        jobs=jobs,
        torch_jobs=torch_jobs,
        torch_version=selection.torch_version,
        cache_mount=mounts_in_steps(selection.builder),
        wheel_name=selection.torch_wheel_file.name if selection.torch_wheel_file else "torch.whl",
        exported={
            k: v for used in component.uses if used in prefixes for k, v in exports_of(catalog.components[used], prefixes[used]).items()
        },
        runtime_requirements=pins,
    )
    return ComponentPlan(
        name=name,
        method=method,
        version=version,
        stage=component.stage,
        script=component.script,
        prefix=prefix,
        env=script_inputs(inputs),
        source=source,
        build_packages=(
            component.build_packages + (("ccache",) if inputs.ccache else ())
            if compiled
            else (alternative.build_packages if alternative else ())
        ),
        runtime_packages=component.runtime_packages if compiled else (alternative.runtime_packages if alternative else ()),
        build_requirements=component.build_requirements if compiled else (),
        runtime_requirements=pins,
        unread=component.unread,
        downloads=pip_requirements(inputs),
        ships=_shipped(name, prefix, component.ships) if compiled else (),
        host_runs=component.host_runs if compiled else (),
    )


def _shipped(component: str, prefix: str | None, patterns: tuple[str, ...]) -> tuple[ShippedLibraries, ...]:
    """A compiled component's `ships` patterns, grouped by folder under its prefix."""
    folders: dict[str, list[str]] = {}
    for pattern in patterns:
        folder, glob = pattern.rsplit("/", 1)
        folders.setdefault(f"{prefix}/{folder}", []).append(glob)
    return tuple(ShippedLibraries(component, folder, tuple(globs)) for folder, globs in folders.items())


def _payload(selection: Selection, components: tuple[ComponentPlan, ...]) -> Payload:
    """What the final image carries: every planned component's shipped libraries and Debian
    packages, the runtime settings' packages, what torch.compile needs and the installer (runtime
    "full"), and the pins torch installs at."""
    packages = {p for c in components for p in c.runtime_packages}
    packages |= {*selection.arch.runtime.packages, *selection.backend.runtime.packages}
    if selection.runtime == "full":
        packages |= {p.format(python=selection.distribution.python) for p in selection.distribution.compile_packages}
        packages |= set(selection.distribution.installer_packages)
    return Payload(
        libraries=tuple(lib for c in components for lib in c.ships),
        packages=tuple(sorted(packages)),
        python_constraints=tuple(
            sorted({*(r for c in components for r in c.runtime_requirements), *(r for p in selection.plugins for r in p.requirements)})
        ),
        settings={
            **selection.arch.runtime.env,
            **selection.backend.runtime.env,
            **(selection.distribution.compile_env if selection.runtime == "full" else {}),
        },
        installer=selection.runtime == "full",
        torch_constraints=tuple(sorted({r for c in components for r in c.runtime_requirements})),
        unread_files=tuple(path for c in components for path in c.unread),
        unread_packages=selection.distribution.unread_paths,
    )


def _stage_plans(
    catalog: Catalog, wanted: str, components: tuple[ComponentPlan, ...], base_image: str, image_name: str
) -> tuple[StagePlan, ...]:
    """The requested stage and everything it needs, in table order."""

    def upstream(stage: Stage) -> frozenset[str]:
        deps = (catalog.stage(d) for d in (stage.parent, *stage.copies_from) if d)
        return frozenset({stage.name}).union(*(upstream(d) for d in deps))

    needed = upstream(catalog.stage(wanted))
    images = {s.name: image_name.format(stage=s.name) for s in catalog.stages}
    return tuple(
        StagePlan(
            name=s.name,
            template=s.template,
            description=s.description,
            image=images[s.name],
            parent_image=images[s.parent] if s.parent else base_image,
            copies={dep: images[dep] for dep in s.copies_from},
            components=tuple(c for c in components if c.stage == s.name),
            packages=s.packages,
            size_budget_mib=s.size_budget_mib,
            upstream=upstream(s),
        )
        for s in catalog.stages
        if s.name in needed
    )


def env_line(env: dict[str, str]) -> str:
    """KEY=value pairs, shell-quoted, as they appear before a script in a RUN line."""
    return " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())


def _os_image(selection: Selection, apt: AptSources) -> str:
    """The bootstrapped OS image's name: another for Debian as released (--no-security-updates), and for
    Debian as it was at a --debian-snapshot, so that no stage of one is taken for one of the other."""
    name = f"torchstack-os:{selection.distribution.name}-{selection.arch.debian}{'' if apt.updates else '-as-released'}"
    return name + (f"-{apt.snapshot.timestamp}" if apt.snapshot else "")


def _apt_sources(distribution: Distribution, request: Request, now: datetime) -> AptSources:
    """The suites the build takes: the release, its -updates and -security suites (each from the
    user's mirror, else Debian's), or the release alone with --no-security-updates; with
    --debian-snapshot, those suites as they were then, the live ones kept for the release image to name."""
    mirror = (request.debian_mirror or distribution.mirror).rstrip("/")
    name = distribution.name
    if not request.security_updates:
        if request.security_mirror:
            raise UsageProblem("--security-mirror names the -security suite that --no-security-updates leaves out: give one of them")
        suites = (Suite(mirror, name, "release"),)
    else:
        security = (request.security_mirror or distribution.security_mirror).rstrip("/")
        suites = (
            Suite(mirror, name, "release"),
            Suite(mirror, f"{name}-updates", "updates"),
            Suite(security, f"{name}-security", "security"),
        )
    if not request.debian_snapshot:
        if request.snapshot_archive:
            raise UsageProblem("--snapshot-archive says who serves --debian-snapshot's state of the archive: give --debian-snapshot too")
        return AptSources(suites, request.archive_keyring)
    if request.base_image:
        raise UsageProblem("--debian-snapshot bootstraps Debian as it was then: it cannot apply to a --base-image, which has its own")
    snapshot = Snapshot(Snapshot.timestamp_of(request.debian_snapshot, now), (request.snapshot_archive or SNAPSHOT_ARCHIVE).rstrip("/"))
    frozen = tuple(dataclasses.replace(s, url=snapshot.url(s.kind), frozen=True) for s in suites)
    return AptSources(frozen, request.archive_keyring, snapshot, kept=suites)
