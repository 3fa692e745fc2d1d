"""What an image says about itself: its OCI labels, its build-info, the variants in its tag."""

from __future__ import annotations

import functools
import hashlib
import json
import subprocess
from datetime import datetime, timezone

from torchstack.base.layout import VENV
from torchstack.base.version import VERSION as __version__
from torchstack.catalog.model import CHECKOUT, PACKAGE, PATCHES, SCRIPTS, TEMPLATES, Catalog
from torchstack.catalog.wheels import complex_dot_defect
from torchstack.request import tags
from torchstack.request.plan import RELEASE_STAGE, Plan, Request, Snapshot, StagePlan
from torchstack.request.selection import RUNTIMES, Selection

# How torch.__config__.show() names the BLAS (BLAS_INFO, LAPACK_INFO) for its build variable BLAS.
TORCH_BLAS_INFO = {"OpenBLAS": "open", "MKL": "mkl", "Eigen": "eigen", "BLIS": "blis", "APL": "armpl"}


def tag_variants(catalog: Catalog, selection: Selection, request: Request) -> tuple[str, ...]:
    """What sets this build apart from its backend's default build, in the order of the tag."""
    variants: list[str] = []
    if selection.target.name != "generic":
        variants.append(selection.target.name)
    elif len(selection.backend.arches) > 1:
        variants.append(selection.arch.name)
    if request.base_image:
        variants.append(tags.tag_safe(request.base_image.replace(":", "-").replace("/", "-")))
    elif selection.distribution.name != catalog.default_distribution:
        variants.append(selection.distribution.name)
    if selection.runtime != RUNTIMES[0]:
        variants.append(selection.runtime)
    if not request.security_updates:
        variants.append("no-security-updates")
    if request.debian_snapshot:
        variants.append("debian-" + Snapshot.timestamp_of(request.debian_snapshot, request.now or datetime.now(timezone.utc)))
    variants += [f"{name}.{method}" for name, method in selection.methods.items() if method != "source"]
    variants += [
        f"{name}-{tags.tag_safe(version)}"
        for name, version in request.versions.items()
        if name in selection.methods and version != catalog.components[name].default_version
    ]
    # Plugins and libraries the user adds make another image than the backend's own: another tag.
    backend_own = f"backend {selection.backend.name}"
    variants += [tags.tag_safe(f"{p.key}-{p.requirement.split('==', 1)[1]}") for p in selection.plugins if p.why != backend_own]
    return tuple(variants)


def torch_defects(plan: Plan) -> dict[str, str]:
    """What is known to be wrong in the plan's prebuilt torch, read from the wheel: name -> why.
    None for a torch compiled here (our patches fix what they can, and the checks prove it)."""
    why = complex_dot_defect(plan.torch_wheel_file) if plan.torch_wheel_file else None
    return {"complex-dot": why} if why else {}


def build_info(plan: Plan) -> dict:
    """What the release image records about how it was built (layout.BUILD_INFO)."""
    payload = plan.payload
    torch_compiled = plan.component("torch") is not None and plan.component("torch").method == "source"
    return {
        "release_tag": plan.release_tag,
        "release": plan.release,
        "arch": plan.arch.name,
        "backend": plan.backend.name,
        "target": plan.target.name,
        "target_flag": plan.target.flag,
        "distribution": plan.distribution.name,
        "python": plan.distribution.python,
        "torch_version": plan.torch_version,
        "venv": VENV,
        "mkldnn": plan.backend.mkldnn,
        "libraries": list(plan.backend.libraries),
        # What torch names as its BLAS and LAPACK when compiled here; a prebuilt wheel's are its own.
        "torch_blas": TORCH_BLAS_INFO[plan.backend.torch_env["BLAS"]] if torch_compiled else None,
        "cflags": plan.cflags,
        "components": {c.name: _component(c) for c in plan.components},
        "python_constraints": list(payload.python_constraints),
        "runtime": plan.runtime,
        "runtime_env": {name: {"value": s.value, "default": s.default, "why": s.why} for name, s in payload.settings.items()},
        "payload": {
            "libraries": [
                {"component": lib.component, "directory": lib.directory, "patterns": list(lib.patterns)} for lib in payload.libraries
            ],
            "packages": list(payload.packages),
        },
        "cpu_features": list(plan.target.cpu_features),
        "cpu_wants": plan.backend.cpu_wants.model_dump(mode="json") if plan.backend.cpu_wants else None,
        "probes": list(plan.probe_args),
        # Each vendor plugin wheel as its own metadata describes it (pins still to download: by name)
        "plugins": [p.wheel.record() if p.wheel else {"name": p.key, "requirement": p.requirement} for p in plan.plugins],
        # --requirements: the file's hash, and what pip resolved it to around the stack's pins
        "requirements": plan.requirements.record() if plan.requirements else None,
        "toolkit": toolkit_revision(),
        # The Debian suites its packages come from (sources.list lines); the release alone with --no-security-updates.
        "apt_sources": [suite.line for suite in plan.apt.suites] if plan.base_is_bootstrapped else [],
        # --debian-snapshot: that state of the archive, and the live suites the release image's apt sources name.
        **({"debian_snapshot": _snapshot(plan)} if plan.apt.snapshot else {}),
        # Known wrong in a prebuilt torch: the build warns, and the checks expect exactly that.
        "torch_defects": torch_defects(plan),
    }


