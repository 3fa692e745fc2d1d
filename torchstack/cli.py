"""The command line, from arguments to exit status, for build (the default) as for every other subcommand.

The subcommands: build, plan, render, list, matrix, fetch, bootstrap, manifest, inspect, test, verify, policy."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from click.core import ParameterSource

from torchstack import image_commands
from torchstack.base import sharing
from torchstack.base.errors import DataError, ToolkitError, UsageProblem
from torchstack.base.sharing import Terminated
from torchstack.base.version import VERSION as __version__
from torchstack.catalog.model import COMMAND, Catalog, load_catalog
from torchstack.engines.connection import FAILURES, choose, connect, why_not_reproducible
from torchstack.reports.reports import backend_details, format_plan
from torchstack.request.command_options import (
    archive_options,
    build_options,
    engine_from,
    engine_option,
    plan_options,
    request_from,
    writable_folder,
)
from torchstack.request.plan import Request
from torchstack.request.planner import make_plan


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
        except FAILURES as exc:
            _fail(f"the container engine failed: {str(exc).splitlines()[0]}", 1)
        except KeyboardInterrupt as exc:
            _fail("terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted", sharing.exit_code(exc))
        except click.exceptions.Abort:
            _fail("interrupted", 130)
        return None


def _refuse_options_before(ctx: click.Context) -> None:
    """Options given before a command belong to a build, which the command does not run: refused,
    not ignored (`./build.py --backend zdnn plan` would print the default backend's plan)."""
    given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]
    if given:
        command = ctx.invoked_subcommand
        raise UsageProblem(
            f"{', '.join(given)} given before the {command} command, which would ignore "
            f"{'them' if len(given) > 1 else 'it'}: put the command first "
            f"(`{COMMAND} {command} --help` lists its options)"
        )


def _print_dry_run(settled) -> None:
    """--dry-run: the settled plan, the engine, and what the build would pull, push and sign."""
    run = settled.run
    for note in settled.notes:
        click.echo(note.removeprefix("torchstack: "))
    chosen = settled.engine
    click.echo(format_plan(settled.plan, chosen.builder_name(settled.plan.builder)))
    click.echo(f"engine        {chosen.describe()}")
    why_not = why_not_reproducible(chosen, settled.plan.builder)
    click.echo(f"reproducible  {'no: ' + why_not if why_not else 'yes: the same request and inputs give the same images'}")
    if run.cache_from:
        click.echo(f"cache from    {run.cache_from}: each stage image above, pulled where this engine lacks it")
    for local, remote in settled.pushes:
        click.echo(f"push          {local} -> {remote}")
    if run.sign:
        from torchstack.publishing import cosign

        tool = cosign.found("--sign")
        forms = " and ".join(tool.forms(run.signature_format))
        click.echo(
            f"sign          the pushed release image, by digest, with its SBOM and provenance attested (cosign {tool.said}: "
            f"{forms} form), before the release tag names it"
        )


def _build_group(catalog: Catalog) -> click.Group:
    """The group, which with no command runs the build itself."""

    @click.group(cls=ToolkitGroup, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name="torchstack")
    @plan_options(catalog)
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
        from torchstack.run.settle import settle

        settled = settle(catalog, options)
        if settled.run.dry_run:
            _print_dry_run(settled)
            return
        from torchstack.run.pipeline import run_build

        run_build(catalog, settled)

    return cli


def _plan_command(catalog: Catalog) -> click.Command:
    @click.command("plan")
    @plan_options(catalog)
    def plan_command(**options) -> None:
        """Print the build plan: stages, images, tags, flags, and the engine a build would use. Needs no engine."""
        from torchstack.request.prerequisites import require_cpu_for_checks

        chosen = engine_from(options)
        plan = make_plan(catalog, request_from(options, chosen))
        click.echo(format_plan(plan, chosen.builder_name(plan.builder)))
        click.echo(f"engine        {chosen.describe()}")
        # On a CPU that lacks the target's features: what each compiled component's build runs here.
        for note in require_cpu_for_checks(plan, checks=False):
            click.echo(note.removeprefix("torchstack: "))

    return plan_command


def _render_command(catalog: Catalog) -> click.Command:
    @click.command("render")
    @click.option(
        "--output",
        required=True,
        type=click.Path(file_okay=False, path_type=Path),
        help="Folder to write one build context per stage into.",
    )
    @plan_options(catalog)
    def render_command(output: Path, **options) -> None:
        """Write each stage's Dockerfile and build context to a folder."""
        from torchstack.making.render import assemble_context
        from torchstack.making.sources import cached_sources

        plan = make_plan(catalog, request_from(options, engine_from(options)))
        writable_folder(output, "--output", output)
        for stage in plan.stages:
            missing = assemble_context(plan, stage, output / stage.name, cached_sources(plan))
            note = f" (not included, fetch them with `{COMMAND} fetch`: {', '.join(missing)})" if missing else ""
            click.echo(f"{output / stage.name / 'Dockerfile'}{note}")

    return render_command


