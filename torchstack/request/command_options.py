"""The options that describe a build, declared once for every command that plans one."""

from __future__ import annotations

import functools
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

import click

from torchstack.base import redact
from torchstack.base.errors import UsageProblem
from torchstack.base.references import check_reference
from torchstack.base.state import state_dir
from torchstack.catalog.model import Catalog
from torchstack.catalog.wheels import pip_index_settings
from torchstack.engines.connection import ENGINES, builder_asked, choose, settle_builder
from torchstack.engines.engine import Engine
from torchstack.request.plan import Request
from torchstack.request.run_settings import COMPRESSIONS, LAZY_FORMATS, SIGNATURE_FORMATS
from torchstack.request.selection import BUILD_TYPES, BUILDERS, RUNTIMES


def _parse_pins(values: tuple[str, ...]) -> dict[str, str]:
    pins = {}
    for value in values:
        name, sep, version = value.partition("=")
        if not sep or not name or not version:
            raise click.BadParameter(f"{value!r}: expected COMPONENT=VERSION, e.g. openblas=0.3.28")
        pins[name] = version
    return pins


engine_option = click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="auto",
    show_default=True,
    envvar="TORCHSTACK_ENGINE",
    help="The container engine: docker, or podman (its API service: `podman system service`). auto: the one "
    "DOCKER_HOST (or Podman's CONTAINER_HOST) names, else Docker's socket if present, else Podman's. "
    "Default: $TORCHSTACK_ENGINE.",
)


