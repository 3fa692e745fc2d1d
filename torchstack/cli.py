"""The command line, from arguments to exit status: build (the default), plan, render, list, matrix, fetch, bootstrap, test."""

from __future__ import annotations

import functools
import sys
import tempfile
from pathlib import Path

import click
import docker.errors
from click.core import ParameterSource

from torchstack import __version__, sharing, tags
from torchstack.connection import ENGINES, choose, connect, refuse_for
from torchstack.errors import DataError, ToolkitError, UsageProblem
from torchstack.model import Catalog, load_catalog
from torchstack.plan import Plan, Request
from torchstack.planner import env_line, make_plan
from torchstack.selection import BUILD_TYPES, BUILDERS, RUNTIMES
from torchstack.sharing import Terminated
from torchstack.sources import state_dir
from torchstack.wheels import pip_index_settings


def _parse_pins(values: tuple[str, ...]) -> dict[str, str]:
    pins = {}
    for value in values:
        name, sep, version = value.partition("=")
        if not sep or not name or not version:
            raise click.BadParameter(f"{value!r}: expected COMPONENT=VERSION, e.g. openblas=0.3.28")
        pins[name] = version
    return pins


engine_option = click.option(
    "--engine", type=click.Choice(ENGINES), default="auto", show_default=True, envvar="TORCHSTACK_ENGINE",
    help="The container engine: docker, or podman (its API service: `podman system service`). auto: the one "
    "DOCKER_HOST (or Podman's CONTAINER_HOST) names, else Docker's socket if present, else Podman's. "
    "Default: $TORCHSTACK_ENGINE.")


def plan_options(catalog: Catalog):
    """The options that describe a build, shared by build, plan, render and fetch."""
    with_alternatives = [c for c in catalog.components.values() if c.alternatives]
    options = [
        click.option("--build-type", type=click.Choice(BUILD_TYPES), default="full", show_default=True,
                     help="Stage to build, with whatever it needs (pytorch = final)."),
        click.option("--backend", help=f"One of: {', '.join(sorted(catalog.backends))}. Default per architecture."),
        click.option("--build-target", default="generic", show_default=True,
                     help="CPU to tune for: generic, native, custom, or a named target (see `list targets`)."),
        click.option("--arch", help="Image architecture (default: the target's, the backend's, or this host's)."),
        click.option("--custom-target", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="YAML file with one target entry, for --build-target custom."),
        click.option("--jobs", type=click.IntRange(min=1), help="Parallel compile jobs (default: bounded by cores and memory)."),
        click.option("--torch-version", help="PyTorch version (default: the pinned one, or the wheel's)."),
        click.option("--source-version", "source_versions", multiple=True, metavar="COMPONENT=VERSION",
                     help="Another pinned version of a component, e.g. openblas=0.3.28."),
        click.option("--release", help="Release in the tag, rYY.MM (default: this UTC month)."),
        click.option("--repository", default="torchstack", show_default=True, help="Image repository name."),
        click.option("--tag", help="Use this tag instead of the computed release tag."),
        click.option("--distribution", help=f"Debian release: {', '.join(sorted(catalog.distributions))}."),
        click.option("--base-image", help="OS image to start from instead of the bootstrapped Debian (Debian-family)."),
        click.option("--torch-wheel", help="With --torch-from wheel: a .whl file, a folder of wheels, a URL, or 'index'."),
        click.option("--plugin-wheel", "plugin_wheels", multiple=True, metavar="FILE|DIR|NAME==VERSION",
                     help="A vendor plugin wheel to install into the final image (repeat for several): a .whl file, a "
                     "folder of them, or NAME==VERSION from the package index. One whose torch requirement excludes "
                     "the image's torch is refused before anything is built."),
        click.option("--runtime", type=click.Choice(RUNTIMES), default=RUNTIMES[0], show_default=True,
                     help="full: the final image ships the C++ compiler, Python headers and openssl that torch.compile "
                     "needs at run time. slim: without them (torch.compile is refused), for sites that forbid compilers."),
        engine_option,
        click.option("--builder", type=click.Choice(BUILDERS), default="auto", show_default=True,
                     help="docker: the Docker SDK's builder, any engine. buildx: BuildKit, with a ccache cache mount "
                     "and the CA as a secret. auto: buildx when compiling PyTorch and buildx is installed."),
    ]
    for component in with_alternatives:
        options.append(
            click.option(f"--{component.name}-from", f"from_{component.name}", type=click.Choice(component.methods),
                         default="source", show_default=True, help=f"Where {component.name} comes from.")
        )

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def _resolve_builder(choice: str, methods: dict[str, str], engine_kind: str) -> str:
    if choice != "auto":
        return choice
    if engine_kind == "podman":
        return "docker"  # Podman's builder, behind the legacy build API
    from torchstack.engine import buildx_available

    return "buildx" if methods.get("torch", "source") == "source" and buildx_available() else "docker"


