"""Each stage's build context: its Dockerfile, rendered from a Jinja template, with the files it copies."""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import jinja2

from torchstack.base import layout, reproducible
from torchstack.base.errors import ToolkitError
from torchstack.base.state import state_dir
from torchstack.catalog.model import PATCHES, ROOT, SCRIPTS, TEMPLATES
from torchstack.request.metadata import build_info
from torchstack.request.plan import RELEASE_STAGE, Plan, StagePlan
from torchstack.request.planner import env_line

EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class BuildSecrets:
    """Files that build steps need and no shipped layer may keep: the host's CA bundle
    (--ca-bundle) and a pip configuration naming the package index (--pip-index-url, whose URL
    may carry credentials). A builder with secret mounts (BuildKit, Podman's buildah) mounts them into
    the steps that reach the index; the legacy builder copies them into throwaway build stages only,
    which the settling step allows only for an index without a login (Engine.refuse_index_login).
    `mounted`: whether the builder mounts them (Builder.mounts_secrets); None where no builder said
    (`render`): as the plan's builder word says (BuildKit's)."""

    ca_bundle: Path | None = None
    pip_conf: Path | None = None
    mounted: bool | None = None

    # secret id -> (file name in a legacy build context, where pip is told to find it)
    PLACES: ClassVar[dict[str, tuple[str, str]]] = {"ca": ("ca-bundle.crt", "PIP_CERT"), "pip": ("pip.conf", "PIP_CONFIG_FILE")}

    def files(self) -> dict[str, Path]:
        """Secret id -> the file on the host, for those given."""
        given = {"ca": self.ca_bundle, "pip": self.pip_conf}
        return {key: path for key, path in given.items() if path is not None}

    def mounted_for(self, plan: Plan) -> bool:
        """Whether the steps read them as secret mounts (else as files the context holds)."""
        return plan.step_mounts if self.mounted is None else self.mounted


NO_SECRETS = BuildSecrets()


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["env_line"] = env_line
    env.filters["basename"] = posixpath.basename
    env.filters["quote"] = shlex.quote
    return env


_ENV = _environment()


def render_dockerfile(plan: Plan, stage: StagePlan, secrets: BuildSecrets = NO_SECRETS) -> str:
    try:
        return _render(plan, stage, secrets)
    except jinja2.TemplateError as exc:
        where = f"{getattr(exc, 'name', None) or stage.template}" + (f":{exc.lineno}" if getattr(exc, "lineno", None) else "")
        raise ToolkitError(f"template {where}: {exc.message}") from None


def _secret_uses(plan: Plan, secrets: BuildSecrets) -> list[dict[str, str]]:
    """For the templates: each given secret's id, context file, pip variable and path in a step."""
    uses = []
    for key in secrets.files():
        file, env = BuildSecrets.PLACES[key]
        path = f"/run/secrets/{key}" if secrets.mounted_for(plan) else f"/tmp/torchstack-{file}"
        uses.append({"id": key, "file": file, "env": env, "path": path})
    return uses


def _builder_values(plan: Plan) -> dict:
    """What the templates' preamble needs: BuildKit's or not, and BuildKit's shell that clamps each step's file times."""
    return {
        "buildkit": plan.step_mounts,  # the templates name it so: their text is in every stage's identity
        "file_epoch": reproducible.FILE_EPOCH,
        "clamp": json.dumps(reproducible.clamping_shell())[1:-1],
    }


def _render(plan: Plan, stage: StagePlan, secrets: BuildSecrets) -> str:
    text = _ENV.get_template(stage.template).render(
        plan=plan,
        stage=stage,
        layout=layout,
        secrets=_secret_uses(plan, secrets),
        secret_mounts=secrets.mounted_for(plan),
        payload=plan.payload,
        **_builder_values(plan),
    )
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def refresh_context(plan: Plan, image: str, upgrades: list[str], dest: Path) -> None:
    """The build context of the layer that brings the final stage's `image` up to date with the
    plan's suites: those suites, the apt sources it keeps where they are a snapshot's, the site's
    key, each upgrade as PACKAGE=VERSION."""
    (dest / "apt").mkdir(parents=True, exist_ok=True)
    (dest / "apt" / "sources.list").write_text(plan.apt.sources_list())
    if plan.apt.kept:
        (dest / "apt" / "sources-kept.list").write_text(plan.apt.kept_sources_list())
    keyring = plan.apt.keyring_name
    if keyring:
        shutil.copyfile(plan.apt.keyring, dest / "apt" / keyring)
    (dest / "apt" / "apt-upgrades.txt").write_text("".join(f"{line}\n" for line in upgrades))
    template = _environment().get_template("refresh.Dockerfile.j2")
    (dest / "Dockerfile").write_text(
        template.render(
            image=image,
            upgrades=upgrades,
            keyring=keyring,
            snapshot=plan.apt.snapshot if plan.apt.kept else None,
            record=layout.APT_UPGRADES,
            layout=layout,
            **_builder_values(plan),
        )
    )
    reproducible.set_times(dest)