def _check_apt_mirror(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An apt mirror's URL, refused where it holds a login: every stage's apt sources (a layer) name it as given."""
    if value and re.match(r"[A-Za-z][\w+.-]*://[^/?#]*@", value):
        raise UsageProblem(
            f"{param.opts[0]} {redact.url(value)}: a login in it would be written into the image's apt sources (a layer); "
            "serve the mirror to the build host without one instead (on the build network, or by an IP allow-list)"
        )
    return value


def archive_options(func):
    """Where the Debian suites come from: Debian's archive, or a site's mirrors and key."""
    mirror = functools.partial(click.option, metavar="URL", callback=_check_apt_mirror)

    @mirror("--debian-mirror", help="Debian archive (a mirror) serving the release and its -updates suite (default: the distribution's).")
    @mirror("--security-mirror", help="Where the -security suite is, where a site mirrors it apart (default: Debian's security archive).")
    @click.option(
        "--no-security-updates",
        "no_security_updates",
        is_flag=True,
        help="Build from the release suite alone, without its -updates and -security suites and without the "
        "release gate; the tag and labels say so.",
    )
    @click.option(
        "--debian-snapshot",
        metavar="TIME",
        help="Build from Debian's archive as it was at TIME (UTC: 20261101T000000Z or 2026-11-01), as Debian's snapshot "
        "archive serves it: the same request then installs the same packages. The release image's apt sources name "
        "the live suites (--debian-mirror, --security-mirror, else Debian's).",
    )
    @mirror(
        "--snapshot-archive",
        help="Who serves --debian-snapshot: a site's copy of Debian's snapshot archive, the same paths "
        "(URL/archive/debian/TIME, URL/archive/debian-security/TIME). Default: http://snapshot.debian.org.",
    )
    @click.option(
        "--archive-keyring",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        metavar="FILE",
        help="An OpenPGP key (.gpg or .asc) that signs the mirrors besides Debian's keys; the images trust it.",
    )
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def plan_options(catalog: Catalog):
    """The options that describe a build, shared by build, plan, render and fetch."""
    options = [*_what_to_build(catalog), *_what_goes_in(catalog)]

    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return archive_options(func)

    return decorate


def _what_to_build(catalog: Catalog) -> list:
    """The stage, backend, CPU, versions and names of a build."""
    return [
        click.option(
            "--build-type",
            type=click.Choice(BUILD_TYPES),
            default="full",
            show_default=True,
            help="Stage to build, with whatever it needs (pytorch = final).",
        ),
        click.option("--backend", help=f"One of: {', '.join(sorted(catalog.backends))}. Default per architecture."),
        click.option(
            "--build-target",
            default="generic",
            show_default=True,
            help="CPU to tune for: generic, native, custom, or a named target (see `list targets`).",
        ),
        click.option("--arch", help="Image architecture (default: the target's, the backend's, or this host's)."),
        click.option(
            "--custom-target",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="YAML file with one target entry, for --build-target custom.",
        ),
        click.option("--jobs", type=click.IntRange(min=1), help="Parallel compile jobs (default: bounded by cores and memory)."),
        click.option("--torch-version", help="PyTorch version (default: the pinned one, or the wheel's)."),
        click.option(
            "--source-version",
            "source_versions",
            multiple=True,
            metavar="COMPONENT=VERSION",
            help="Another pinned version of a component, e.g. openblas=0.3.28.",
        ),
        click.option("--release", help="Release in the tag, rYY.MM (default: this UTC month)."),
        click.option("--repository", default="torchstack", show_default=True, help="Image repository name."),
        click.option("--tag", help="Use this tag instead of the computed release tag."),
        click.option("--distribution", help=f"Debian release: {', '.join(sorted(catalog.distributions))}."),
        click.option(
            "--base-image",
            callback=_check_base_image,
            help="OS image to start from instead of the bootstrapped Debian (Debian-family).",
        ),
    ]


def _what_goes_in(catalog: Catalog) -> list:
    """Where torch and the final image's packages come from, the runtime, the engine and builder."""
    options = [
        click.option("--torch-wheel", help="With --torch-from wheel: a .whl file, a folder of wheels, a URL, or 'index'."),
        click.option(
            "--plugin-wheel",
            "plugin_wheels",
            multiple=True,
            metavar="FILE|DIR|NAME==VERSION",
            help="A vendor plugin wheel to install into the final image (repeat for several): a .whl file, a "
            "folder of them, or NAME==VERSION from the package index. One whose torch requirement excludes "
            "the image's torch is refused before anything is built.",
        ),
        click.option(
            "--with",
            "libraries",
            multiple=True,
            metavar="LIBRARY[,LIBRARY]",
            help=f"Domain libraries for the final image, at the version paired with its torch: "
            f"{', '.join(sorted(n for n, p in catalog.plugins.items() if p.library))}.",
        ),
        click.option(
            "--requirements",
            type=click.Path(path_type=Path),
            metavar="FILE",
            help="A team's packages for the final image (pip's requirements format; hashes honoured), resolved "
            "before any build with torch, numpy, plugins and libraries held: a conflict is refused in one line.",
        ),
        click.option(
            "--runtime",
            type=click.Choice(RUNTIMES),
            default=RUNTIMES[0],
            show_default=True,
            help="full: the final image ships the C++ compiler, Python headers and openssl that torch.compile "
            "needs at run time. slim: without them (torch.compile is refused), for sites that forbid compilers.",
        ),
        engine_option,
        click.option(
            "--builder",
            type=click.Choice(BUILDERS),
            default="auto",
            show_default=True,
            help="docker: the engine's legacy builder (Docker's, or Podman's buildah). buildx: BuildKit, with a "
            "ccache cache mount and the CA as a secret. auto: buildx where buildx is installed and the engine builds "
            "with BuildKit by default (Docker 23 and later) or PyTorch is compiled; else docker.",
        ),
    ]
    for component in (c for c in catalog.components.values() if c.alternatives):
        options.append(
            click.option(
                f"--{component.name}-from",
                f"from_{component.name}",
                type=click.Choice(component.methods),
                default="source",
                show_default=True,
                help=f"Where {component.name} comes from.",
            )
        )

    return options


def _check_index_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value:
        pip_index_settings(value)
    return value


def _check_base_image(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    return check_reference(value, "--base-image") if value is not None else None


def _check_cache_registry(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from torchstack.request.tags import check_registry

    return check_registry(value, "--cache-from") if value else None


def build_options(func):
    """The options of a build alone (not of plan, render or fetch): how it runs, where it pushes."""

    @click.option("--no-cache", is_flag=True, help="Build every step again.")
    @click.option(
        "--dry-run",
        is_flag=True,
        help="Settle the request as a build does (wheel, plugins, --sign key, --push login) and print the plan; "
        "build, push and sign nothing (the engine is asked only what it is).",
    )
    @click.option("--no-test", is_flag=True, help="Skip the image checks after the final stage.")
    @click.option("--recheck", is_flag=True, help="Run the image checks even if they passed on this image ID with the same checks before.")
    @click.option("--quiet", is_flag=True, help="No live view; print only the result.")
    @click.option(
        "--json",
        "json_file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write a machine-readable summary (images, tags, sizes, times) here.",
    )
    @click.option(
        "--ca-bundle",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        envvar="PIP_CERT",
        help="Extra CA bundle for pip inside builds (default: $PIP_CERT); never left in an image.",
    )
    @click.option(
        "--pip-index-url",
        envvar="PIP_INDEX_URL",
        metavar="URL",
        callback=_check_index_url,
        help="Python package index for pip inside builds, e.g. a local mirror (default: $PIP_INDEX_URL); "
        "like the CA bundle, never left in an image.",
    )
    @click.option(
        "--buildx-builder",
        metavar="NAME",
        help="With --builder buildx: build on this `docker buildx create` builder (remote, Kubernetes); "
        "the image comes back here for the checks.",
    )
    @publish_options
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def publish_options(func):
    """Where a build's images go: pushed, signed, and the registries and caches it reuses."""

    @click.option(
        "--push", is_flag=True, help="After the checks pass, push the release image to --registry (credentials: the Docker config)."
    )
    @click.option(
        "--sign",
        metavar="KEY",
        help="With --push, sign the pushed release image and attest its SBOM and provenance with cosign, "
        "offline: a key file (password in $COSIGN_PASSWORD) or a KMS reference (awskms://...).",
    )
    @click.option(
        "--signature-format",
        type=click.Choice(SIGNATURE_FORMATS),
        default="both",
        show_default=True,
        help="With --sign: bundle (a Sigstore bundle as an OCI referrer: cosign 3), legacy (.sig/.att tags: cosign 2, "
        "policy.json, Kyverno's Cosign type), or both, where the host's cosign makes both (cosign 2 makes legacy only).",
    )
    @click.option(
        "--compression",
        type=click.Choice(COMPRESSIONS),
        default="gzip",
        show_default=True,
        help="Layers of the pushed release image. zstd: smaller and unpacked faster; pulled by containerd 1.5+ "
        "(Kubernetes nodes), Docker 23+, Podman and CRI-O, not by Docker 20.10 (pushed with skopeo; the stages stay gzip).",
    )
    @click.option(
        "--lazy",
        type=click.Choice(LAZY_FORMATS),
        help="With --push, also push a SOCI index of the release image and sign it with --sign's key: containerd "
        "nodes with the SOCI snapshotter start it before its pull ends; other engines pull the same image as before "
        "(needs root and bash scripts/setup-host.sh --lazy).",
    )
    @click.option("--push-stages", is_flag=True, help="Push the stage images too, so other hosts' builds start from them (implies --push).")
    @click.option(
        "--registry",
        metavar="HOST[:PORT]/NAMESPACE",
        help="Where --push sends images, e.g. ghcr.io/acme: the image becomes ghcr.io/acme/torchstack:TAG.",
    )
    @click.option(
        "--cache-from",
        metavar="HOST[:PORT]/NAMESPACE",
        callback=_check_cache_registry,
        help="Reuse the stage images another host pushed there (--push-stages) as build cache: the "
        "engine reuses each step that matches and builds what changed.",
    )
    @click.option(
        "--ccache-dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Keep BuildKit's compiler cache in this host folder too: loaded before the build, saved "
        "after it, for CI caches (implies --builder buildx).",
    )
    @click.option("--source-mirror", help="Folder or URL holding the pinned source files (air-gapped hosts).")
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def engine_from(options: Mapping[str, object]) -> Engine:
    """The engine --engine asks for (connection.choose), chosen once per command: what the request is
    settled for, and what a build then connects to."""
    return choose(str(options.get("engine") or "auto"))


def request_from(options: dict, chosen: Engine) -> Request:
    """The request the options describe, for the engine `chosen` (engine_from): what it cannot carry
    out is refused in one line, and --builder auto is settled on it."""
    methods = {k.removeprefix("from_"): v for k, v in options.items() if k.startswith("from_") and v != "source"}
    chosen.refuse({**options, "zstd": options.get("compression") == "zstd"})
    builder = builder_asked(options["builder"], options)
    return Request(
        builder=settle_builder(builder, methods.get("torch", "source") == "source", chosen),
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
        libraries=tuple(dict.fromkeys(n.strip() for text in options.get("libraries") or () for n in text.split(",") if n.strip())),
        plugin_cache=state_dir() / "plugins",
        requirements=options.get("requirements"),
        debian_mirror=options.get("debian_mirror"),
        security_mirror=options.get("security_mirror"),
        security_updates=not options.get("no_security_updates"),
        archive_keyring=options.get("archive_keyring"),
        debian_snapshot=options.get("debian_snapshot"),
        snapshot_archive=options.get("snapshot_archive"),
    )


def writable_folder(folder: Path, option: str, given: Path) -> None:
    """Refuse, before any work, a place no file can be written to (made if missing)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise UsageProblem(f"{option} {given}: cannot write in {folder}: {exc.strerror or exc}") from None


def check_json_file(path: Path | None) -> None:
    if path is not None:
        writable_folder(path.parent, "--json", path)