def request_from(options: dict) -> Request:
    methods = {k.removeprefix("from_"): v for k, v in options.items() if k.startswith("from_") and v != "source"}
    builder = options["builder"]
    engine_kind = choose(options.get("engine") or "auto").kind
    refuse_for(engine_kind, options)
    for option, why in (("buildx_builder", "names a BuildKit builder"), ("ccache_dir", "moves BuildKit's compiler cache")):
        if options.get(option):
            if builder == "docker":
                raise UsageProblem(f"--{option.replace('_', '-')} {why}: use it with --builder buildx (or auto)")
            builder = "buildx"
    return Request(
        builder=_resolve_builder(builder, methods, engine_kind),
        build_type=options["build_type"],
        backend=options["backend"],
        build_target=options["build_target"],
        arch=options["arch"],
        custom_target=options["custom_target"],
        jobs=options["jobs"],
        torch_version=options["torch_version"],
        release=options["release"],
        repository=options["repository"],
        tag=options["tag"],
        methods=methods,
        versions=_parse_pins(options["source_versions"]),
        torch_wheel=options["torch_wheel"],
        distribution=options["distribution"],
        base_image=options["base_image"],
        runtime=options["runtime"],
        plugin_wheels=tuple(options.get("plugin_wheels") or ()),
        plugin_cache=state_dir() / "plugins",
    )


def format_plan(plan: Plan) -> str:
    lines = [
        f"release tag   {plan.release_tag}",
        f"final image   {plan.final_image}",
        f"architecture  {plan.arch.name} ({plan.platform}){' emulated on this ' + plan.host_arch + ' host' if plan.emulated else ''}",
        f"backend       {plan.backend.name}: {plan.backend.description}",
        f"target        {plan.target.name}: {plan.target.flag}" + (f"  [{plan.target_note}]" if plan.target_note else ""),
        f"compiler      CFLAGS={plan.cflags}  (GCC {plan.distribution.gcc}, {plan.distribution.name})",
        f"torch         {plan.torch_version}",
        f"jobs          {plan.jobs} (PyTorch MAX_JOBS {plan.torch_jobs})" + (f"  [{plan.jobs_note}]" if plan.jobs_note else ""),
        f"builder       {plan.builder}" + (" (BuildKit: ccache cache mount, CA as a secret)" if plan.builder == "buildx" else ""),
        f"runtime       {plan.runtime}: " + ("with" if plan.runtime == "full" else "without")
        + " what torch.compile needs; " + (env_line(plan.payload.env) or "no environment defaults"),
        f"base image    {plan.base_image}" + (" (bootstrapped from the Debian archive if absent)" if plan.base_is_bootstrapped else ""),
        "components",
    ]
    for c in plan.components:
        how = {"source": "compiled from source", "distro": "Debian packages", "wheel": "prebuilt wheel"}[c.method]
        pin = f", sha256 {c.source.sha256[:12]}… ({c.source.sha256_from})" if c.source else ""
        lines.append(f"  {c.name:<9} {c.version:<10} {how}{pin}")
    for p in plan.plugins:
        found = f"{p.wheel.path.name}, sha256 {p.wheel.sha256[:12]}…" if p.wheel else "downloaded and checked when the build starts"
        lines.append(f"plugin        {p.requirement} ({p.why}; {found})")
    lines.append("stages")
    for stage in plan.stages:
        lines.append(f"  {stage.name:<6} {stage.image}")
        lines.append(f"         FROM {stage.parent_image}" + "".join(f"; copies from {i}" for i in stage.copies.values()))
        for c in stage.components:
            if c.env:
                lines.append(f"         {c.name}: {env_line(c.env)}")
    return "\n".join(lines)


