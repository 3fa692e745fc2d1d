"""`verify IMAGE --rebuild`: an image built again on this host from what it records, then compared layer by layer.

What the image records is its build-info (label and file): the toolkit's revision, the request
(backend, target, architecture, distribution, methods, versions, runtime, release, the Debian suites)
and, as its `created` time, the build's SOURCE_DATE_EPOCH. The torch wheel comes from the caller
(--torch-wheel), as it did for the first build. The build runs with no cache, under a repository of
its own, so that no image of the host's is replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

from torchstack.base.errors import ToolkitError, UsageProblem
from torchstack.base.references import check_reference
from torchstack.base.sharing import die_with_parent
from torchstack.catalog.model import Catalog
from torchstack.engines.engine import Engine, Image
from torchstack.making import archive
from torchstack.making.sbom import BUILD_INFO_LABEL
from torchstack.request.metadata import toolkit_revision


class NotReproduced(ToolkitError):
    """The image made again from the same inputs is another image."""


REPOSITORY = "torchstack-rebuild"  # the rebuild's images: never a name the host's own builds use
BASE_NAME_LABEL = "org.opencontainers.image.base.name"


def verify(engine: Engine, catalog: Catalog, image: str, given: list[str], summary: Path | None, note) -> str:
    """`image` built again on `engine` from what it records (`given`: the caller's --torch-wheel, --ca-bundle,
    --archive-keyring) and compared: its ID where the image made again is the same one (then removed);
    NotReproduced naming what differs where not (the images made again kept, for a closer look)."""
    found, info = recorded(engine, image)
    try:
        check_revision(image, info, toolkit_revision())
        check_engine(image, info, engine)
        args = [*arguments(catalog, info, found.labels), *given]
    except KeyError as exc:
        raise UsageProblem(f"{image}: its build-info label has no {exc.args[0]!r}: not one torchstack wrote") from None
    except (TypeError, AttributeError):
        raise UsageProblem(f"{image}: its build-info label is not laid out as torchstack writes one") from None
    with tempfile.TemporaryDirectory(prefix="torchstack-rebuild-") as work:
        made = build_again(args, epoch_of(found), summary or Path(work) / "summary.json")
    again = made["image_id"]
    if again == found.id:
        remove_images(engine, made)
        return found.id
    lines = differences(engine, found.id, again)
    for line in lines:
        note(line)
    raise NotReproduced(
        f"{image} is {found.id}; built again from what it records, it is {again} ({lines[0] if lines else 'the same files'}; "
        f"the images made again are kept: {made['stages'][-1]['tags'][-1]} and its stages)"
    )


def recorded(engine: Engine, image: str) -> tuple[Image, dict]:
    """The image on this engine (pulled where it is a registry's and not here) and its build-info."""
    if not engine.has_image(image) and engine.pull(image) is not None:
        raise UsageProblem(f"{image}: no such image on this engine, and none could be pulled")
    found = engine.image(image)
    info = found.labels.get(BUILD_INFO_LABEL)
    if not info:
        raise UsageProblem(f"{image}: no build-info label ({BUILD_INFO_LABEL}): not a release image of torchstack")
    try:
        parsed = json.loads(info)
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise UsageProblem(f"{image}: its build-info label ({BUILD_INFO_LABEL}) is not a JSON object: not one torchstack wrote")
    return found, parsed


def check_revision(image: str, info: dict, here: dict) -> None:
    """Refuses (one line) where this toolkit is not the revision that built the image."""
    built_by = info.get("toolkit", {}).get("revision")
    if not built_by:
        raise UsageProblem(f"{image}: built by an installed torchstack {info.get('toolkit', {}).get('version')}: no revision to check out")
    if built_by.endswith("-dirty"):
        raise UsageProblem(f"{image}: built from uncommitted changes to torchstack {built_by}: nobody can build it again")
    if here.get("revision") != built_by:
        raise UsageProblem(
            f"{image}: built by torchstack {built_by}, this is {here.get('revision') or here.get('version')}: "
            f"run `git checkout {built_by}` in the toolkit's checkout, then this command again"
        )


def check_engine(image: str, info: dict, engine: Engine) -> None:
    """Refuses (one line) an engine whose kind or image store differs from the one that built the image:
    the same step writes other layers on Docker's overlay2 store (opaque whiteouts, lock files) than on
    its containerd store, so the two never compare equal. Images that record no engine are tried as
    they are; the engine's release is in the provenance (the same release is the surest)."""
    built_on, here = info.get("engine"), engine.layers_made_by()
    if built_on and built_on != here:
        raise UsageProblem(
            f"{image}: built on {_engine_words(built_on)}; this engine is {_engine_words(here)}: the same steps make other "
            f"layers there. Rebuild it on {_engine_words(built_on)}"
        )


def _engine_words(made_by: dict) -> str:
    return f"{made_by['kind'].capitalize()} with the {made_by['store']} image store"


def arguments(catalog: Catalog, info: dict, labels: dict[str, str]) -> list[str]:
    """The build's command line, from the image's build-info: the request, less what was the first
    build host's own (its wheel folder, its CA bundle), which the caller gives."""
    if info.get("requirements"):
        raise UsageProblem("built with --requirements: rebuild it with ./build.py and that file (its sha256 is in the build-info)")
    if info["target"] not in {target.name for target in catalog.targets_for(info["arch"])}:
        raise UsageProblem(f"built for the custom target {info['target']!r}: rebuild it with ./build.py and its --custom-target file")
    args = ["--backend", info["backend"], "--build-target", info["target"], "--arch", info["arch"]]
    args += ["--distribution", info["distribution"], "--release", info["release"], "--runtime", info["runtime"]]
    for name, component in info["components"].items():
        if name not in catalog.components:
            raise UsageProblem(f"its build-info records a component {name!r} this toolkit does not know: not one torchstack wrote")
        if component["method"] != "source":
            args += [f"--{name}-from", component["method"]]
        elif name == "torch":
            args += ["--torch-version", info["torch_version"]]
        elif component["version"] != catalog.components[name].default_version:
            args += ["--source-version", f"{name}={component['version']}"]
    snapshot = info.get("debian_snapshot")
    lines = snapshot["image_apt_sources"] if snapshot else info.get("apt_sources", [])  # deb [options] URL SUITE main
    suites = [(url, names[0]) for url, names in archive.source_entries("\n".join(lines))]
    if not suites:
        if not labels.get(BASE_NAME_LABEL):
            raise UsageProblem(
                f"it records neither Debian suites nor the image it was built on ({BASE_NAME_LABEL}): nothing to build it from"
            )
        return [*args, "--base-image", check_reference(labels[BASE_NAME_LABEL], f"the image's label {BASE_NAME_LABEL}")]
    if snapshot:
        args += ["--debian-snapshot", snapshot["timestamp"], "--snapshot-archive", snapshot["archive"]]
    args += ["--debian-mirror", suites[0][0]]
    security = [url for url, suite in suites if suite.endswith("-security")]
    return [*args, *(["--security-mirror", security[0]] if security else ["--no-security-updates"])]


def epoch_of(found: Image) -> int:
    """The image's `created` time, which is its build's SOURCE_DATE_EPOCH, in seconds."""
    created = found.created.split(".")[0].removesuffix("Z")
    return int(datetime.fromisoformat(created + "+00:00").timestamp())


def build_again(args: list[str], epoch: int, summary: Path) -> dict:
    """The build, run as `./build.py ARGS` with no cache and no checks, its progress on stderr; its --json summary."""
    command = [sys.executable, "-m", "torchstack.cli", *args, "--repository", REPOSITORY, "--no-cache", "--no-test", "--json", str(summary)]
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH"))))
    environment = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "PYTHONPATH": path}
    build = subprocess.Popen(command, env=environment, stdout=sys.stderr, preexec_fn=die_with_parent)
    try:
        code = build.wait()
    except BaseException:  # Ctrl-C, a CI job's SIGTERM: the build removes what it started, as it does on its own
        build.terminate()
        build.wait(timeout=120)
        raise
    if code != 0:
        raise ToolkitError(f"the rebuild failed (exit {code}): its log says why")
    return json.loads(summary.read_text())