def records_dockerfile(plan: Plan, image: str, sbom_path: str) -> str:
    """The Dockerfile of the release image's records layer on `image`: its build-info.json and
    sbom.cdx.json, from the context, at layout.BUILD_INFO and `sbom_path`."""
    template = _environment().get_template("records.Dockerfile.j2")
    return template.render(image=image, sbom=sbom_path, layout=layout, **_builder_values(plan))


def banner(plan: Plan) -> str:
    """What an interactive start of the final image says first (the entry point then lists the
    runtime defaults with their values at that start)."""
    compiles = (
        "torch.compile works: the C++ compiler and Python headers it needs are in the image"
        if plan.runtime == "full"
        else "slim runtime: no C++ compiler, so torch.compile is refused; eager mode works"
    )
    lines = [
        f"torchstack {plan.release_tag}",
        f"PyTorch {plan.torch_version} on {plan.backend.name}, built for {plan.target.name} ({plan.arch.name}, {plan.target.flag})",
        compiles,
        *(
            []
            if plan.apt.updates
            else [
                f"no security updates (--no-security-updates): Debian {plan.distribution.name} as released, "
                f"without its -updates and -security suites"
            ]
        ),
        f"examples: {layout.EXAMPLES_DIR} (see README.md there; each takes --benchmark)",
    ]
    for p in plan.plugins:
        registers = [f"torch.compile backend {b}" for b in (p.wheel.compile_backends if p.wheel else ())]
        registers += [f"device {d}" for d in (p.wheel.devices if p.wheel else ())]
        by = f" ({p.wheel.vendor})" if p.wheel and p.wheel.vendor else ""
        lines.append(f"plugin: {p.requirement.replace('==', ' ')}{by}" + (f": {', '.join(registers)}" if registers else ""))
    lines += [
        f"available, off by default: -e {name}={setting.value}  ({setting.why})"
        for name, setting in plan.payload.settings.items()
        if not setting.default
    ]
    if plan.payload.env:
        lines.append("runtime defaults (turn one off with docker run -e VAR= ...):")
    return "\n".join(lines)


def entrypoint_conf(plan: Plan) -> str:
    """The final image's entry point settings (scripts/entrypoint.sh), as shell assignments."""
    values = {
        "TORCHSTACK_TARGET": plan.target.name,
        "TORCHSTACK_FLAG": plan.target.flag,
        "TORCHSTACK_ARCH": plan.arch.name,
        "TORCHSTACK_CPUINFO_FIELD": plan.arch.cpuinfo_features,
        "TORCHSTACK_CPU_FEATURES": " ".join(plan.target.cpu_features),
        "TORCHSTACK_DEFAULTS": " ".join(plan.payload.env),
        "TORCHSTACK_CPU_WANTS": " ".join(plan.backend.cpu_wants.features) if plan.backend.cpu_wants else "",
        "TORCHSTACK_CPU_WANTS_WHY": plan.backend.cpu_wants.why if plan.backend.cpu_wants else "",
        "TORCHSTACK_PROBES": " ".join(plan.probe_args),
        "TORCHSTACK_BANNER": banner(plan),
    }
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())