def backend_details(catalog: Catalog, backend) -> list[str]:
    """What `list backends` says under a backend: targets, what it needs from the CPU, its plugins."""
    targets = [t.name for t in catalog.targets if t.arch in backend.arches and t.name in (backend.targets or (t.name,))]
    lines = [f"targets: {', '.join(dict.fromkeys(targets))}"]
    if backend.cpu_wants:
        lines.append(f"CPU: wants {', '.join(backend.cpu_wants.features)}: {backend.cpu_wants.why}")
    for name in backend.plugins:
        plugin = catalog.plugins[name]
        lines.append(f"plugin: {name} ({plugin.vendor}) {', '.join(plugin.versions)}: {plugin.description}")
    probes = [*backend.probes, *(f"{p} ({a})" for a in backend.arches for p in catalog.architectures[a].probes)]
    if probes:
        lines.append(f"reports at run time: {', '.join(probes)}")
    return lines


def format_inspection(report: dict) -> str:
    """`inspect`'s summary for a person."""
    info, toolkit = report["build_info"], report["build_info"].get("toolkit") or {}
    lines = [
        f"image         {report['image']} ({report['id'][:19]}, built {report['created'][:19]}Z)",
        f"release tag   {info.get('release_tag', '(a stage image)')}"
        + ("" if report["labels_agree"] or "release_tag" not in info else "  [labels disagree with it]"),
        f"torch         {info.get('torch_version', '-')} on {info.get('backend', '(a stage image: any backend)')}, "
        f"{info['arch']}, {info['distribution']}",
        f"target        {info.get('target', '(nothing compiled for one)')}: {info.get('target_flag', '-')}"
        + (f"  (CFLAGS {info['cflags']})" if info.get("cflags") else ""),
        f"toolkit       torchstack {toolkit.get('version', '?')}, revision {toolkit.get('revision') or 'unknown'}",
        "components",
    ]
    for name, c in info["components"].items():
        how = {"source": "compiled here", "distro": "Debian packages", "wheel": "prebuilt wheel"}[c["method"]]
        lines.append(f"  {name:<9} {c['version']:<12} {how}")
        if c.get("source"):
            lines.append(f"            {c['source']['url']}")
            lines.append(f"            sha256 {c['source']['sha256']} ({c['source']['sha256_from']})")
            patches = ", ".join(p["name"] for p in c.get("patches", [])) or "none"
            lines.append(f"            patches: {patches}")
    sbom = report["sbom"]
    if sbom is None:
        lines.append("sbom          none in this image")
    else:
        versions = ", ".join(f"{k} {v}" for k, v in sbom["key_versions"].items())
        lines.append(f"sbom          {sbom['format']}, {sbom['python_packages']} Python packages ({versions}), "
                     f"{sbom['debian_packages']} Debian packages; the whole of it: {report['sbom_path']}")  # fmt: skip
    return "\n".join(lines)


def _fail(message: str, code: int) -> None:
    click.echo(f"torchstack: error: {message}", err=True)
    sys.exit(code)


class ToolkitGroup(click.Group):
    """A click group whose every failure is one line on stderr and an exit status, never a traceback."""

    def main(self, args=None, prog_name=None, **extra):
        try:
            return super().main(args=args, prog_name=prog_name or "build.py", standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message().replace("\n", " "), exc.exit_code)
        except ToolkitError as exc:
            _fail(str(exc), exc.exit_code)
        except docker.errors.DockerException as exc:
            _fail(f"the container engine failed: {str(exc).splitlines()[0]}", 1)
        except KeyboardInterrupt as exc:
            _fail("terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted", sharing.exit_code(exc))
        except click.exceptions.Abort:
            _fail("interrupted", 130)
        return None


def _check_index_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value:
        pip_index_settings(value)
    return value


def _check_cache_registry(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from torchstack.publish import check_registry

    return check_registry(value, "--cache-from") if value else None


def _refuse_options_before(ctx: click.Context) -> None:
    """Options given before a command belong to a build, which the command does not run: refused,
    not ignored (`./build.py --backend zdnn plan` would print the default backend's plan)."""
    given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]
    if given:
        command = ctx.invoked_subcommand
        raise UsageProblem(f"{', '.join(given)} given before the {command} command, which would ignore "
                           f"{'them' if len(given) > 1 else 'it'}: put the command first "
                           f"(`./build.py {command} --help` lists its options)")  # fmt: skip


