"""The command line, from arguments to exit status: build (the default), plan, render, list, matrix, fetch, bootstrap, manifest, inspect, test, verify, policy."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import docker.errors
from click.core import ParameterSource

from torchstack import __version__, sharing, tags
from torchstack.connection import choose, connect
from torchstack.errors import DataError, ToolkitError, UsageProblem
from torchstack.model import Catalog, load_catalog
from torchstack.options import archive_options, build_options, check_json_file, engine_option, plan_options, request_from, writable_folder
from torchstack.plan import Request
from torchstack.planner import make_plan
from torchstack.reports import backend_details, format_inspection, format_plan
from torchstack.sharing import Terminated
from torchstack.sources import state_dir


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


def _refuse_options_before(ctx: click.Context) -> None:
    """Options given before a command belong to a build, which the command does not run: refused,
    not ignored (`./build.py --backend zdnn plan` would print the default backend's plan)."""
    given = [p.opts[0] for p in ctx.command.params if ctx.get_parameter_source(p.name) == ParameterSource.COMMANDLINE]
    if given:
        command = ctx.invoked_subcommand
        raise UsageProblem(f"{', '.join(given)} given before the {command} command, which would ignore "
                           f"{'them' if len(given) > 1 else 'it'}: put the command first "
                           f"(`./build.py {command} --help` lists its options)")  # fmt: skip


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
        check_json_file(options["json_file"])
        request = request_from(options)
        plan = make_plan(catalog, request)
        pushes = []
        if options["push"] or options["push_stages"]:
            from torchstack.publish import wanted

            # Refused here, before any work; the build names the images again once its plan is final.
            pushes = wanted(plan, options["registry"], options["push_stages"], checked=not options["no_test"])
        if options["sign"]:
            from torchstack.signing import check_key

            if not options["push"]:
                raise UsageProblem("--sign signs what --push sends: add --push and --registry")
            options["sign"] = check_key(options["sign"], "--sign", private=True)
        if options["dry_run"]:
            click.echo(format_plan(plan))
            click.echo(f"engine        {choose(options['engine']).describe()}")
            if options["cache_from"]:
                click.echo(f"cache from    {options['cache_from']}: each stage image above, pulled where this engine lacks it")
            for local, remote in pushes:
                click.echo(f"push          {local} -> {remote}")
            if options["sign"]:
                click.echo("sign          the pushed release image, by digest, with its SBOM and provenance attested (cosign)")
            return
        from torchstack.pipeline import run_build

        run_build(catalog, request, plan, options)

    return cli


def _plan_command(catalog: Catalog) -> click.Command:
    @click.command("plan")
    @plan_options(catalog)
    def plan_command(**options) -> None:
        """Print the build plan: stages, images, tags, flags, and the engine a build would use. Needs no engine."""
        from torchstack.prerequisites import require_cpu_for_checks

        plan = make_plan(catalog, request_from(options))
        click.echo(format_plan(plan))
        click.echo(f"engine        {choose(options['engine']).describe()}")
        # On a CPU that lacks the target's features: what each compiled component's build runs here.
        for note in require_cpu_for_checks(plan, checks=False):
            click.echo(note.removeprefix("torchstack: "))

    return plan_command


def _render_command(catalog: Catalog) -> click.Command:
    @click.command("render")
    @click.option("--output", required=True, type=click.Path(file_okay=False, path_type=Path),
                  help="Folder to write one build context per stage into.")
    @plan_options(catalog)
    def render_command(output: Path, **options) -> None:
        """Write each stage's Dockerfile and build context to a folder."""
        from torchstack.render import assemble_context
        from torchstack.sources import cached_sources

        plan = make_plan(catalog, request_from(options))
        writable_folder(output, "--output", output)
        for stage in plan.stages:
            missing = assemble_context(plan, stage, output / stage.name, cached_sources(plan))
            note = f" (not included, fetch them with `./build.py fetch`: {', '.join(missing)})" if missing else ""
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
            for target in catalog.targets:
                aliases = f" (also: {', '.join(target.aliases)})" if target.aliases else ""
                click.echo(f"{target.name:<14} {target.arch:<8} {target.flag:<22} GCC {target.gcc}+{aliases}")
            click.echo(f"{'native':<14} {'any':<8} resolved from this host's /proc/cpuinfo")
            click.echo(f"{'custom':<14} {'any':<8} read from --custom-target FILE")

    return list_command


def _matrix_command(catalog: Catalog) -> click.Command:
    @click.command("matrix")
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

    return matrix_command


def _fetch_command(catalog: Catalog) -> click.Command:
    @click.command("fetch")
    @click.option("--source-mirror", help="Folder or URL to take sources from instead of upstream.")
    @click.option("--mirror-dir", type=click.Path(file_okay=False, path_type=Path),
                  help="Also copy the verified sources here, making a mirror for air-gapped hosts.")
    @plan_options(catalog)
    def fetch_command(source_mirror: str | None, mirror_dir: Path | None, **options) -> None:
        """Download and verify the plan's pinned sources into the cache (and a mirror folder)."""
        from torchstack.sources import fetch_plan_sources

        plan = make_plan(catalog, request_from(options))
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
        from torchstack import archive as apt, bootstrap, prerequisites

        plan = make_plan(catalog, Request(
            build_type="base", arch=arch, distribution=distribution, debian_mirror=archive["debian_mirror"],
            security_mirror=archive["security_mirror"], security_updates=not archive["no_security_updates"],
            archive_keyring=archive["archive_keyring"],
        ))  # fmt: skip
        prerequisites.require(plan, bootstrap=True)
        apt.require_suites(plan.apt)
        client, _ = connect(choose(engine))
        image = bootstrap.ensure_base_image(client, plan, force=force)
        click.echo(image)

    return bootstrap_command


def _manifest_command(catalog: Catalog) -> click.Command:
    @click.command("manifest")
    @click.argument("target")
    @click.argument("sources", nargs=-1, required=True)
    @click.option("--arch", "arches", multiple=True, required=True,
                  help=f"An architecture the tag must hold, one of {', '.join(catalog.architectures)} (repeat).")
    @click.option("--sign", metavar="KEY", help="Sign the list and each image in it (cosign, offline), as --sign does a build's.")
    @engine_option
    def manifest_command(target: str, sources: tuple[str, ...], arches: tuple[str, ...], sign: str | None, engine: str) -> None:
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
        if sign:
            from torchstack import signing

            sign = signing.check_key(sign, "--sign", private=True)
        expected = {a: catalog.architectures[a].docker.split("/", 1)[1] for a in dict.fromkeys(arches)}
        kind = choose(engine).kind  # the engine's CLI does this, not its API
        digest = join_architectures(target, list(sources), expected, lambda line: click.echo(line, err=True), kind)
        if sign:
            signed = signing.sign(f"{target.rpartition(':')[0]}@{digest}", sign, None, None, recursive=True)
            click.echo(f"torchstack: signed {signed['reference']} and each image in it (cosign, no transparency log)", err=True)
        click.echo(f"{target}@{digest}")

    return manifest_command


def _inspect_command(catalog: Catalog) -> click.Command:
    @click.command("inspect")
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

    return inspect_command


def _test_command(catalog: Catalog) -> click.Command:
    @click.command("test")
    @click.argument("image")
    @click.option("--backend", help="Backend to check for, for an image without torchstack labels.")
    @click.option("--stage", help="Stage to check the image as (default: from its labels, else final).")
    @click.option("-k", "select", metavar="EXPR",
                  help="Run only the checks whose names match EXPR (pytest's -k); the pass is not recorded.")
    @click.option("--archive-keyring", type=click.Path(exists=True, dir_okay=False, path_type=Path), metavar="FILE",
                  help="The key that signs the image's Debian mirrors, besides Debian's keys.")
    @engine_option
    def test_command(image: str, backend: str | None, stage: str | None, select: str | None, archive_keyring: Path | None,
                     engine: str) -> None:  # fmt: skip
        """Check what is inside IMAGE: any image, ours or not. Then ask the -security suites its apt
        sources name whether an installed package has a fix pending there."""
        from torchstack import archive, checks

        client, chosen = connect(choose(engine))
        # A check run killed outright (SIGKILL) leaves its containers: the next run removes them.
        for line in sharing.sweep(client, state_dir() / "contexts"):
            click.echo(line, err=True)
        result = checks.run_checks(client, chosen, catalog, image, backend=backend, stage=stage, select=select)
        if not result.passed:
            raise ToolkitError(f"{image}: {result.summary}")
        click.echo(f"{image}: {result.summary} in {result.seconds:.0f} s")
        try:
            pending, suites = archive.pending_in(client, image, archive_keyring)
        except archive.ArchiveUnreachable as exc:
            click.echo(f"torchstack: {image}: security updates not checked: {exc}", err=True)
            return
        if pending:
            raise ToolkitError(f"{image}: {archive.describe(pending, suites)}")
        click.echo(f"{image}: no security update pending in {suites}")

    return test_command


def _verify_command(catalog: Catalog) -> click.Command:
    @click.command("verify")
    @click.argument("image")
    @click.option("--key", required=True, help="The signer's public key (cosign.pub) or a KMS reference.")
    @click.option("--pull", is_flag=True, help="Then pull the verified digest (never the tag, which may move).")
    @engine_option
    def verify_command(image: str, key: str, pull: bool, engine: str) -> None:
        """Check IMAGE in its registry before use: its signature (each image's, for a multi-architecture
        list), its SBOM and provenance attestations, both about this very digest, and the provenance
        against the image's build-info. Prints the digest to pull."""
        from torchstack import registry, signing

        registry.parse(image)
        key = signing.check_key(key, "--key", private=False)
        found = signing.verify(image, key)
        for line in found.images:
            click.echo(f"torchstack: verified {line}: signature, SBOM and provenance (this digest, its build-info)", err=True)
        if pull:
            client, chosen = connect(choose(engine))
            client.images.pull(found.reference)
            click.echo(f"torchstack: pulled {found.reference} ({chosen.kind})", err=True)
        click.echo(found.reference)

    return verify_command


def _policy_command(catalog: Catalog) -> click.Command:
    @click.command("policy")
    @click.option("--registry", required=True, metavar="HOST[:PORT]/NAMESPACE", help="Where the signed images are (--push's --registry).")
    @click.option("--key", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="The public key (cosign.pub).")
    @click.option("--output", required=True, type=click.Path(file_okay=False, path_type=Path), help="Folder to write the files in.")
    def policy_command(registry: str, key: Path, output: Path) -> None:
        """Write what nodes need to run only images under REGISTRY signed by KEY: policy.json and
        registries.d/torchstack.yaml (Podman, CRI-O, OpenShift: /etc/containers/), kyverno-policy.yaml."""
        from torchstack import policy
        from torchstack.publish import check_registry

        writable_folder(output, "--output", output)
        for path in policy.write(output, check_registry(registry), key):
            click.echo(path)

    return policy_command


def make_cli(catalog: Catalog) -> click.Group:
    cli = _build_group(catalog)
    for command in (_plan_command, _render_command, _list_command, _matrix_command, _fetch_command, _bootstrap_command,
                    _manifest_command, _inspect_command, _test_command, _verify_command, _policy_command):  # fmt: skip
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
