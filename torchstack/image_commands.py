"""The commands that take an image already built: manifest, inspect, test, verify, policy."""

from __future__ import annotations

import json
from pathlib import Path

import click

from torchstack.base import sharing
from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.base.state import state_dir
from torchstack.catalog.model import Catalog
from torchstack.engines.connection import ENGINES, choose, connect
from torchstack.engines.engine import NoSuchImage
from torchstack.reports.reports import format_inspection
from torchstack.request import tags
from torchstack.request.command_options import engine_option, writable_folder
from torchstack.request.run_settings import SIGNATURE_FORMATS


def manifest_command(catalog: Catalog) -> click.Command:
    @click.command("manifest")
    @click.argument("target")
    @click.argument("sources", nargs=-1, required=True)
    @click.option(
        "--arch",
        "arches",
        multiple=True,
        required=True,
        help=f"An architecture the tag must hold, one of {', '.join(catalog.architectures)} (repeat).",
    )
    @click.option("--sign", metavar="KEY", help="Sign the list and each image in it (cosign, offline), as --sign does a build's.")
    @click.option(
        "--signature-format",
        type=click.Choice(SIGNATURE_FORMATS),
        default="both",
        show_default=True,
        help="With --sign: the forms made, as a build's --signature-format.",
    )
    @click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="auto",
        show_default=True,
        help="Taken as other commands take it; the tag is made through the registry's API whatever the engine.",
    )
    def manifest_command(
        target: str, sources: tuple[str, ...], arches: tuple[str, ...], sign: str | None, signature_format: str, engine: str
    ) -> None:
        """Join per-architecture images in a registry (SOURCES) as one multi-architecture tag (TARGET).

        For example: manifest ghcr.io/acme/torchstack:r26.11-torch-2.13.0-openblas
        ghcr.io/acme/torchstack:r26.11-torch-2.13.0-openblas-x86_64
        ghcr.io/acme/torchstack:r26.11-torch-2.13.0-openblas-aarch64 --arch x86_64 --arch aarch64
        """
        from torchstack.publishing.joining import join_architectures

        unknown = [a for a in arches if a not in catalog.architectures]
        if unknown:
            raise UsageProblem(f"unknown --arch {unknown[0]!r}; valid: {', '.join(catalog.architectures)}")
        try:
            tags.check_repository(target.rpartition(":")[0] if ":" in target.rsplit("/", 1)[-1] else target)
        except UsageProblem:
            raise UsageProblem(f"{target}: not a valid image name (HOST[:PORT]/NAME:TAG, lowercase)") from None
        if sign:
            from torchstack.publishing import signing

            sign = signing.check_signer(sign, signature_format)
        expected = {a: catalog.architectures[a].docker.split("/", 1)[1] for a in dict.fromkeys(arches)}
        digest = join_architectures(target, list(sources), expected, lambda line: click.echo(line, err=True))
        if sign:
            signed = signing.sign(f"{target.rpartition(':')[0]}@{digest}", sign, None, None, recursive=True, asked=signature_format)
            forms = signing.forms_said(signed, signature_format)
            click.echo(f"torchstack: signed {signed['reference']} and each image in it (cosign, no transparency log): {forms}", err=True)
        click.echo(f"{target}@{digest}")

    return manifest_command


def inspect_command(catalog: Catalog) -> click.Command:
    @click.command("inspect")
    @click.argument("image")
    @click.option("--json", "as_json", is_flag=True, help="Print it as JSON, for machines.")
    @engine_option
    def inspect_command(image: str, as_json: bool, engine: str) -> None:
        """What IMAGE says about itself: its build manifest and SBOM summary, from the image alone."""

        from torchstack.making import sbom

        chosen = connect(choose(engine))
        try:
            found, info, text = sbom.read_image(chosen, image)
        except NoSuchImage as exc:
            raise UsageProblem(str(exc)) from None
        except KeyError:
            raise UsageProblem(f"{image}: not a torchstack image (no {sbom.BUILD_INFO_LABEL} label)") from None
        report = {
            "image": image,
            "id": found.id,
            "created": found.created,
            "tags": list(found.tags),
            "labels_agree": found.labels.get("org.opencontainers.image.version") == info.get("release_tag"),
            "build_info": info,
            "sbom": sbom.summary(text) if text else None,
            "sbom_path": sbom.SBOM,
        }
        click.echo(json.dumps(report, indent=2) if as_json else format_inspection(report))

    return inspect_command


def test_command(catalog: Catalog) -> click.Command:
    @click.command("test")
    @click.argument("image")
    @click.option("--backend", help="Backend to check for, for an image without torchstack labels.")
    @click.option("--stage", help="Stage to check the image as (default: from its labels, else final).")
    @click.option(
        "-k", "select", metavar="EXPR", help="Run only the checks whose names match EXPR (pytest's -k); the pass is not recorded."
    )
    @click.option(
        "--archive-keyring",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        metavar="FILE",
        help="The key that signs the image's Debian mirrors, besides Debian's keys.",
    )
    @engine_option
    def test_command(
        image: str, backend: str | None, stage: str | None, select: str | None, archive_keyring: Path | None, engine: str
    ) -> None:
        """Check what is inside IMAGE: any image, ours or not. Then ask the -security suites its apt
        sources name whether an installed package has a fix pending there."""
        from torchstack.making import archive
        from torchstack.verify import checks

        chosen = connect(choose(engine))
        # A check run killed outright (SIGKILL) leaves its containers: the next run removes them.
        for line in sharing.sweep(chosen, state_dir() / "contexts"):
            click.echo(line, err=True)
        refused = chosen.cli_refused()
        if refused:
            raise UsageProblem(refused)
        result = checks.run_checks(chosen, catalog, image, backend=backend, stage=stage, select=select)
        print(result.output, end="")
        if not result.passed:
            raise ToolkitError(f"{image}: {result.summary}")
        click.echo(f"{image}: {result.summary} in {result.seconds:.0f} s")
        try:
            pending, suites = archive.pending_in(chosen, image, archive_keyring)
        except archive.ArchiveUnreachable as exc:
            click.echo(f"torchstack: {image}: security updates not checked: {exc}", err=True)
            return
        if pending:
            raise ToolkitError(f"{image}: {archive.describe(pending, suites)}")
        click.echo(f"{image}: no security update pending in {suites}")

    return test_command