def _writable_folder(folder: Path, option: str, given: Path) -> None:
    """Refuse, before any work, a place no file can be written to (made if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageProblem(f"{option} {given}: cannot write in {folder}: {exc.strerror or exc}") from None


def _check_json_file(path: Path | None) -> None:
    if path is not None:
        _writable_folder(path.parent, "--json", path)


def make_cli(catalog: Catalog) -> click.Group:
    with_plan = plan_options(catalog)

    def build_options(func):
        @click.option("--no-cache", is_flag=True, help="Build every step again.")
        @click.option("--dry-run", is_flag=True, help="Print the plan; touch no Docker engine.")
        @click.option("--no-test", is_flag=True, help="Skip the image checks after the final stage.")
        @click.option("--recheck", is_flag=True,
                      help="Run the image checks even if they passed on this image ID with the same checks before.")
        @click.option("--quiet", is_flag=True, help="No live view; print only the result.")
        @click.option("--json", "json_file", type=click.Path(dir_okay=False, path_type=Path),
                      help="Write a machine-readable summary (images, tags, sizes, times) here.")
        @click.option("--ca-bundle", type=click.Path(exists=True, dir_okay=False, path_type=Path), envvar="PIP_CERT",
                      help="Extra CA bundle for pip inside builds (default: $PIP_CERT); never left in an image.")
        @click.option("--pip-index-url", envvar="PIP_INDEX_URL", metavar="URL", callback=_check_index_url,
                      help="Python package index for pip inside builds, e.g. a local mirror (default: $PIP_INDEX_URL); "
                      "like the CA bundle, never left in an image.")
        @click.option("--buildx-builder", metavar="NAME",
                      help="With --builder buildx: build on this `docker buildx create` builder (remote, Kubernetes); "
                      "the image comes back here for the checks.")
        @click.option("--push", is_flag=True,
                      help="After the checks pass, push the release image to --registry (credentials: the Docker config).")
        @click.option("--push-stages", is_flag=True,
                      help="With --push, push the stage images too, so other hosts' builds start from them.")
        @click.option("--registry", metavar="HOST[:PORT]/NAMESPACE",
                      help="Where --push sends images, e.g. ghcr.io/acme: the image becomes ghcr.io/acme/torchstack:TAG.")
        @click.option("--cache-from", metavar="HOST[:PORT]/NAMESPACE", callback=_check_cache_registry,
                      help="Reuse the stage images another host pushed there (--push-stages) as build cache: the "
                      "engine reuses each step that matches and builds what changed.")
        @click.option("--ccache-dir", type=click.Path(file_okay=False, path_type=Path),
                      help="Keep BuildKit's compiler cache in this host folder too: loaded before the build, saved "
                      "after it, for CI caches (implies --builder buildx).")
        @click.option("--source-mirror", help="Folder or URL holding the pinned source files (air-gapped hosts).")
        @click.option("--debian-mirror", help="Debian archive URL for bootstrapping the base image.")
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)

        return wrapper

    @click.group(cls=ToolkitGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="torchstack")
    @with_plan
    @build_options
    @click.pass_context
    def cli(ctx: click.Context, **options) -> None:
        """Build optimized PyTorch container images in stages: base -> libs -> tools -> dev -> final.

        With no command, builds the requested stage (default: the full chain) and tags the
        final image r<yy>.<mm>-torch-<ver>-<backend>[-<variant>...] once its checks pass.
        """
        if ctx.invoked_subcommand is not None:
            _refuse_options_before(ctx)
            return
        _check_json_file(options["json_file"])
        request = request_from(options)
        plan = make_plan(catalog, request)
        pushes = []
        if options["push"] or options["push_stages"]:
            from torchstack.publish import wanted

            # Refused here, before any work; the build names the images again once its plan is final.
            pushes = wanted(plan, options["registry"], options["push_stages"], checked=not options["no_test"])
        if options["dry_run"]:
            click.echo(format_plan(plan))
            click.echo(f"engine        {choose(options['engine']).describe()}")
            if options["cache_from"]:
                click.echo(f"cache from    {options['cache_from']}: each stage image above, pulled where this engine lacks it")
            for local, remote in pushes:
                click.echo(f"push          {local} -> {remote}")
            return
        from torchstack.pipeline import run_build

        run_build(catalog, request, plan, options)

    @cli.command("plan")
    @with_plan
    def plan_command(**options) -> None:
        """Print the build plan: stages, images, tags, flags, and the engine a build would use. Needs no engine."""
        click.echo(format_plan(make_plan(catalog, request_from(options))))
        click.echo(f"engine        {choose(options['engine']).describe()}")

    @cli.command("render")
    @click.option("--output", required=True, type=click.Path(file_okay=False, path_type=Path),
                  help="Folder to write one build context per stage into.")
    @with_plan
    def render_command(output: Path, **options) -> None:
        """Write each stage's Dockerfile and build context to a folder."""
        from torchstack.render import assemble_context
        from torchstack.sources import cached_sources

        plan = make_plan(catalog, request_from(options))
        _writable_folder(output, "--output", output)
        for stage in plan.stages:
            missing = assemble_context(plan, stage, output / stage.name, cached_sources(plan))
            note = f" (not included, fetch them with `./build.py fetch`: {', '.join(missing)})" if missing else ""
            click.echo(f"{output / stage.name / 'Dockerfile'}{note}")

    @cli.command("list")
    @click.argument("what", type=click.Choice(["backends", "targets"]))
    def list_command(what: str) -> None:
        """Show the backends or build targets and the architectures they are for."""
        if what == "backends":
            for backend in catalog.backends.values():
                default_on = [a.name for a in catalog.architectures.values() if a.default_backend == backend.name]
                default = f" (default on {', '.join(default_on)})" if default_on else ""
                click.echo(f"{backend.name:<12} {', '.join(backend.arches):<24} {backend.description}{default}")
                for line in backend_details(catalog, backend):
                    click.echo(f"{'':<12} {'':<24} {line}")
        else:
            for target in catalog.targets:
                aliases = f" (also: {', '.join(target.aliases)})" if target.aliases else ""
                click.echo(f"{target.name:<14} {target.arch:<8} {target.flag:<22} GCC {target.gcc}+{aliases}")
            click.echo(f"{'native':<14} {'any':<8} resolved from this host's /proc/cpuinfo")
            click.echo(f"{'custom':<14} {'any':<8} read from --custom-target FILE")

    @cli.command("matrix")
    @click.option("--format", "form", type=click.Choice(["github", "gitlab", "json"]), default="json", show_default=True,
                  help="github: strategy.matrix (include); gitlab: parallel:matrix; json: a list of jobs.")
    @click.option("--arch", multiple=True, help="Only this architecture (repeat for several).")
    @click.option("--backend", multiple=True, help="Only this backend (repeat for several).")
    @click.option("--build-target", "target", multiple=True, help="Only this build target (repeat for several).")
    @click.option("--distribution", multiple=True, help="Only this Debian release (repeat for several).")
    @click.option("--torch-from", "torch_from", type=click.Choice(["source", "wheel"]), default="source", show_default=True)
    @click.option("--release", help="Release in the tags, rYY.MM (default: this UTC month).")
    def matrix_command(form: str, torch_from: str, release: str | None, **filters) -> None:
        """Print the CI build matrix: every allowed build, each on a native runner, with its tag."""
        from torchstack.matrix import jobs, render

        click.echo(render(jobs(catalog, filters, torch_from=torch_from, release=release), form))

    @cli.command("fetch")
    @click.option("--source-mirror", help="Folder or URL to take sources from instead of upstream.")
    @click.option("--mirror-dir", type=click.Path(file_okay=False, path_type=Path),
                  help="Also copy the verified sources here, making a mirror for air-gapped hosts.")
    @with_plan
    def fetch_command(source_mirror: str | None, mirror_dir: Path | None, **options) -> None:
        """Download and verify the plan's pinned sources into the cache (and a mirror folder)."""
        from torchstack.sources import fetch_plan_sources

        plan = make_plan(catalog, request_from(options))
        for name, path in fetch_plan_sources(plan, source_mirror, mirror_dir).items():
            click.echo(f"{name}  {path}")

    @cli.command("bootstrap")
    @click.option("--arch", help="Architecture (default: this host's).")
    @click.option("--distribution", default=catalog.default_distribution, show_default=True)
    @click.option("--debian-mirror", help="Debian archive URL (default: the distribution's).")
    @click.option("--force", is_flag=True, help="Make it again even if the image exists.")
    @engine_option
    def bootstrap_command(arch: str | None, distribution: str, debian_mirror: str | None, force: bool, engine: str) -> None:
        """Create the Debian base image from the Debian archive with mmdebstrap (no registry needed)."""
        from torchstack import bootstrap, prerequisites

        plan = make_plan(catalog, Request(build_type="base", arch=arch, distribution=distribution))
        prerequisites.require(plan, bootstrap=True)
        client, _ = connect(choose(engine))
        image = bootstrap.ensure_base_image(client, plan, debian_mirror, force=force)
        click.echo(image)

    @cli.command("manifest")
    @click.argument("target")
    @click.argument("sources", nargs=-1, required=True)
    @click.option("--arch", "arches", multiple=True, required=True,
                  help=f"An architecture the tag must hold, one of {', '.join(catalog.architectures)} (repeat).")
    @engine_option
    def manifest_command(target: str, sources: tuple[str, ...], arches: tuple[str, ...], engine: str) -> None:
        """Join per-architecture images in a registry (SOURCES) as one multi-architecture tag (TARGET).

        For example: manifest ghcr.io/acme/torchstack:r26.11-torch-2.13.0-openblas
        ghcr.io/acme/torchstack:r26.11-torch-2.13.0-openblas-x86_64
        ghcr.io/acme/torchstack:r26.11-torch-2.13.0-openblas-aarch64 --arch x86_64 --arch aarch64
        """
        from torchstack.publish import join_architectures

        unknown = [a for a in arches if a not in catalog.architectures]
        if unknown:
            raise UsageProblem(f"unknown --arch {unknown[0]!r}; valid: {', '.join(catalog.architectures)}")
        try:
            tags.check_repository(target.rpartition(":")[0] if ":" in target.rsplit("/", 1)[-1] else target)
        except UsageProblem:
            raise UsageProblem(f"{target}: not a valid image name (HOST[:PORT]/NAME:TAG, lowercase)") from None
        expected = {a: catalog.architectures[a].docker.split("/", 1)[1] for a in dict.fromkeys(arches)}
        kind = choose(engine).kind  # the engine's CLI does this, not its API
        digest = join_architectures(target, list(sources), expected, lambda line: click.echo(line, err=True), kind)
        click.echo(f"{target}@{digest}")

    @cli.command("inspect")
    @click.argument("image")
    @click.option("--json", "as_json", is_flag=True, help="Print it as JSON, for machines.")
    @engine_option
    def inspect_command(image: str, as_json: bool, engine: str) -> None:
        """What IMAGE says about itself: its build manifest and SBOM summary, from the image alone."""
        import json

        from torchstack import sbom

        client, chosen = connect(choose(engine))
        try:
            found, info, text = sbom.read_image(client, image)
        except docker.errors.ImageNotFound:
            raise UsageProblem(f"{image}: no such image here ({chosen.kind} pull it first)") from None
        except KeyError:
            raise UsageProblem(f"{image}: not a torchstack image (no {sbom.BUILD_INFO_LABEL} label)") from None
        report = {
            "image": image, "id": found.id, "created": found.attrs["Created"], "tags": found.tags,
            "labels_agree": found.labels.get("org.opencontainers.image.version") == info.get("release_tag"),
            "build_info": info, "sbom": sbom.summary(text) if text else None, "sbom_path": sbom.SBOM,
        }  # fmt: skip
        click.echo(json.dumps(report, indent=2) if as_json else format_inspection(report))

    @cli.command("test")
    @click.argument("image")
    @click.option("--backend", help="Backend to check for, for an image without torchstack labels.")
    @click.option("--stage", help="Stage to check the image as (default: from its labels, else final).")
    @click.option("-k", "select", metavar="EXPR",
                  help="Run only the checks whose names match EXPR (pytest's -k); the pass is not recorded.")
    @engine_option
    def test_command(image: str, backend: str | None, stage: str | None, select: str | None, engine: str) -> None:
        """Check what is inside IMAGE: any image, ours or not."""
        from torchstack import checks

        client, chosen = connect(choose(engine))
        result = checks.run_checks(client, chosen, catalog, image, backend=backend, stage=stage, select=select)
        if not result.passed:
            raise ToolkitError(f"{image}: {result.summary}")
        click.echo(f"{image}: {result.summary} in {result.seconds:.0f} s")

    return cli


def main(argv: list[str] | None = None) -> None:
    sharing.handle_signals()
    try:
        catalog = load_catalog()
    except DataError as exc:
        _fail(str(exc), exc.exit_code)
    make_cli(catalog).main(args=argv)


if __name__ == "__main__":
    main()