def _snapshot(plan: Plan) -> dict:
    return {
        "timestamp": plan.apt.snapshot.timestamp,
        "archive": plan.apt.snapshot.archive,
        "image_apt_sources": [suite.line for suite in plan.apt.kept],
    }


def _component(c) -> dict:
    """A component as the build-info records it; one compiled here names its source and patches."""
    found = {"method": c.method, "version": c.version, "prefix": c.prefix}
    if c.method == "distro":
        # Whatever version of these Debian's suites hold: the release image records it as installed.
        found.update(version=None, packages=list(c.runtime_packages))
    if c.method == "source" and c.source is not None:
        found["source"] = {"url": c.source.url, "sha256": c.source.sha256, "sha256_from": c.source.sha256_from}
        found["patches"] = applied_patches(c.name)
    return found


def applied_patches(component: str) -> list[dict]:
    """The patches scripts/prepare-source.sh applies to `component`, in order (patches/<name>/series)."""
    folder = PATCHES / component
    series = folder / "series"
    if not series.is_file():
        return []
    lines = [line.split() for line in series.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [
        {"name": name, "sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest(), "upstream": " ".join(rest)}
        for name, *rest in lines
    ]


@functools.lru_cache(maxsize=1)
def toolkit_revision() -> dict:
    """The toolkit's version and, in a git checkout, its commit (`-dirty` with uncommitted changes)
    and the commit's time (seconds since 1970, `committed`)."""
    found = {"version": __version__, "revision": None, "committed": None}
    if CHECKOUT is None:  # installed from a wheel: its version says it all
        return found
    try:
        described = subprocess.run(
            ["git", "-C", str(CHECKOUT), "describe", "--always", "--dirty", "--abbrev=12", "--match=NONE"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return found
    if described.returncode == 0:
        found["revision"] = described.stdout.strip()
        committed = subprocess.run(["git", "-C", str(CHECKOUT), "log", "-1", "--format=%ct"], capture_output=True, text=True, timeout=10)
        found["committed"] = int(committed.stdout) if committed.returncode == 0 and committed.stdout.strip().isdigit() else None
    return found


def stage_labels(plan: Plan, stage: StagePlan) -> dict[str, str]:
    """A stage image's OCI labels and build information. The release image (RELEASE_STAGE)
    carries all of it; an earlier stage only what its own content depends on (`content`). Labels
    are part of an image, and the next stage is built FROM it: a backend's name, a release or a
    torch version in the libs image would make another backend or torch recompile OpenBLAS."""
    if stage.name != RELEASE_STAGE:
        info = content(plan, stage)
        return {
            "org.opencontainers.image.licenses": "BSD-3-Clause",
            "org.opencontainers.image.base.name": plan.base_image,
            "org.opencontainers.image.title": f"torchstack {stage.name} stage for {plan.distribution.name} {plan.arch.name}"
            + (f" ({info['target']})" if "target" in info else ""),
            "io.torchstack.arch": plan.arch.name,
            "io.torchstack.stage": stage.name,
            "io.torchstack.build-info": json.dumps(info, sort_keys=True),
        }
    info = build_info(plan)
    return {
        "org.opencontainers.image.licenses": "BSD-3-Clause",
        "org.opencontainers.image.base.name": plan.base_image,
        "org.opencontainers.image.title": f"PyTorch {plan.torch_version} on {plan.backend.name} for {plan.target.name} ({plan.arch.name})",
        "org.opencontainers.image.version": plan.release_tag,
        "org.opencontainers.image.revision": info["toolkit"]["revision"] or "",
        "io.torchstack.arch": plan.arch.name,
        "io.torchstack.backend": plan.backend.name,
        "io.torchstack.target": plan.target.name,
        "io.torchstack.stage": stage.name,
        "io.torchstack.release": plan.release,
        "io.torchstack.torch.version": plan.torch_version,
        "io.torchstack.runtime": plan.runtime,
        "io.torchstack.plugins": " ".join(p.requirement for p in plan.plugins),
        "io.torchstack.security-updates": "yes: " + " ".join(s.name for s in plan.apt.suites[1:])
        if plan.apt.updates
        else "no (--no-security-updates)",
        "io.torchstack.build-info": json.dumps(info, sort_keys=True),
    }


def content(plan: Plan, stage: StagePlan) -> dict:
    """What an earlier stage's image holds, as its build-info label records it: the architecture,
    the distribution, the components built in it or in a stage it is built from, and the target
    and its flags only when one of them is compiled here (a base stage, or a libs stage of Debian's
    OpenBLAS, is the same for every target). No backend, release or plugin: two backends whose
    earlier stages hold the same things share them."""
    info = build_info(plan)
    components = [c for c in plan.components if c.stage in stage.upstream]
    found = {key: info[key] for key in ("arch", "distribution", "python", "venv")}
    found["components"] = {c.name: info["components"][c.name] for c in components}
    if any(c.method == "source" for c in components):
        found.update({key: info[key] for key in ("target", "target_flag", "cflags")})
    if any(c.name == "torch" for c in components):
        found["torch_version"] = plan.torch_version
    return found


def stage_identity(plan: Plan, stage: StagePlan) -> str:
    """A digest of everything that goes into an earlier stage's image: the image it is built FROM
    (itself named by its identity, up to the OS image), the stages it copies from, the Dockerfile
    template, its Debian packages, its labels (`content`), and for each component built in it the
    source's sha256, the script inputs, build packages and requirements, the script itself and
    its patches. Two plans with the same identity for a stage build the same image: the planner
    names the stage image by it. The builder counts too: BuildKit and the legacy builder make
    different images of one Dockerfile, neither usable as the other's cache, and one name for both
    would let each replace the other."""
    own = [c for c in plan.components if c.stage == stage.name]
    recipe = {
        "builder": plan.builder,
        "from": stage.parent_image,
        "copies": stage.copies,
        "packages": sorted(stage.packages),
        "labels": stage_labels(plan, stage),
        "components": [
            {
                "name": c.name,
                "env": c.env,
                "build_packages": sorted(c.build_packages),
                "downloads": list(c.downloads),
                "source": c.source.sha256 if c.source else None,
            }
            for c in own
        ],
    }
    digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode())
    files = [TEMPLATES / stage.template, TEMPLATES / "_common.j2", PACKAGE / "base" / "layout.py"]
    files += [SCRIPTS / name for c in own if c.source for name in ("prepare-source.sh", c.script)]
    files += [p for c in own if c.source and (PATCHES / c.name).is_dir() for p in sorted((PATCHES / c.name).iterdir())]
    for path in files:
        # layout.py under the name it had before the package had folders: a move renames no image.
        named = "torchstack/layout.py" if path.name == "layout.py" else f"{path.parent.name}/{path.name}"
        digest.update(named.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def stage_image(plan: Plan, stage: StagePlan) -> str:
    """An earlier stage's image name: what it holds, readably, and its identity's first 12 digits,
    e.g. torchstack-tools:bookworm-x86_64-numpy-2.3.5-0b1c2d3e4f5a."""
    info = content(plan, stage)
    own = [
        {"source": f"{c.name}-{tags.tag_version(c.version)}", "wheel": f"{c.name}.wheel-{tags.tag_version(c.version)}"}.get(
            c.method, f"{c.name}.{c.method}"
        )
        for c in plan.components
        if c.stage == stage.name
    ]
    readable = "-".join([plan.distribution.name, plan.arch.name, *([info["target"]] if "target" in info else []), *own])
    return f"{plan.repository}-{stage.name}:{readable[:110]}-{stage_identity(plan, stage)[:12]}"
