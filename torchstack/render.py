"""Rendering: each stage's Dockerfile from its Jinja template, and the build context around it."""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2

from torchstack.errors import ToolkitError
from torchstack.model import ROOT
from torchstack.plan import CCACHE_DIR, IMAGE_PATH, SOURCES_DIR, VENV, Plan, StagePlan, env_line

TEMPLATES = ROOT / "templates"
SCRIPTS = ROOT / "scripts"
PATCHES = ROOT / "patches"
EXAMPLES = ROOT / "examples"


@dataclass(frozen=True)
class User:
    name: str = "torchstack"
    uid: int = 1000


USER = User()


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
    return env


_ENV = _environment()


def render_dockerfile(plan: Plan, stage: StagePlan, ca_bundle: bool) -> str:
    try:
        return _render(plan, stage, ca_bundle)
    except jinja2.TemplateError as exc:
        where = f"{getattr(exc, 'name', None) or stage.template}" + (f":{exc.lineno}" if getattr(exc, "lineno", None) else "")
        raise ToolkitError(f"template {where}: {exc.message}") from None


def _render(plan: Plan, stage: StagePlan, ca_bundle: bool) -> str:
    text = _ENV.get_template(stage.template).render(
        plan=plan,
        stage=stage,
        venv=VENV,
        sources_dir=SOURCES_DIR,
        image_path=IMAGE_PATH,
        ccache_dir=CCACHE_DIR,
        buildkit=plan.builder == "buildx",
        user=USER,
        ca_bundle=ca_bundle,
        runtime_packages=plan.runtime_packages,
        runtime_libdirs=plan.runtime_libdirs,
    )
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text


def _place(src: Path, dest: Path) -> None:
    """Put a file into a context: a hard link when possible (sources and wheels are large)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        dest.unlink()
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def assemble_context(
    plan: Plan,
    stage: StagePlan,
    dest: Path,
    sources: dict[str, Path],
    ca_bundle: Path | None,
) -> list[str]:
    """Write the stage's Dockerfile and everything it COPYs into `dest`.

    `sources` maps a source file name to its verified file in the cache. Returns the names of
    the files the context needs but that were not given (only `render` tolerates those).
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    missing: list[str] = []
    dockerfile = render_dockerfile(plan, stage, ca_bundle is not None)
    (dest / "Dockerfile").write_text(dockerfile)
    for c in stage.components:
        if c.source is not None:
            _place(SCRIPTS / "apply-patches.sh", dest / "scripts" / "apply-patches.sh")
            _place(SCRIPTS / c.script, dest / "scripts" / c.script)
            patch_dir = PATCHES / c.name
            (dest / "patches" / c.name).mkdir(parents=True, exist_ok=True)
            if patch_dir.is_dir():
                for patch in patch_dir.iterdir():
                    _place(patch, dest / "patches" / c.name / patch.name)
            if c.source.filename in sources:
                _place(sources[c.source.filename], dest / "sources" / c.source.filename)
            else:
                missing.append(c.source.filename)
        if c.name == "torch" and c.method == "wheel":
            wheel = plan.torch_wheel_file
            if wheel is not None:
                _place(wheel, dest / "wheels" / wheel.name)
            else:
                missing.append(posixpath.basename(c.env["WHEEL"]))
    if stage.name == "final":
        shutil.copytree(EXAMPLES, dest / "examples")
        (dest / "build-info.json").write_text(json.dumps(plan.build_info(), indent=2, sort_keys=True) + "\n")
    if ca_bundle is not None and "ca-bundle.crt" in dockerfile:
        shutil.copy2(ca_bundle, dest / "ca-bundle.crt")
    return missing
