"""A build's command line settled once, before any work, into the final plan with what it will push or sign."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path

from torchstack.base import redact, state
from torchstack.base.errors import HostNotReady, ToolkitError, UsageProblem
from torchstack.catalog.model import Catalog
from torchstack.catalog.wheels import check_transport, download_from_index, download_wheel, expected_sha256
from torchstack.engines import buildkit
from torchstack.engines.engine import Engine
from torchstack.making import sources
from torchstack.publishing import lazy, signing
from torchstack.registries import registry
from torchstack.request import requirements, tags
from torchstack.request.command_options import check_json_file, engine_from, request_from
from torchstack.request.plan import Plan, Request
from torchstack.request.planner import make_plan
from torchstack.request.run_settings import RunOptions


@dataclasses.dataclass(frozen=True)
class Settled:
    """What a build does, settled: the pipeline only carries it out."""

    request: Request
    plan: Plan  # made once, from the resolved wheel, plugins and requirements
    run: RunOptions  # the --sign key as cosign will take it
    pushes: tuple[tuple[str, str], ...]  # (local name, name in the registry) of each image --push sends
    notes: tuple[str, ...]  # lines the build says first (where the torch wheel came from)
    engine: Engine  # as --engine chose it (connection.choose), its refusals run: what the pipeline connects to


def settle(catalog: Catalog, options: Mapping[str, object]) -> Settled:
    """Every option checked, the inputs resolved and the plan made; a refusal is one line (exit 2)
    before any stage is built. Needs no engine: the pipeline checks what only the engine can say."""
    run = RunOptions.from_cli(options)
    check_json_file(run.json_file)
    if run.pip_index_url:
        check_transport(run.pip_index_url, "--pip-index-url")
    chosen = engine_from(options)
    request = request_from(options, chosen)
    chosen.refuse_index_login(request.builder, run.pip_index_url)
    _check_publishing(run)
    if run.buildx_builder and not buildkit.builder_exists(run.buildx_builder):
        raise UsageProblem(f"--buildx-builder {run.buildx_builder}: no such builder (see `docker buildx ls`)")
    first = make_plan(catalog, request)  # what to fetch: the wheel and plugins for its architecture and Python
    if run.sign:
        run = dataclasses.replace(run, sign=signing.check_signer(run.sign, run.signature_format))
    if run.push or run.push_stages:
        names = tags.wanted(first, run.registry, run.push_stages, checked=not run.no_test)  # before any download
        registry.check_push_access(names[-1][1])
    resolved, notes = _resolve_wheel(catalog, request, first)
    pending = [p.requirement for p in first.plugins if p.wheel is None]
    resolved = _fetch_plugins(resolved, first, pending, run.pip_index_url)
    plan = first if resolved == request and not pending else make_plan(catalog, resolved)  # the plan finds fetched wheels
    missing = [p.requirement for p in plan.plugins if p.wheel is None]
    if missing:
        raise ToolkitError(f"pip downloaded no wheel of {', '.join(missing)} for {plan.arch.name} cp{plan.distribution.python}")
    if plan.requirements:
        plan = dataclasses.replace(plan, requirements=requirements.resolve(plan, run.pip_index_url))
    pushes = tags.wanted(plan, run.registry, run.push_stages, checked=not run.no_test) if run.push or run.push_stages else []
    return Settled(resolved, plan, run, tuple(pushes), tuple(notes), chosen)


def _check_publishing(run: RunOptions) -> None:
    """What --compression, --lazy and --sign need besides --push."""
    lazy.check(run.lazy, run.push, run.compression)  # first: its refusals of the options come before any tool's
    if run.compression == "zstd":
        if not run.push:
            raise UsageProblem("--compression zstd applies to what --push sends: add --push and --registry")
        if shutil.which("skopeo") is None:
            raise HostNotReady("missing skopeo, which writes --compression zstd's layers: bash scripts/setup-host.sh installs it")
    if run.sign and not run.push:
        raise UsageProblem("--sign signs what --push sends: add --push and --registry")


def _resolve_wheel(catalog: Catalog, request: Request, plan: Plan) -> tuple[Request, list[str]]:
    """A torch wheel named by URL or index is downloaded now, and the request names the file; with a
    line saying where an index's wheel came from."""
    spec = plan.torch_wheel
    if spec is None or spec.kind in ("file", "dir"):
        return request, []
    notes = []
    dest = state.state_dir() / "wheels"
    if spec.kind == "index":
        index = spec.where or catalog.components["torch"].alternatives["wheel"].index
        path, origin = download_from_index(dest, plan.arch.name, plan.distribution.python, plan.torch_version, index)
        notes.append(f"torchstack: torch wheel {path.name} from {redact.url(origin)}")
    else:
        path = _wheel_from_url(spec.where, dest)
    return dataclasses.replace(request, torch_wheel=str(path)), notes


def _wheel_from_url(url: str, dest: Path) -> Path:
    """The wheel at `url`, downloaded once into a folder of `dest` named by the URL (its login left out:
    another token fetches the same file), held to its #sha256= where it gives one: a file that differs,
    or is no zip archive, is removed and refused in one line."""
    plain = redact.without_login(url)
    path = dest / hashlib.sha256(plain.encode()).hexdigest()[:16] / plain.split("#")[0].rsplit("/", 1)[-1]
    wanted = expected_sha256(url)
    if path.is_file() and (wanted is None or sources.sha256_of(path) == wanted):
        return path
    unchecked = path.with_name(f".{path.name}.{os.getpid()}.unchecked")
    try:
        sources.download(url.split("#")[0], unchecked)
        actual = sources.sha256_of(unchecked)
        if wanted is not None and actual != wanted:
            raise UsageProblem(
                f"--torch-wheel {redact.url(url)}: the file it serves has sha256 {actual}, not the one the URL names; nothing was kept"
            )
        if not zipfile.is_zipfile(unchecked):
            raise UsageProblem(f"--torch-wheel {redact.url(url)}: what it serves is no wheel (not a zip archive); nothing was kept")
        os.replace(unchecked, path)
    finally:
        unchecked.unlink(missing_ok=True)
    return path


def _fetch_plugins(request: Request, plan: Plan, pending: list[str], index_url: str | None) -> Request:
    """The plugin wheels `pending` (named NAME==VERSION, or a backend's own plugin) downloaded now, into
    the folder the request names: the final plan finds them there, and checks their torch requirements."""
    if not pending:
        return request
    if request.plugin_cache is None:
        request = dataclasses.replace(request, plugin_cache=state.state_dir() / "plugins")
    for requirement in pending:
        download_wheel(request.plugin_cache, plan.arch.name, plan.distribution.python, requirement, index_url)
    return request