def remove_images(engine: Engine, summary: dict) -> None:
    """The rebuild's tags, stage images and release image alike."""
    for name in dict.fromkeys(tag for stage in summary["stages"] for tag in stage["tags"]):
        engine.remove_image(name, prune=True)


def differences(engine: Engine, first: str, second: str, limit: int = 8) -> list[str]:
    """What differs between two images, a line each: the configuration's fields, then each layer that
    differs (its step, as the history says) with the files only one image has or whose content, mode,
    owner or time differ."""
    lines = []
    one, two = engine.image(first), engine.image(second)
    for field in sorted(set(one.config) | set(two.config)):
        if one.config.get(field) != two.config.get(field):
            lines.append(f"config: {field} differs")
    with tempfile.TemporaryDirectory(prefix="torchstack-verify-") as work:
        (layers, steps), (others, _) = (_saved(engine, image.id, Path(work) / name) for image, name in ((one, "first"), (two, "again")))
    for index, (a, b) in enumerate(zip(layers, others, strict=False)):
        if a != b:
            changed = sorted(set(a) ^ set(b)) + sorted(name for name in set(a) & set(b) if a[name] != b[name])
            lines.append(f"layer {index + 1} of {len(layers)}: {len(changed)} files differ ({steps[index][:120]})")
            lines += [f"  /{name}" for name in changed[:limit]]
    if len(layers) != len(others):
        lines.append(f"{len(layers)} layers, made again {len(others)}")
    return lines


def _saved(engine: Engine, image: str, folder: Path) -> tuple[list[dict[str, tuple]], list[str]]:
    """Each layer of `image` (docker save) as its files, path -> (kind, mode, owner, time, sha256), and
    the step that made each, as the image's history says."""
    folder.mkdir()
    tarball = folder / "image.tar"
    with tarball.open("wb") as out:
        for chunk in engine.save(image):
            out.write(chunk)
    layers = []
    with tarfile.open(tarball) as saved:
        manifest = json.load(saved.extractfile("manifest.json"))[0]
        history = json.load(saved.extractfile(manifest["Config"])).get("history", [])
        for layer in manifest["Layers"]:
            with tarfile.open(fileobj=saved.extractfile(layer)) as tar:
                layers.append({m.name: _entry(tar, m) for m in tar})
    tarball.unlink()
    return layers, [h.get("created_by", "") for h in history if not h.get("empty_layer")]


def _entry(tar: tarfile.TarFile, member: tarfile.TarInfo) -> tuple:
    digest = member.linkname
    if member.isfile():
        content, read = hashlib.sha256(), tar.extractfile(member)
        while chunk := read.read(1 << 20):
            content.update(chunk)
        digest = content.hexdigest()
    return (member.type, member.mode, member.uid, member.gid, int(member.mtime), digest)