def _place(src: Path, dest: Path) -> None:
    """Put a file into a context: a hard link to what the toolkit downloaded (sources and wheels are
    large), else a copy, since the context's times are then set (reproducible.set_times) and the
    user's own files (a checkout, a wheelhouse) keep theirs."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        dest.unlink()
    if src.resolve().is_relative_to(state_dir().resolve()):
        with contextlib.suppress(OSError):
            os.link(src, dest)
            return
    shutil.copyfile(src, dest)
    shutil.copymode(src, dest)


def _write_pins(path: Path, pins: tuple[str, ...]) -> None:
    """A pip constraints or requirements file: one `name==version` a line."""
    path.write_text("".join(f"{pin}\n" for pin in pins))


def _release_files(plan: Plan, dest: Path) -> list[str]:
    """The final stage's own files (plugins, requirements, the start-up hook, the examples, the
    entry point, the pins, the build info) into `dest`; the names of those not there yet."""
    missing: list[str] = []
    (dest / "plugins").mkdir()
    for p in plan.plugins:
        if p.wheel is not None:
            _place(p.wheel.path, dest / "plugins" / p.wheel.path.name)
        else:
            missing.append(f"{p.requirement} (a plugin wheel, downloaded when the build starts)")
    if app := plan.requirements:
        _place(app.path, dest / "requirements" / "requirements.txt")
        _write_pins(dest / "requirements" / "resolved.txt", app.resolved)
    # A folder for each copying step (templates/_common.j2: copy)
    for name in layout.SITE_FILES:
        _place(SCRIPTS / name, dest / "site" / name)
    shutil.copytree(EXAMPLES, dest / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("probe.py", "entrypoint.sh"):
        _place(SCRIPTS / name, dest / "toolkit" / name)
    (dest / "toolkit" / "entrypoint.conf").write_text(entrypoint_conf(plan))
    # torch's pins for its own step, and every pin for the plugins' step: an image with plugins
    # reuses the install of torch that an image without them made
    (dest / "constraints").mkdir()
    _write_pins(dest / "constraints" / "constraints.txt", plan.payload.torch_constraints)
    if plan.plugins:
        _write_pins(dest / "plugins" / "constraints.txt", plan.payload.python_constraints)
    (dest / "toolkit" / "build-info.json").write_text(json.dumps(build_info(plan), indent=2, sort_keys=True) + "\n")
    return missing


def assemble_context(
    plan: Plan,
    stage: StagePlan,
    dest: Path,
    sources: dict[str, Path],
    secrets: BuildSecrets = NO_SECRETS,
) -> list[str]:
    """Write the stage's Dockerfile and everything it COPYs into `dest`.

    `sources` maps a source file name to its verified file in the cache. Returns the names of
    the files the context needs but that were not given (only `render` tolerates those).
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    missing: list[str] = []
    dockerfile = render_dockerfile(plan, stage, secrets)
    (dest / "Dockerfile").write_text(dockerfile)
    for c in stage.components:
        if c.source is not None:
            _place(SCRIPTS / "prepare-source.sh", dest / "scripts" / c.name / "prepare-source.sh")
            _place(SCRIPTS / c.script, dest / "scripts" / c.name / c.script)
            patch_dir = PATCHES / c.name
            (dest / "patches" / c.name).mkdir(parents=True, exist_ok=True)
            if patch_dir.is_dir():
                for patch in patch_dir.iterdir():
                    _place(patch, dest / "patches" / c.name / patch.name)
            if c.source.filename in sources:
                _place(sources[c.source.filename], dest / "sources" / c.name / c.source.filename)
            else:
                missing.append(c.source.filename)
        if c.name == "torch" and c.method == "wheel":
            wheel = plan.torch_wheel_file
            if wheel is not None:
                _place(wheel, dest / "wheels" / wheel.name)
            else:
                missing.append(posixpath.basename(c.env["WHEEL"]))
    if stage.name == RELEASE_STAGE:
        missing += _release_files(plan, dest)
    if not secrets.mounted_for(plan):
        _copy_secrets(secrets, dockerfile, dest)
    reproducible.set_times(dest)
    return missing


def _copy_secrets(secrets: BuildSecrets, dockerfile: str, dest: Path) -> None:
    """For a builder without secret mounts, the secrets the Dockerfile COPYs into its throwaway stages, each
    readable by this user alone (0600, in a context folder made 0700) and removed with the run's contexts
    (run/pipeline.py). The layers of those stages stay in the engine's build cache: only secret mounts
    keep a login out of every layer, and an index with a login is refused for such a builder."""
    for key, path in secrets.files().items():
        name = BuildSecrets.PLACES[key][0]
        if f"COPY {name} " in dockerfile:
            dest.chmod(0o700)
            copy = os.open(dest / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(copy, "wb") as out, path.open("rb") as given:
                shutil.copyfileobj(given, out)