def _rebuild_options(func):
    """What `verify --rebuild` takes besides the image: what the first build host gave of its own."""
    for option in reversed(
        (
            click.option(
                "--torch-wheel", metavar="PATH", help="With --rebuild: the torch wheel (a .whl file or a folder) the image was built from."
            ),
            click.option(
                "--ca-bundle",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                help="With --rebuild: a CA bundle for the package index (as a build's --ca-bundle).",
            ),
            click.option(
                "--archive-keyring",
                type=click.Path(exists=True, dir_okay=False, path_type=Path),
                metavar="FILE",
                help="With --rebuild: the key that signs the site's Debian mirrors, as the first build was given it.",
            ),
            click.option(
                "--json", "json_file", type=click.Path(dir_okay=False, path_type=Path), help="With --rebuild: the rebuild's --json summary."
            ),
        )
    ):
        func = option(func)
    return func


def verify_command(catalog: Catalog) -> click.Command:
    @click.command("verify")
    @click.argument("image")
    @click.option("--key", help="The signer's public key (cosign.pub) or a KMS reference (required but with --rebuild alone).")
    @click.option("--pull", is_flag=True, help="Then pull the verified digest (never the tag, which may move).")
    @click.option(
        "--rebuild",
        is_flag=True,
        help="Build IMAGE again on this engine from what it records (toolkit revision, request, SOURCE_DATE_EPOCH), "
        "with no cache, and compare: its ID where the same, else the layers and files that differ (exit 1).",
    )
    @_rebuild_options
    @engine_option
    def verify_command(image: str, key: str | None, pull: bool, rebuild: bool, json_file, engine: str, **given) -> None:
        """Check IMAGE in its registry before use: its signature (each image's, for a multi-architecture
        list), its SBOM and provenance attestations, both about this very digest, and the provenance
        against the image's build-info, and whether it pulls lazily (a SOCI index, which must be signed
        too). Prints the digest to pull. With --rebuild, build it again here and compare
        (docs/using/reproducible.md)."""
        from torchstack.publishing import cosign, signing
        from torchstack.registries import registry

        if not key and not rebuild:
            raise UsageProblem("verify needs --key (the signer's public key), --rebuild, or both")
        if (any(given.values()) or json_file) and not rebuild:
            raise UsageProblem("--torch-wheel, --ca-bundle, --archive-keyring and --json go with --rebuild")
        reference = image
        if key:
            registry.parse(image)
            found = signing.verify(image, signing.check_key(key, "--key", private=False))
            for line in found.images:
                click.echo(f"torchstack: verified {line}: signature, SBOM and provenance (this digest, its build-info)", err=True)
            forms = ", ".join(signing.FORM_WORDS[form] for form in found.forms)
            said = cosign.found("verify").said
            # Not a "verified" line: scripts read the image digests from those.
            click.echo(f"torchstack: {found.reference} signed as: {forms}; cosign {said} checked each form", err=True)
            for digest, indexes in found.lazy.items():
                lazily = f"pulls lazily: SOCI index {', '.join(indexes)}, signed" if indexes else "has no SOCI index: nodes pull it whole"
                click.echo(f"torchstack: {digest} {lazily}", err=True)
            reference = found.reference
        if pull or rebuild:
            chosen = connect(choose(engine))
        if pull:
            problem = chosen.pull(reference)
            if problem:
                raise ToolkitError(f"{reference} could not be pulled: {problem}")
            click.echo(f"torchstack: pulled {reference} ({chosen.kind})", err=True)
        if rebuild:
            from torchstack.verify import rebuild as rebuilding

            passed = {f"--{name.replace('_', '-')}": value for name, value in given.items()}
            passed["--engine"] = chosen.kind  # the build runs on this engine
            arguments = [word for option, value in passed.items() if value for word in (option, str(value))]
            same = rebuilding.verify(chosen, catalog, reference, arguments, json_file, lambda line: click.echo(line, err=True))
            click.echo(f"torchstack: reproduced {reference}: built again from what it records, it is the same image", err=True)
            click.echo(same)
            return
        click.echo(reference)

    return verify_command


def policy_command(catalog: Catalog) -> click.Command:
    @click.command("policy")
    @click.option("--registry", required=True, metavar="HOST[:PORT]/NAMESPACE", help="Where the signed images are (--push's --registry).")
    @click.option("--key", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path), help="The public key (cosign.pub).")
    @click.option("--output", required=True, type=click.Path(file_okay=False, path_type=Path), help="Folder to write the files in.")
    def policy_command(registry: str, key: Path, output: Path) -> None:
        """Write what nodes need to run only images under REGISTRY signed by KEY: policy.json and
        registries.d/torchstack.yaml (Podman, CRI-O, OpenShift: /etc/containers/), kyverno-policy.yaml."""
        from torchstack.publishing import policy
        from torchstack.request.tags import check_registry

        writable_folder(output, "--output", output)
        for path in policy.write(output, check_registry(registry), key):
            click.echo(path)

    return policy_command