def _list_command(catalog: Catalog) -> click.Command:
    @click.command("list")
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
            from torchstack.request.selection import distributions_for

            for target in catalog.targets:
                aliases = f" (also: {', '.join(target.aliases)})" if target.aliases else ""
                builds_on = ", ".join(d.name for d in distributions_for(catalog, target))
                where = builds_on or f"not yet buildable: no Debian release here has GCC {target.gcc}"
                click.echo(f"{target.name:<14} {target.arch:<8} {target.flag:<22} {'GCC ' + target.gcc + '+':<10} {where}{aliases}")
            click.echo(f"{'native':<14} {'any':<8} resolved from this host's /proc/cpuinfo")
            click.echo(f"{'custom':<14} {'any':<8} read from --custom-target FILE")

    return list_command


def _matrix_command(catalog: Catalog) -> click.Command:
    @click.command("matrix")
    @click.option(
        "--format",
        "form",
        type=click.Choice(["github", "gitlab", "json"]),
        default="json",
        show_default=True,
        help="github: strategy.matrix (include); gitlab: parallel:matrix; json: a list of jobs.",
    )
    @click.option("--arch", multiple=True, help="Only this architecture (repeat for several).")
    @click.option("--backend", multiple=True, help="Only this backend (repeat for several).")
    @click.option("--build-target", "target", multiple=True, help="Only this build target (repeat for several).")
    @click.option("--distribution", multiple=True, help="Only this Debian release (repeat for several).")
    @click.option(
        "--torch-from",
        "torch_from",
        type=click.Choice(["source", "wheel"]),
        multiple=True,
        default=("source",),
        show_default=True,
        help="How the jobs get torch (repeat for both; then each job's name ends with its own, torch-source or torch-wheel).",
    )
    @click.option("--release", help="Release in the tags, rYY.MM (default: this UTC month).")
    @click.option(
        "--hosted",
        is_flag=True,
        help="Only the jobs GitHub's and GitLab.com's own runners can run. A target whose CPU features those "
        "runners lack (AVX-512, AMX) gets a self-hosted runner's labels, and its job says why (runner).",
    )
    def matrix_command(form: str, torch_from: tuple[str, ...], release: str | None, hosted: bool, **filters) -> None:
        """Print the CI build matrix: every allowed build, each on a native runner, with its tag."""
        from torchstack.request.matrix import jobs, render

        click.echo(render(jobs(catalog, filters, torch_from=torch_from, release=release, hosted=hosted), form))

    return matrix_command


def _fetch_command(catalog: Catalog) -> click.Command:
    @click.command("fetch")
    @click.option("--source-mirror", help="Folder or URL to take sources from instead of upstream.")
    @click.option(
        "--mirror-dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Also copy the verified sources here, making a mirror for air-gapped hosts.",
    )
    @plan_options(catalog)
    def fetch_command(source_mirror: str | None, mirror_dir: Path | None, **options) -> None:
        """Download and verify the plan's pinned sources into the cache (and a mirror folder)."""
        from torchstack.making.sources import fetch_plan_sources

        plan = make_plan(catalog, request_from(options, engine_from(options)))
        for name, path in fetch_plan_sources(plan, source_mirror, mirror_dir).items():
            click.echo(f"{name}  {path}")

    return fetch_command


def _bootstrap_command(catalog: Catalog) -> click.Command:
    @click.command("bootstrap")
    @click.option("--arch", help="Architecture (default: this host's).")
    @click.option("--distribution", default=catalog.default_distribution, show_default=True)
    @archive_options
    @click.option("--force", is_flag=True, help="Make it again even if the image exists.")
    @engine_option
    def bootstrap_command(arch: str | None, distribution: str, force: bool, engine: str, **archive) -> None:
        """Create the Debian base image from the Debian archive with mmdebstrap (no registry needed)."""
        from torchstack.making import archive as apt
        from torchstack.making import bootstrap
        from torchstack.request import prerequisites

        plan = make_plan(
            catalog,
            Request(
                build_type="base",
                arch=arch,
                distribution=distribution,
                debian_mirror=archive["debian_mirror"],
                security_mirror=archive["security_mirror"],
                security_updates=not archive["no_security_updates"],
                archive_keyring=archive["archive_keyring"],
                debian_snapshot=archive["debian_snapshot"],
                snapshot_archive=archive["snapshot_archive"],
            ),
        )
        prerequisites.require(plan, bootstrap=True)
        apt.require_suites(plan.apt)
        chosen = connect(choose(engine))
        image = bootstrap.ensure_base_image(chosen.builder(plan.builder), plan, force=force)
        click.echo(image)

    return bootstrap_command


def make_cli(catalog: Catalog) -> click.Group:
    cli = _build_group(catalog)
    for command in (
        _plan_command,
        _render_command,
        _list_command,
        _matrix_command,
        _fetch_command,
        _bootstrap_command,
        image_commands.manifest_command,
        image_commands.inspect_command,
        image_commands.test_command,
        image_commands.verify_command,
        image_commands.policy_command,
    ):
        cli.add_command(command(catalog))
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
